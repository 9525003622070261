"""Which answer each HTTP request on the relay's port gets, and which web pages may ask.

``Site.handle`` answers every request the HTTP front reads (``relay._http_front``).
``/v1/...`` is the HTTP API (``relay._http_api``). ``GET /healthz`` answers JSON
(503 while the store cannot write), and ``GET /metrics`` the Prometheus text
format. ``GET /client.js`` answers the JavaScript client
(``client_side/js/dist/runwire.js``), and ``GET /static/...`` the chat page's own
files (a fixed list, ``relay._static_files``). ``GET /`` answers the ``index_html``
file when that option names one. Anything else is 404, and a method other than
``GET`` or ``HEAD`` outside ``/v1`` is 405.

A request or WebSocket handshake whose ``Origin`` is not allowed
(``relay._origins``) is answered 403, and every answer names the allowed origin
in its CORS headers, never ``*``.
"""

from __future__ import annotations

from pathlib import Path

from websockets.http11 import Response

from transport import _codec as codec

from ._http_api import HttpApi
from ._http_front import Exchange
from ._http_message import HttpRequest, response
from ._hub import Hub
from ._metrics import Metrics
from ._origins import OriginPolicy, cors, origin_refused
from ._static_files import static_file

__all__ = ["CLIENT_JS", "Site", "check_origin"]

CLIENT_JS = Path(__file__).resolve().parent.parent / "client_side" / "js" / "dist" / "runwire.js"
"""The browser client, served at ``/client.js`` (found beside the installed packages)."""


class Site:
    """The HTTP answers of one relay (see the module docstring)."""

    def __init__(
        self,
        api: HttpApi,
        hub: Hub,
        metrics: Metrics,
        origins: OriginPolicy,
        index_html: str | None = None,
    ) -> None:
        self.api = api
        self.hub = hub
        self.store = hub.store
        self.metrics = metrics
        self.origins = origins
        self.index_html = None if index_html is None else Path(index_html)

    async def handle(self, exchange: Exchange) -> None:
        """Answer one request, with the CORS headers its origin gets."""
        request = exchange.request
        origin, refused = check_origin(self.origins, request)
        if refused is not None:
            exchange.respond(refused)
            return
        exchange.decorate = lambda reply: cors(reply, origin)
        path = request.path.split("?", 1)[0]
        if path == "/v1" or path.startswith("/v1/"):
            await self.api.handle(exchange)
            return
        exchange.respond(await self._page(request.method, path))

    def refuse_upgrade(self, request: HttpRequest) -> Response | None:
        """The 403 of a WebSocket handshake from an origin that is not allowed, or None."""
        return check_origin(self.origins, request)[1]

    async def _page(self, method: str, path: str) -> Response:
        if method not in ("GET", "HEAD"):
            return response(405, b"method not allowed\n", "text/plain")
        if path == "/healthz":
            ok = await self.store.healthy()
            body = codec.dumps(
                {
                    "status": "ok" if ok else "unavailable",
                    "store": self.store.url,
                    **self.hub.stats(),
                }
            )
            return response(200 if ok else 503, body, "application/json")
        if path == "/metrics":
            return response(200, self.metrics.render(), "text/plain; version=0.0.4")
        if path == "/client.js":
            # A page of an allowed origin may import it (a module script needs CORS).
            return _file(CLIENT_JS, "application/javascript; charset=utf-8")
        served = static_file(path)
        if served is not None:
            return _file(*served)
        if path == "/" and self.index_html is not None:
            return _file(self.index_html, "text/html; charset=utf-8")
        return response(404, b"not found\n", "text/plain")


def check_origin(origins: OriginPolicy, request: HttpRequest) -> tuple[str | None, Response | None]:
    """The request's ``Origin`` (None without one), and the 403 response when it is not
    allowed (an ``Origin`` header given twice is refused too)."""
    given = request.headers.get_all("Origin")
    if not given:
        return None, None
    origin = given[0]
    hosts = request.headers.get_all("Host")
    host = hosts[0] if len(hosts) == 1 else None
    if len(given) == 1 and origins.allows(origin, host):
        return origin, None
    origins.refusals.note(
        "refusing requests from origin %r (not allowed: --allowed-origins)", origin[:200]
    )
    error = origin_refused(origin)
    body = codec.dumps({"error": error.to_wire()})
    return None, cors(response(403, body, "application/json"), None)


def _file(path: Path, content_type: str) -> Response:
    """A static file, read on each request (small, and edits show on reload); 404 if missing."""
    try:
        body = path.read_bytes()
    except OSError:
        return response(404, b"not found\n", "text/plain")
    reply = response(200, body, content_type)
    reply.headers["Cache-Control"] = "no-cache"
    return reply
