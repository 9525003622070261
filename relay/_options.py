"""The relay's tunables, with their defaults (durations in seconds, sizes in bytes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from ssl import SSLContext

from transport.checks import Check
from transport.frames import Multitask, ThreadAccess

from .auth import MAX_TOKEN_BYTES

__all__ = ["RelayOptions"]


@dataclass(frozen=True)
class RelayOptions:
    """Everything ``relay.serve(**options)`` takes besides host, port and store."""

    max_frame_bytes: int = 1024 * 1024
    """Frames larger than this get a ``PAYLOAD_TOO_LARGE`` error; the connection stays."""
    hard_frame_bytes: int = 4 * 1024 * 1024
    """Frames larger than this close the connection (WebSocket 1009)."""
    send_queue_bytes: int = 8 * 1024 * 1024
    """A connection whose unsent frames exceed this is closed ``SLOW_CONSUMER`` (4008)."""
    max_inflight: int = 1000
    """Publishes one connection may have waiting for the store before ``RATE_LIMITED``."""
    agent_grace: float = 30.0
    """How long an agent may be gone before its active Runs end ``AGENT_LOST``."""
    history_page_max: int = 1000
    """The most entries one attach or history page returns."""
    backlog_max: int = 100_000
    """The most entries a resume replays; beyond it the client gets a ``reset``."""
    secret: str | None = field(default=None, repr=False)
    """Verify HS256 tokens with this shared secret."""
    public_key: str | None = None
    """Verify RS256 / ES256 tokens with this PEM public key."""
    max_token_bytes: int = MAX_TOKEN_BYTES
    """The largest token accepted (``UNAUTHORIZED``, ``details.reason`` ``too_large``, past
    it). The request line and the ``Authorization`` header of a handshake or HTTP request
    get this much room beyond websockets' 8 KiB line limit, so that a token fits in either."""
    allow_anonymous: bool = False
    """Without ``secret`` / ``public_key``, listen on a non-loopback host anyway."""
    multitask: Multitask = "alongside"
    """The strategy of prompts that name none (every node of a cluster must agree)."""
    thread_access: ThreadAccess = "own"
    """Sessions whose first prompt says nothing are shared (``shared``) or not (``own``)."""
    max_concurrent_runs: int | None = None
    """Runs running (pending or active) at once on this relay node; more wait, queued."""
    index_html: str | None = None
    """A path to an HTML file served at ``GET /`` (``runwire demo`` serves its chat page)."""
    input_checks: Sequence[Check] = ()
    """Checks every message entry passes before it is stored (see ``transport.checks``)."""
    max_run_seconds: float | None = None
    """The longest a Run may stay active from a start before the relay ends it ``cancelled``
    (``RUN_TIMEOUT``); an agent's shorter ``timeout`` wins. None: no limit."""
    keepalive_timeout: float = 10.0
    """A connection that answers no WebSocket ping for this long is closed as dead (then an
    agent's Runs get ``agent_grace``): pings go every 0.4 of it, each waits 0.4 for its
    pong, and the close handshake at most 0.2 (at most 2 s)."""
    rollup_window: float = 0.0
    """Seconds a subscriber's deliveries of streamed appends (``response_append``) may wait
    so that several leave in one ``deliver`` frame; any other frame for the connection
    sends them at once. 0 (the default): none waits."""
    hello_timeout: float = 10.0
    """A connection that sends no ``hello`` this long after its handshake is answered with
    an error (its token's refusal, else ``PROTOCOL_ERROR``) and closed."""
    allowed_origins: Sequence[str] | None = None
    """The web pages (``Origin`` headers) that may connect or call the HTTP API; others get
    403. None: the relay's own origin, plus ``http://localhost:*`` and
    ``http://127.0.0.1:*`` on an anonymous loopback relay (``relay._origins``)."""
    max_connections: int | None = 10_000
    """Connections open at once; one more is answered 503 ``RATE_LIMITED`` and closed."""
    max_connections_per_ip: int | None = None
    """Connections open at once from one address; one more is answered 429 ``RATE_LIMITED``
    (None: no cap, as behind a proxy every connection comes from one address)."""
    request_timeout: float = 10.0
    """Seconds a connection has to send its whole request (head and body); then 408."""
    http_idle_timeout: float = 15.0
    """Seconds an HTTP connection stays open, between requests, for the next one (keep-alive);
    then it closes."""
    ssl_certfile: str | None = None
    """A PEM certificate chain: the relay serves ``wss://`` and ``https://`` on its port."""
    ssl_keyfile: str | None = None
    """The PEM private key of ``ssl_certfile`` (None: the key is in that file)."""
    ssl: SSLContext | None = None
    """A server TLS context, instead of ``ssl_certfile`` / ``ssl_keyfile``."""
