"""One HTTP request as the relay's HTTP front read it, and the responses it answers with.

``HttpRequest`` is what a route sees: the method, the target, the headers and
the whole body, already read and checked against the limits
(``relay._http_front``). Responses are websockets' public ``Response`` type,
built by ``response`` and ``json_response``; the front writes them, and
decides whether the connection stays open (keep-alive). The explanation page
``docs/explanation/http-front.md`` says why the relay reads HTTP this way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from websockets.datastructures import Headers
from websockets.http11 import Response

from transport import _codec as codec

__all__ = ["CORS_HEADERS", "HttpRequest", "json_response", "response"]

CORS_HEADERS = (
    ("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID"),
    ("Access-Control-Allow-Methods", "GET, POST, OPTIONS"),
)
"""What every response of the HTTP API tells a browser's preflight. The allowed origin
itself is named per request (``relay._origins.cors``)."""


@dataclass
class HttpRequest:
    """A request read whole: ``path`` is the target (path and query) as the client sent it,
    with bytes outside printable ASCII percent-encoded."""

    method: str
    path: str
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    remote: str | None = None
    """The client's address (the peer of the connection)."""

    def header(self, name: str) -> str | None:
        """The value of header ``name``; one given several times is its values joined with
        commas, as HTTP reads such a list; None when it is absent."""
        values = self.headers.get_all(name)
        return ", ".join(values) if values else None

    @property
    def upgrade(self) -> bool:
        """Whether the request asks to become a WebSocket connection."""
        return "websocket" in (self.header("Upgrade") or "").lower()

    @property
    def credentials(self) -> dict[str, str]:
        """The ``Authorization`` header as ``auth.token_from_request`` reads it."""
        value = self.header("Authorization")
        return {} if value is None else {"Authorization": value}


def response(status: int, body: bytes, content_type: str | None, *, cors: bool = False) -> Response:
    """A whole response with ``Content-Length`` (none for 204); ``cors``: with
    ``CORS_HEADERS``."""
    headers = Headers(CORS_HEADERS) if cors else Headers()
    if content_type is not None:
        headers["Content-Type"] = content_type
    if status != 204:
        headers["Content-Length"] = str(len(body))
    return Response(status, HTTPStatus(status).phrase, headers, body)


def json_response(status: int, value: Any, *, cors: bool = True) -> Response:
    """``value`` as JSON, with ``CORS_HEADERS`` unless told otherwise."""
    return response(status, codec.dumps(value), "application/json", cors=cors)
