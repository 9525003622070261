"""The event stream that stays open: which requests take it, and how it is written.

A browser's ``EventSource`` asks for ``GET /v1/sessions/{id}/events`` with
``Accept: text/event-stream``. Such a request is taken before websockets sees
it (``relay.http_api.connection_class`` holds a new connection's first bytes
until ``route`` decides), and answered by a response that stays open: a
chunked ``text/event-stream`` to which each new entry is written as it is
stored. Every other request, and any head ``route`` cannot read plainly, goes
to websockets as before: its answers (the HTTP API's other routes, errors of a
malformed head, a WebSocket handshake) do not change.

``route`` reads the head with h11, a sans-I/O HTTP/1.1 parser. Everything here
uses public APIs only: the asyncio transport of the connection, and
websockets' ``Request``, ``Response`` and ``Headers`` types.
"""

from __future__ import annotations

import asyncio
import re
from http import HTTPStatus

import h11
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

__all__ = ["Stream", "route"]

_PREFIX = b"GET /v1/sessions/"
_EVENTS = re.compile(r"/v1/sessions/[^/?#]+/events(?:\?[^#]*)?")
_HEAD_END = re.compile(rb"\r?\n\r?\n")


def route(data: bytes, limit: int) -> Request | bool | None:
    """Where a connection whose first bytes are ``data`` goes: a ``Request`` for the event
    stream, False for websockets, None while its head is still incomplete (at most
    ``limit`` bytes are waited for)."""
    if not _PREFIX.startswith(data[: len(_PREFIX)]):
        return False
    end = _HEAD_END.search(data)
    if end is None:
        return None if len(data) <= limit else False
    if len(data) < len(_PREFIX):
        return False
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=limit)
    parser.receive_data(data[: end.start()] + b"\r\n\r\n")
    try:
        event = parser.next_event()
    except h11.RemoteProtocolError:
        return False
    if not isinstance(event, h11.Request) or event.http_version != b"1.1":
        return False
    target = event.target.decode("ascii", "replace")
    names = {name for name, _ in event.headers}
    accept = b", ".join(value for name, value in event.headers if name == b"accept")
    if (
        not _EVENTS.fullmatch(target)
        or names & {b"upgrade", b"content-length", b"transfer-encoding"}
        or b"text/event-stream" not in accept.lower()
    ):
        return False
    pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in event.headers]
    return Request(path=target, headers=Headers(pairs))


class Stream:
    """One open event stream's connection: a whole response, or a head then chunks."""

    def __init__(self, transport: asyncio.Transport, max_buffer: int) -> None:
        self.transport = transport
        self.max_buffer = max_buffer
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done when the client hangs up (``connection_lost``)."""

    @property
    def closed(self) -> bool:
        return self.lost.done() or self.transport.is_closing()

    def connection_lost(self) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    def respond(self, response: Response) -> None:
        """Answer with ``response`` as it is, and close."""
        if self.closed:
            return
        response.headers["Connection"] = "close"
        self.transport.write(_head(response.status_code, response.headers) + response.body)
        self.transport.close()

    def start(self, headers: Headers) -> None:
        """Send a 200 head with ``headers``; the body follows in chunks."""
        for name in ("Content-Length", "Connection", "Transfer-Encoding"):
            if name in headers:
                del headers[name]
        headers["Transfer-Encoding"] = "chunked"
        self.transport.write(_head(200, headers))

    def send(self, data: bytes) -> bool:
        """Write ``data`` as one chunk; False when the stream is closed, or the client reads
        too slowly (more than ``max_buffer`` bytes unsent: the stream is cut then, and the
        client resumes from its last event id)."""
        if self.closed:
            return False
        if data:
            self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))
        if self.transport.get_write_buffer_size() > self.max_buffer:
            self.transport.abort()
            return False
        return True

    def end(self) -> None:
        """End the body and close the connection."""
        if not self.closed:
            self.transport.write(b"0\r\n\r\n")
            self.transport.close()


def _head(status: int, headers: Headers) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers.raw_items())
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")
