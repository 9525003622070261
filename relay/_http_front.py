"""The relay's HTTP front: every request on its port is read here, and only WebSocket
handshakes go on to websockets.

websockets' ``serve(create_connection=...)`` builds each new connection with
a ``FrontConnection`` (``relay._front_connection``), which does not tell
websockets about the connection until a ``Front`` read its first request head.
``HeadReader`` (``relay._http_head``) reads that head within the limits, and h11,
a sans-I/O HTTP/1.1 parser, parses it and frames the body. A head with
``Upgrade: websocket`` is passed to websockets, which answers the handshake and
serves the connection from then on. Any other request is read whole here, body
included, and answered by the relay's routes (``relay._http_routes``).

Connections stay open between requests (HTTP/1.1 keep-alive): the next
request, pipelined or not, is read once the answer to the one before it is
written. A connection closes after a response when the client asked for it
(``Connection: close``, HTTP/1.0), after a refused request, and after
``idle_timeout`` seconds without a new request.

The limits are answered before what they guard is read. The answer is 413
for a ``Content-Length`` over ``max_body`` (a chunked body is cut off there),
and 401 for a body sent without a good token. It is 408 for a request not all
read within ``request_timeout`` seconds of its first byte (of the connection's
opening for the first request). The connection caps are ``relay._admission``'s. Everything
here uses public APIs: asyncio's transport and protocol methods, h11, and
websockets' ``ServerConnection``, ``Response`` and ``Headers``. The explanation
page ``docs/explanation/http-front.md`` says why the relay reads HTTP this way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import h11
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHeader
from websockets.http11 import Response

from transport import redact
from transport.errors import PROTOCOL_ERROR, UNAUTHORIZED, RunwireError

from ._admission import LINGER, Admission, refuse_raw
from ._http_head import LINE_LIMIT, Head, HeadReader, head_limit
from ._http_message import HttpRequest

__all__ = ["Exchange", "Front", "FrontConfig", "too_large"]

log = logging.getLogger("runwire.relay")
access_log = logging.getLogger("runwire.access")

PENDING_LIMIT = 256 * 1024
"""Bytes read ahead of the request being answered (pipelined requests) before the front
stops reading the connection until that answer is written."""

Handler = Callable[["Exchange"], Awaitable[None]]
"""Answers one request (``Exchange.respond``, or a streamed response)."""
Authorize = Callable[[str, str | None], RunwireError | None]
"""Checks a request's token from its target and ``Authorization`` header: the refusal, or
None. A body is read only when the token is good."""


@dataclass
class FrontConfig:
    """What the front of one relay needs: its routes, limits and checks."""

    handler: Handler
    refuse: Callable[[RunwireError, int | None], Response]
    """The JSON error response for an error (and its status, when not the code's)."""
    refuse_upgrade: Callable[[HttpRequest], Response | None]
    """The answer to a WebSocket handshake refused before websockets sees it, or None."""
    admission: Admission
    max_body: int
    max_token: int = 0
    credentials: bool = False
    authorize: Authorize | None = None
    max_stream_buffer: int = 8 * 1024 * 1024
    idle_timeout: float = 15.0
    fronts: set[Front] = field(default_factory=set)
    """The connections the front still serves (not handed to websockets)."""
    closing: bool = False

    def close(self) -> None:
        """The relay is stopping: idle connections close now, busy ones after their answer."""
        self.closing = True
        for front in list(self.fronts):
            if not front.busy:
                front.close()


class Exchange:
    """One request and its response: a whole one (``respond``), or a streamed one (``start``,
    then ``send`` each chunk, then ``end``)."""

    def __init__(self, front: Front, request: HttpRequest) -> None:
        self.front = front
        self.request = request
        self.status: int | None = None
        self.ended = False
        self.decorate: Callable[[Response], Response] | None = None
        """Applied to the response before its head is sent (the CORS headers)."""

    @property
    def lost(self) -> asyncio.Future[None]:
        """Done when the client hangs up."""
        return self.front.lost

    @property
    def closed(self) -> bool:
        """Whether a streamed response is over: the client hung up, or the response ended."""
        return self.ended or self.front.closed or self.front.lost.done()

    def respond(self, response: Response) -> None:
        """Send ``response`` whole."""
        if self.status is not None:
            return
        self._head(response)
        if response.body:
            self._write(h11.Data(data=bytes(response.body)))
        self.end()

    def start(self, response: Response) -> None:
        """Send the head of a response whose body follows in chunks (``send``)."""
        for name in ("Content-Length", "Transfer-Encoding"):
            if name in response.headers:
                del response.headers[name]
        self._head(response)

    def send(self, data: bytes) -> bool:
        """Write ``data`` as one chunk; False when the response cannot go on: the client hung
        up, or reads too slowly (more than ``max_stream_buffer`` bytes unsent: the
        connection is cut, and an event stream's client resumes from its last event id)."""
        if self.closed:
            return False
        if data:
            self._write(h11.Data(data=data))
        transport = self.front.transport
        if transport.get_write_buffer_size() > self.front.config.max_stream_buffer:
            transport.abort()
            return False
        return True

    def end(self) -> None:
        """End the response (a streamed one's last chunk)."""
        if self.ended:
            return
        if self.status is None:
            self._head(Response(204, "No Content", Headers()))
        self.ended = True
        self._write(h11.EndOfMessage())

    def _head(self, response: Response) -> None:
        if self.decorate is not None:
            response = self.decorate(response)
        self.status = response.status_code
        headers = [(name, value) for name, value in response.headers.raw_items()]
        if self.front.config.closing:
            headers.append(("Connection", "close"))
        self._write(
            h11.Response(
                status_code=response.status_code,
                headers=headers,
                reason=HTTPStatus(response.status_code).phrase,
            )
        )

    def _write(self, event: Any) -> None:
        http11 = self.front.http11
        if http11 is None or self.front.closed:
            return
        if isinstance(event, h11.Data) and self.request.method == "HEAD":
            return  # a HEAD response has the head only
        self.front.transport.write(http11.send(event) or b"")


class Front:
    """The HTTP side of one connection, until (unless) a handshake passes it to websockets."""

    def __init__(
        self,
        config: FrontConfig,
        transport: asyncio.Transport,
        hand_over: Callable[[bytes, HttpRequest, RunwireError | None], None],
    ) -> None:
        self.config = config
        self.transport = transport
        self.hand_over = hand_over
        peer = transport.get_extra_info("peername")
        self.remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        self.head = self._new_head()
        self.http11: h11.Connection | None = None
        self.request: HttpRequest | None = None
        self.body: list[bytes] = []
        self.body_size = 0
        self.pending = bytearray()
        self.busy = False
        self.eof = False
        self.closed = False
        self.paused = False
        self.method = ""
        """The method of the request being read, once its head is parsed."""
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None
        self._arm(config.admission.request_timeout, self._timed_out)
        config.fronts.add(self)

    def _new_head(self) -> HeadReader:
        config = self.config
        return HeadReader(
            config.max_token, credentials=config.credentials, max_skip=config.max_body
        )

    # ------------------------------------------------------------ reading --

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self.busy:
            self.pending += data
            if len(self.pending) > PENDING_LIMIT and not self.paused:
                self.paused = True
                self.transport.pause_reading()
            return
        self._feed(data)

    def eof_received(self) -> bool:
        """The client sends no more: answer what it sent whole, then close."""
        self.eof = True
        if self.busy:
            # A waiting request answers now, an open stream ends (a client that sends no
            # more has hung up), and the answer is written before the connection closes.
            if not self.lost.done():
                self.lost.set_result(None)
            return True
        if self.http11 is not None:
            self.http11.receive_data(b"")
            self._pump()
            return not self.closed
        self.close()  # between requests, or in the middle of a head: nothing to answer
        return False

    def connection_lost(self) -> None:
        self.closed = True
        self.hand_over = _no_hand_over
        self.http11 = None
        self._disarm()
        self.config.fronts.discard(self)
        if not self.lost.done():
            self.lost.set_result(None)

    def _feed(self, data: bytes) -> None:
        if self.http11 is not None:
            self.http11.receive_data(data)
            self._pump()
            return
        if not self.head.started and self.timer is not None and self._idle:
            self._arm(self.config.admission.request_timeout, self._timed_out)
        head = self.head.feed(data)
        if head is not None:
            self.head = self._new_head()
            self._begin(head)

    def _begin(self, head: Head) -> None:
        """A head arrived: hand a handshake to websockets, refuse, or read the body."""
        if not head.complete:
            self._refuse(head.error, head.status)
            return
        limit = head_limit(self.config.max_token)
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=limit)
        self.http11 = parser
        parser.receive_data(head.data + head.rest)
        if self.eof:
            parser.receive_data(b"")
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            self._refuse(RunwireError(PROTOCOL_ERROR, f"a malformed request head: {_reason(exc)}"))
            return
        if not isinstance(event, h11.Request):
            self._refuse(RunwireError(PROTOCOL_ERROR, "a malformed request head"))
            return
        try:
            headers = Headers(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in event.headers.raw_items()
            )
        except InvalidHeader:  # a control character in a value, which h11 lets through
            self._refuse(RunwireError(PROTOCOL_ERROR, "a malformed header line"))
            return
        self.method = event.method.decode("ascii", "replace")
        request = HttpRequest(
            method=self.method,
            path=event.target.decode("ascii", "replace"),
            headers=headers,
            remote=self.remote,
        )
        declared = self._declared_body(request)
        if request.upgrade and request.method == "GET" and declared is None:
            self._upgrade(parser, request, head)
            return
        if head.error is not None:
            self._refuse(head.error, head.status)
            return
        if declared is not None:
            refusal = self._body_refusal(request, declared)
            if refusal is not None:
                self._refuse(refusal)
                return
        self.request = request
        if parser.they_are_waiting_for_100_continue:  # curl's Expect: 100-continue
            self.transport.write(
                parser.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
            )
        self._pump()

    @staticmethod
    def _declared_body(request: HttpRequest) -> int | None:
        """The body's declared size (-1: chunked), or None when it has none."""
        if "Transfer-Encoding" in request.headers:
            return -1
        length = int(request.headers.get("Content-Length", "0") or 0)
        return length or None

    def _body_refusal(self, request: HttpRequest, declared: int) -> RunwireError | None:
        """Why a body is not read: over the limit (413), or without a good token (401)."""
        if declared > self.config.max_body:
            return too_large(declared, self.config.max_body)
        if self.config.authorize is None:
            return None
        return self.config.authorize(request.path, request.header("Authorization"))

    def _pump(self) -> None:
        """Take the parsed body of the current request until it is whole."""
        parser = self.http11
        while parser is not None and not (self.busy or self.closed):
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse(RunwireError(PROTOCOL_ERROR, f"a malformed request: {_reason(exc)}"))
                return
            if isinstance(event, h11.Data):
                self.body_size += len(event.data)
                if self.body_size > self.config.max_body:
                    self._refuse(too_large(self.body_size, self.config.max_body))
                    return
                self.body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._serve()
            elif isinstance(event, h11.ConnectionClosed) or (event is h11.NEED_DATA and self.eof):
                self.close()  # the client gave up in the middle of its request
                return
            else:
                return  # NEED_DATA (or PAUSED, which ``_serve`` answers first)

    # ----------------------------------------------------------- answering --

    def _serve(self) -> None:
        request = self.request
        assert request is not None
        request.body = b"".join(self.body)
        self.body, self.body_size = [], 0
        self.busy = True
        self._disarm()
        asyncio.get_running_loop().create_task(self._answer(Exchange(self, request)))

    async def _answer(self, exchange: Exchange) -> None:
        started = time.perf_counter()
        try:
            await self.config.handler(exchange)
        except Exception:
            log.exception("HTTP %s failed", exchange.request.path.split("?", 1)[0])
        finally:
            if exchange.status is None:
                exchange.respond(
                    self.config.refuse(RunwireError("INTERNAL_ERROR", "the relay failed"), 500)
                )
            exchange.end()
            _log_access(exchange, started)
            self._next()

    def _next(self) -> None:
        """The answer is written: read the next request, or close."""
        self.busy = False
        parser = self.http11
        self.http11, self.request = None, None
        if self.closed or parser is None:
            return
        if self.config.closing or not (
            parser.our_state is h11.DONE and parser.their_state is h11.DONE
        ):
            self.close()
            return
        leftover = parser.trailing_data[0] + bytes(self.pending)
        self.pending.clear()
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        if leftover:
            self._arm(self.config.admission.request_timeout, self._timed_out)
            self._feed(leftover)
            if self.eof and not (self.busy or self.closed):
                self.eof_received()  # what is left is all the client sends
        elif self.eof:
            self.close()
        else:
            self._arm(self.config.idle_timeout, self.close, idle=True)

    def _upgrade(self, parser: h11.Connection, request: HttpRequest, head: Head) -> None:
        """Pass a WebSocket handshake to websockets, or refuse it here."""
        token_refused = head.error is not None and head.error.code == UNAUTHORIZED
        if head.error is not None and not token_refused:
            self._refuse(head.error, head.status)
            return
        refused = self.config.refuse_upgrade(request)
        if refused is not None:
            self._refuse_with(refused)
            return
        while parser.next_event() not in (h11.PAUSED, h11.NEED_DATA):
            pass  # the end of a request without a body, then h11 waits for the switch
        self.closed = True  # for the front: websockets has the connection now
        self._disarm()
        self.config.fronts.discard(self)
        data = _handshake_head(request) + parser.trailing_data[0]
        # A token too long to read is refused at hello, as any refused token, so that
        # browsers can read why (they cannot read a refused handshake's response).
        self.hand_over(data, request, head.error)

    def _refuse(self, error: RunwireError | None, status: int | None = None) -> None:
        assert error is not None
        self._refuse_with(self.config.refuse(error, status))

    def _refuse_with(self, response: Response) -> None:
        """Answer ``response`` and end the connection: what else comes is not read."""
        if self.closed:
            return
        self.closed = True
        self._disarm()
        lines = [f"HTTP/1.1 {response.status_code} {HTTPStatus(response.status_code).phrase}"]
        lines.extend(f"{name}: {value}" for name, value in response.headers.raw_items())
        lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if self.method != "HEAD":  # a HEAD response has the head only
            data += response.body
        self.transport.write(data)
        if self.transport.can_write_eof():
            self.transport.write_eof()  # a half-close: the answer is read, not lost to a reset
            asyncio.get_running_loop().call_later(LINGER, self.transport.abort)
        else:
            self.transport.close()

    def close(self) -> None:
        """Close the connection (its answers, if any, are written first)."""
        self.closed = True
        self._disarm()
        self.config.fronts.discard(self)
        self.transport.close()

    # -------------------------------------------------------------- timers --

    _idle = False

    def _arm(self, delay: float, fire: Callable[[], None], *, idle: bool = False) -> None:
        self._disarm()
        self._idle = idle
        self.timer = asyncio.get_running_loop().call_later(delay, fire)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self) -> None:
        """The request did not all arrive in time: 408."""
        self.timer = None
        if self.closed or self.busy:
            return
        self.closed = True
        admission = self.config.admission
        refuse_raw(self.transport, 408, admission.timed_out(self.remote or "unknown"))


def _no_hand_over(data: bytes, request: HttpRequest, refusal: RunwireError | None) -> None:
    """What a closed connection passes to websockets: nothing."""


def _reason(exc: h11.RemoteProtocolError) -> str:
    """h11's reason, without the bytes it quotes."""
    return str(exc).split(":", 1)[0]


def too_large(size: int, limit: int) -> RunwireError:
    """The refusal of a body of ``size`` bytes over ``limit``."""
    return RunwireError(
        "PAYLOAD_TOO_LARGE",
        f"a body of {size} bytes exceeds the limit of {limit}",
        details={"size": size, "limit": limit},
    )


def _handshake_head(request: HttpRequest) -> bytes:
    """The handshake as websockets reads it: lines longer than it reads (a large token's)
    are left out; the connection keeps the request as sent (``FrontConnection.opening``)."""
    target = request.path
    if len(target) + 15 > LINE_LIMIT:
        target = target.split("?", 1)[0][: LINE_LIMIT - 15] or "/"
    lines = [f"GET {target} HTTP/1.1"]
    for name, value in request.headers.raw_items():
        if len(name) + len(value) + 4 <= LINE_LIMIT:
            lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _log_access(exchange: Exchange, started: float) -> None:
    """One ``runwire.access`` line per request answered (``--no-access-log`` turns it off)."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    request = exchange.request
    ms = round((time.perf_counter() - started) * 1000, 3)
    path = redact.redact(request.path)  # a browser's ?token= stays out of the log
    access_log.info(
        "%s %s %s %s %.1f ms",
        request.remote,
        request.method,
        path,
        exchange.status,
        ms,
        extra={
            "method": request.method,
            "path": path,
            "status": exchange.status,
            "duration_ms": ms,
            "remote": request.remote,
        },
    )
