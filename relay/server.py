"""``serve()``: the relay's WebSocket server, with ``/healthz`` and ``/metrics`` on its port.

A connection's first frame must be ``hello`` (answered by ``welcome``);
anything else first is answered with a ``PROTOCOL_ERROR`` and the connection
closes (4002). Frames over ``max_frame_bytes`` get ``PAYLOAD_TOO_LARGE`` and the
connection stays; frames over ``hard_frame_bytes`` close it (1009). Plain HTTP
``GET /healthz`` answers JSON (503 while the store cannot write), ``GET
/metrics`` the Prometheus text format, ``GET /client.js`` the JavaScript client
(``client_side/js/dist/runwire.js``, built from client_side/js/src), ``GET
/static/...`` the chat page's own files
(a fixed list, ``relay.static_files``), and ``GET /`` the ``index_html`` file
when that option names one. ``/v1/...`` is the HTTP API for back ends without a
socket (``relay.http_api``, which also explains how request bodies are read).

Tokens. With ``secret`` and/or ``public_key`` every connection presents a JWT
(``Authorization: Bearer``, or the ``token`` query parameter for browsers,
which cannot set headers). A missing, forged or expired token is answered, at
``hello``, by an ``error`` frame (``UNAUTHORIZED`` with ``details.reason``, or
``TOKEN_EXPIRED``) and a close with 4001 (4003 when expired); the handshake
itself succeeds so that browsers can read the code. A token over
``max_token_bytes`` (32 KiB) is refused so too (``details.reason``
``too_large``): the request line and ``Authorization`` header get that much
room beyond websockets' 8 KiB line limit, and one longer still is skipped
unread (``http_api.BodyReader``) and refused the same way. A connection whose token
expires later is closed with 4003 at that moment; its SDK reconnects with a
fresh token. A connection that sends no ``hello`` within ``hello_timeout`` (10 s) is
answered as above, with its token's refusal (``PROTOCOL_ERROR`` and 4002 when
the token was good), and closed. Without either key the relay is anonymous (every connection has
every right, user ids are ``None``), says so in its log, and refuses to listen
on a host that is not loopback unless ``allow_anonymous=True``.

Browsers and limits. A request or handshake whose ``Origin`` is not allowed
(``allowed_origins``, ``relay.origins``) is answered 403 and CORS names the
allowed origin, never ``*``. Connections are capped (``max_connections``,
``max_connections_per_ip``) and have ``request_timeout`` (10 s) to send their
request (``relay.admission``). Every record of the websockets and runwire
loggers has its tokens redacted (``transport.redact``).

TLS. With ``ssl_certfile`` (and ``ssl_keyfile``) or an ``ssl`` context the
port speaks TLS only: ``wss://`` for WebSocket and ``https://`` for HTTP,
and ``Server.url`` / ``Server.http_url`` say so.
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
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server as WSServer
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from transport import codec, logcontext, redact
from transport.errors import PROTOCOL_ERROR, TOKEN_EXPIRED, UNAUTHORIZED, CloseCode, RunwireError
from transport.frames import Hello, Welcome
from transport.keepalive import keepalive
from transport.messages import new_id
from transport.redact import install as redact_tokens

from . import handshake_log, sse
from .admission import Admission
from .auth import TokenVerifier, token_from_request
from .http_api import (
    OPEN_TIMEOUT,
    HttpApi,
    connection_class,
    head_error,
    head_status,
    request_method,
)
from .hub import Hub
from .metrics import Metrics
from .options import RelayOptions
from .origins import OriginPolicy, cors, origin_refused
from .peer import Flusher, Peer
from .static_files import static_file
from .store import open_store
from .store.base import Store

__all__ = ["Server", "serve"]

log = logging.getLogger("runwire.relay")
access_log = logging.getLogger("runwire.access")

CLIENT_JS = Path(__file__).resolve().parent.parent / "client_side" / "js" / "dist" / "runwire.js"
"""The browser client, served at ``/client.js`` (found beside the installed packages)."""


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
    handshake_log.install()  # a connection that hangs up before its request is no error
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
    try:
        await hub.start()

        async def process_request(conn: ServerConnection, request: Request) -> Response | None:
            origin, refused = check_origin(origins, request)
            if refused is not None:
                return refused
            response = await route(conn, request)
            return None if response is None else cors(response, origin)

        async def route(conn: ServerConnection, request: Request) -> Response | None:
            malformed = head_error(conn)
            # A token too long to read is refused at hello, as any refused token, so that
            # browsers can read why (they cannot read a refused handshake's response).
            if malformed is not None and not (malformed.code == UNAUTHORIZED and _upgrade(request)):
                return api.refuse(malformed, head_status(conn))
            path = request.path.split("?", 1)[0]
            if (path == "/v1" or path.startswith("/v1/")) and not _upgrade(request):
                return await api.handle(conn, request)
            method = request_method(conn, request)
            if method != "GET" and (method != "HEAD" or _upgrade(request)):
                return _response(405, b"method not allowed\n", "text/plain")
            if path == "/healthz":
                ok = await the_store.healthy()
                body = codec.dumps(
                    {"status": "ok" if ok else "unavailable", "store": the_store.url, **hub.stats()}
                )
                return _response(200 if ok else 503, body, "application/json")
            if path == "/metrics":
                return _response(200, metrics.render(), "text/plain; version=0.0.4")
            if path == "/client.js":
                # A page of an allowed origin may import it (a module script needs CORS).
                return _file(CLIENT_JS, "application/javascript; charset=utf-8")
            served = static_file(path)
            if served is not None:
                return _file(*served)
            if path == "/" and opts.index_html is not None and not _upgrade(request):
                return _file(Path(opts.index_html), "text/html; charset=utf-8")
            if not _upgrade(request):
                return _response(404, b"not found\n", "text/plain")
            return None

        async def stream_events(request: Request, out: sse.Stream) -> None:
            origin, refused = check_origin(origins, request)
            if refused is not None:
                out.respond(refused)
                return
            await api.stream(request, out, origin)

        # A partial, not a wrapping coroutine: one coroutine frame less per connection.
        handler = functools.partial(
            _handle_connection,
            hub=hub,
            opts=opts,
            metrics=metrics,
            verifier=verifier,
            flusher=Flusher(opts.rollup_window),
        )

        admission = Admission(
            opts.max_connections, opts.max_connections_per_ip, opts.request_timeout
        )
        async with ws_serve(
            handler,
            host,
            port,
            process_request=functools.partial(_logged, process_request),
            create_connection=connection_class(
                opts.max_frame_bytes,
                opts.max_token_bytes,
                credentials=verifier is not None,
                authorize=None if verifier is None else functools.partial(_authorize, verifier),
                admission=admission,
                stream=stream_events,
                max_stream_buffer=opts.send_queue_bytes,
            ),
            open_timeout=OPEN_TIMEOUT,
            max_size=opts.hard_frame_bytes,
            max_queue=64,
            compression=None,
            ping_interval=ping.ping_interval,
            ping_timeout=ping.ping_timeout,
            close_timeout=ping.close_timeout,
            ssl=tls,
        ) as ws_server:
            yield Server(ws_server, hub, host, admission, tls=tls is not None)
            # Stop listening, then close every connection "service restart" (1012): the SDKs
            # reconnect at once, to another node behind a load balancer.
            api.close()
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
    """The configured origins, else the default (``relay.origins``)."""
    loopback = _is_loopback(host)
    if opts.allowed_origins is None:
        return OriginPolicy.default(anonymous=anonymous, loopback=loopback)
    if isinstance(opts.allowed_origins, str):
        raise ValueError("allowed_origins is a list of origins, not one string")
    return OriginPolicy(opts.allowed_origins, loopback_only_host=anonymous and loopback)


def check_origin(origins: OriginPolicy, request: Request) -> tuple[str | None, Response | None]:
    """The request's ``Origin`` (None without one), and the 403 response when it is not
    allowed (an ``Origin`` header given twice is refused too)."""
    given = request.headers.get_all("Origin")
    if not given:
        return None, None
    origin = given[0]
    if len(given) == 1 and origins.allows(origin, _host(request)):
        return origin, None
    origins.refusals.note(
        "refusing requests from origin %r (not allowed: --allowed-origins)", origin[:200]
    )
    error = origin_refused(origin)
    body = codec.dumps({"error": error.to_wire()})
    return None, cors(_response(403, body, "application/json"), None)


def _host(request: Request) -> str | None:
    hosts = request.headers.get_all("Host")
    return hosts[0] if len(hosts) == 1 else None


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


async def _logged(
    process_request: Any, conn: ServerConnection, request: Request
) -> Response | None:
    """``process_request`` plus one ``runwire.access`` line per HTTP request answered."""
    started = time.perf_counter()
    response: Response | None = await process_request(conn, request)
    if response is not None and access_log.isEnabledFor(logging.INFO):
        remote = conn.remote_address[0] if conn.remote_address else None
        method = request_method(conn, request)
        ms = round((time.perf_counter() - started) * 1000, 3)
        path = redact.redact(request.path)  # a browser's ?token= stays out of the log
        access_log.info(
            "%s %s %s %s %.1f ms",
            remote,
            method,
            path,
            response.status_code,
            ms,
            extra={
                "method": method,
                "path": path,
                "status": response.status_code,
                "duration_ms": ms,
                "remote": remote,
            },
        )
    return response


def _upgrade(request: Request) -> bool:
    return "upgrade" in request.headers.get("Connection", "").lower()


def _response(status: int, body: bytes, content_type: str) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ]
    )
    return Response(status, HTTPStatus(status).phrase, headers, body)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _file(path: Path, content_type: str) -> Response:
    """A static file, read on each request (small, and edits show on reload); 404 if missing."""
    try:
        body = path.read_bytes()
    except OSError:
        return _response(404, b"not found\n", "text/plain")
    response = _response(200, body, content_type)
    response.headers["Cache-Control"] = "no-cache"
    return response


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
    small: the handshake's leftovers (the token, the ``hello`` frame) live in
    ``_greet``'s, gone once it returns, and frames are read with ``recv()``
    (an ``async for`` keeps an async generator per connection).
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

    About 2.7 KiB per connection: most of what an idle one holds besides its task.
    The request and response stay (websockets reads ``request`` as "handshake done").
    """
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
    refused = head_error(ws)  # only a token too long to read gets this far
    if refused is None and verifier is not None:
        request = ws.request
        token = token_from_request(request.headers, request.path) if request else None
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
