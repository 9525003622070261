"""``serve()``: the relay on one port: WebSocket connections, and HTTP beside them.

Every connection is read first by the HTTP front (``relay._http_front``): a
WebSocket handshake goes on to websockets, any other request is answered by
``relay._http_routes`` (``/v1`` API, ``/healthz``, ``/metrics``, ``/client.js``,
the chat page). ``docs/explanation/http-front.md`` explains the design.

A WebSocket connection's first frame must be ``hello`` (answered by
``welcome``); anything else first is answered with a ``PROTOCOL_ERROR`` and the
connection closes (4002). Frames over ``max_frame_bytes`` get
``PAYLOAD_TOO_LARGE`` and the connection stays; frames over ``hard_frame_bytes``
close it (1009).

Tokens. With ``secret`` and/or ``public_key`` every connection presents a JWT
(``Authorization: Bearer``, or the ``token`` query parameter for browsers). A
missing, forged, expired or too large token is answered at ``hello`` by an
``error`` frame and a close with 4001 (4003 when expired): the handshake itself
succeeds so that browsers can read the code. A connection whose token expires
later is closed with 4003 then; one that sends no ``hello`` within
``hello_timeout`` is answered and closed. Without either key the relay is
anonymous, says so in its log, and refuses to listen on a host that is not
loopback unless ``allow_anonymous=True``.

TLS. With ``ssl_certfile`` (and ``ssl_keyfile``) or an ``ssl`` context the
port speaks TLS only: ``wss://`` and ``https://``, and ``Server.url`` /
``Server.http_url`` say so. Every record of the websockets and runwire loggers
has its tokens redacted (``transport.redact``).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import fields
from typing import Any

from websockets.asyncio.server import Server as WSServer
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed

from transport import _codec as codec
from transport import logcontext
from transport._keepalive import keepalive
from transport.errors import PROTOCOL_ERROR, TOKEN_EXPIRED, UNAUTHORIZED, CloseCode, RunwireError
from transport.frames import Hello, Welcome
from transport.messages import new_id
from transport.redact import install as redact_tokens

from ._admission import Admission
from ._front_connection import FrontConnection, connection_class
from ._handshake_log import install as quiet_handshake_log
from ._http_api import HttpApi
from ._http_front import FrontConfig
from ._http_routes import Site
from ._hub import Hub
from ._metrics import Metrics
from ._options import RelayOptions
from ._origins import OriginPolicy
from ._peer import Flusher, Peer
from .auth import TokenVerifier, token_from_request
from .store import open_store
from .store._base import Store

__all__ = ["Server", "serve"]

log = logging.getLogger("runwire.relay")


class Server:
    """A running relay: ``.url`` (ws:// or, with TLS, wss://), ``.http_url``, ``.port``,
    ``.hub``, ``.store``, ``.admission`` (the open connections it counts against its caps)."""

    def __init__(
        self, ws_server: WSServer, hub: Hub, host: str, admission: Admission, *, tls: bool = False
    ) -> None:
        self.ws_server = ws_server
        self.admission = admission
        self.hub = hub
        self.store = hub.store
        sock = next(iter(ws_server.sockets))
        self.port: int = sock.getsockname()[1]
        self.host = host
        shown = f"[{host}]" if ":" in host else host
        secure = "s" if tls else ""
        self.url = f"ws{secure}://{shown}:{self.port}"
        self.http_url = f"http{secure}://{shown}:{self.port}"


@asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 8787,
    store: str | Store = "sqlite:///./runwire.db",
    **options: Any,
) -> AsyncIterator[Server]:
    """Run a relay until the block exits. ``options`` are the fields of ``RelayOptions``."""
    known = {f.name for f in fields(RelayOptions)}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"unknown relay options: {', '.join(sorted(unknown))}")
    opts = RelayOptions(**options)
    redact_tokens()  # before websockets logs a request line or header with a token
    quiet_handshake_log()  # a connection that hangs up before its request is no error
    _check_limits(opts)
    ping = keepalive(opts.keepalive_timeout, close_max=2.0)  # ValueError for a bad one
    tls = server_tls(opts)
    if not 0 <= opts.rollup_window <= 1:
        raise ValueError(f"rollup_window must be 0 to 1 second, not {opts.rollup_window}")
    verifier: TokenVerifier | None = None
    if opts.secret or opts.public_key:
        verifier = TokenVerifier(
            secret=opts.secret, public_key=opts.public_key, max_bytes=opts.max_token_bytes
        )
    elif not opts.allow_anonymous and not _is_loopback(host):
        raise ValueError(
            f"refusing to listen on {host!r} without tokens: give a secret or public key "
            "(--secret-file / --public-key-file), or allow_anonymous=True (--allow-anonymous)"
        )
    elif _is_loopback(host):
        log.info("the relay is anonymous and listens on loopback only (no secret or public key)")
    else:
        log.warning(
            "the relay is anonymous (no secret or public key) on %s: every connection has every "
            "right",
            host,
        )
    origins = _origin_policy(opts, host, anonymous=verifier is None)
    the_store = open_store(store) if isinstance(store, str) else store
    await the_store.start()
    try:
        await the_store.claim()  # one relay per SQLite file: a second one stops here
    except BaseException:
        await the_store.aclose()
        raise
    metrics = Metrics()
    hub = Hub(the_store, opts, metrics)
    api = HttpApi(hub, verifier)
    site = Site(api, hub, metrics, origins, opts.index_html)
    try:
        await hub.start()

        # A partial, not a wrapping coroutine: one coroutine frame less per connection.
        handler = functools.partial(
            _handle_connection,
            hub=hub,
            opts=opts,
            metrics=metrics,
            verifier=verifier,
            flusher=Flusher(opts.rollup_window),
        )

        front = FrontConfig(
            handler=site.handle,
            refuse=api.refuse,
            refuse_upgrade=site.refuse_upgrade,
            admission=Admission(
                opts.max_connections, opts.max_connections_per_ip, opts.request_timeout
            ),
            max_body=opts.max_frame_bytes,
            max_token=opts.max_token_bytes,
            credentials=verifier is not None,
            authorize=None if verifier is None else functools.partial(_authorize, verifier),
            max_stream_buffer=opts.send_queue_bytes,
            idle_timeout=opts.http_idle_timeout,
        )
        async with ws_serve(
            handler,
            host,
            port,
            create_connection=connection_class(front),
            max_size=opts.hard_frame_bytes,
            max_queue=64,
            compression=None,
            ping_interval=ping.ping_interval,
            ping_timeout=ping.ping_timeout,
            close_timeout=ping.close_timeout,
            ssl=tls,
        ) as ws_server:
            yield Server(ws_server, hub, host, front.admission, tls=tls is not None)
            # Stop listening, then close every connection "service restart" (1012): the SDKs
            # reconnect at once, to another node behind a load balancer.
            api.close()
            front.close()
            ws_server.close(
                close_connections=True, code=CloseCode.SERVICE_RESTART, reason="relay restarting"
            )
    finally:
        hub.close()
        await the_store.aclose()


def _check_limits(opts: RelayOptions) -> None:
    """Raise ``ValueError`` for a connection cap or request timeout that makes no sense."""
    for name in ("max_connections", "max_connections_per_ip"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1 (or None: no cap), not {value}")
    if not opts.request_timeout > 0:
        raise ValueError(f"request_timeout must be positive seconds, not {opts.request_timeout}")


def server_tls(opts: RelayOptions) -> ssl.SSLContext | None:
    """The TLS context the relay serves with: ``opts.ssl``, or one loaded from
    ``ssl_certfile`` / ``ssl_keyfile``; None for plain ``ws://`` and ``http://``.

    Raises ``ValueError`` for options that do not go together and for files that
    cannot be read or hold no matching certificate and key.
    """
    if opts.ssl is not None:
        if opts.ssl_certfile or opts.ssl_keyfile:
            raise ValueError("give ssl (a context) or ssl_certfile / ssl_keyfile, not both")
        if not isinstance(opts.ssl, ssl.SSLContext):
            raise ValueError("ssl must be an ssl.SSLContext")
        return opts.ssl
    if opts.ssl_keyfile and not opts.ssl_certfile:
        raise ValueError("ssl_keyfile needs ssl_certfile (--ssl-certfile): the certificate")
    if not opts.ssl_certfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(opts.ssl_certfile, opts.ssl_keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot load the TLS certificate {opts.ssl_certfile!r}"
            + (f" and key {opts.ssl_keyfile!r}" if opts.ssl_keyfile else "")
            + f": {exc}"
        ) from None
    return context


def _origin_policy(opts: RelayOptions, host: str, *, anonymous: bool) -> OriginPolicy:
    """The configured origins, else the default (``relay._origins``)."""
    loopback = _is_loopback(host)
    if opts.allowed_origins is None:
        return OriginPolicy.default(anonymous=anonymous, loopback=loopback)
    if isinstance(opts.allowed_origins, str):
        raise ValueError("allowed_origins is a list of origins, not one string")
    return OriginPolicy(opts.allowed_origins, loopback_only_host=anonymous and loopback)


def _authorize(
    verifier: TokenVerifier, target: str, authorization: str | None
) -> RunwireError | None:
    """The refusal of a request's token, or None: checked before its body is read."""
    headers = {"Authorization": authorization} if authorization is not None else {}
    try:
        verifier.verify(token_from_request(headers, target))
    except RunwireError as exc:
        return exc
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _handle_connection(
    ws: ServerConnection,
    hub: Hub,
    opts: RelayOptions,
    metrics: Metrics,
    verifier: TokenVerifier | None,
    flusher: Flusher,
) -> None:
    """Serve one connection: ``hello`` (``_greet``), then each frame in turn.

    An idle connection waits here for its next frame, so this frame is kept
    small. The handshake's leftovers (the token, the ``hello`` frame) live in
    ``_greet``'s, gone once it returns. Frames are read with ``recv()``, since
    an ``async for`` keeps an async generator per connection.
    """
    peer = Peer(ws, new_id(), opts.send_queue_bytes, metrics, flusher)
    metrics.connections.inc()
    expiry: asyncio.TimerHandle | None = None
    try:
        if not await _greet(ws, peer, hub, opts, verifier):
            return
        logcontext.CLIENT_ID.set(peer.sender.client_id)  # this task's records name the client
        _forget_headers(ws)
        if peer.identity is not None:
            expiry = asyncio.get_running_loop().call_later(
                max(0.0, peer.identity.expires_at - time.time()),
                peer.close,
                CloseCode.TOKEN_EXPIRED,
                "TOKEN_EXPIRED: the token expired; reconnect with a fresh one",
            )
        while True:
            await hub.handle(peer, await ws.recv())
    except ConnectionClosed:
        pass
    finally:
        if expiry is not None:
            expiry.cancel()
        peer.closed = True
        hub.gone(peer)
        metrics.connections.dec()


_NO_HEADERS = Headers()
"""Shared by every connection whose handshake headers were dropped; never written to."""


def _forget_headers(ws: ServerConnection) -> None:
    """Drop the handshake's request and response headers, read only while greeting.

    About 4 KiB per connection: most of what an idle one holds besides its task.
    websockets' request and response stay (it reads ``request`` as "handshake
    done"), without their headers; the front's copy of the request goes.
    """
    if isinstance(ws, FrontConnection):
        ws.opening = None
    if ws.request is not None:
        ws.request.headers = _NO_HEADERS
    if ws.response is not None:
        ws.response.headers = _NO_HEADERS


async def _greet(
    ws: ServerConnection,
    peer: Peer,
    hub: Hub,
    opts: RelayOptions,
    verifier: TokenVerifier | None,
) -> bool:
    """Check the token and answer the first frame, which must be ``hello``, with ``welcome``.

    Returns False when the connection ends instead: it closed, or it is
    closed here after an ``error`` frame (a bad first frame, a refused token).
    """
    # The handshake as sent: its token may be too long for websockets' lines.
    opening = ws.opening if isinstance(ws, FrontConnection) else None
    refused = ws.head_refusal if isinstance(ws, FrontConnection) else None
    if refused is None and verifier is not None:
        token = None
        if opening is not None:
            token = token_from_request(opening.credentials, opening.path)
        elif ws.request is not None:
            token = token_from_request(ws.request.headers, ws.request.path)
        try:
            peer.identity = verifier.verify(token)
        except RunwireError as exc:
            refused = exc
    try:
        async with asyncio.timeout(opts.hello_timeout):
            raw = await ws.recv()
    except ConnectionClosed:
        return False
    except TimeoutError:
        # Without this a refused token (or none) could hold its socket open for ever,
        # pings answered, and enough such sockets would starve everyone else.
        late = refused or RunwireError(
            PROTOCOL_ERROR, f"no hello within {opts.hello_timeout:g} s of the handshake"
        )
        peer.send_error(late)
        await _flush_and_close(peer, _close_code(late), f"{late.code}: {late.message}")
        return False
    try:
        hello = codec.decode_client_frame(raw, max_bytes=opts.max_frame_bytes)
        if not isinstance(hello, Hello):
            raise RunwireError(PROTOCOL_ERROR, "the first frame must be hello")
        if hello.v != 1:
            raise RunwireError(PROTOCOL_ERROR, f"protocol version {hello.v} is not supported")
        if refused is None:
            hub.hello(peer, hello)  # once: a cluster node counts each agent connection
    except RunwireError as exc:
        peer.send_error(exc, codec.request_id(raw))
        await _flush_and_close(peer, CloseCode.PROTOCOL_ERROR, exc.message)
        return False
    if refused is not None:
        peer.send_error(refused, hello.req)
        await _flush_and_close(peer, _close_code(refused), f"{refused.code}: {refused.message}")
        return False
    peer.send_frame(
        codec.encode(
            Welcome(
                req=hello.req,
                client_id=peer.sender.client_id,
                user_id=peer.sender.user_id,
                connection_id=peer.connection_id,
                max_frame_bytes=opts.max_frame_bytes,
                multitask=opts.multitask,
                agent_grace=opts.agent_grace,
            )
        )
    )
    return True


def _close_code(error: RunwireError) -> int:
    """The close code after ``error`` at connect: 4003 expired, 4001 refused, else 4002."""
    if error.code == TOKEN_EXPIRED:
        return CloseCode.TOKEN_EXPIRED
    if error.code == UNAUTHORIZED:
        return CloseCode.UNAUTHORIZED
    return CloseCode.PROTOCOL_ERROR


async def _flush_and_close(peer: Peer, code: int, reason: str) -> None:
    # Let the queued error frame go out before the close frame.
    try:
        await peer.flushed()
    finally:
        await peer.ws.close(code, reason[:120])
