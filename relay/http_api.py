"""The HTTP API: back ends without a socket, on the relay's own port.

Routes (``{id}`` a session id, ``{run_id}`` a Run's; path segments may be
percent-encoded):

* ``POST /v1/sessions/{id}/messages``: body ``{"message": <UIMessage or text>,
  "message_id"?, "run_id"?, "intent"?, "multitask"?, "agent"?, "parent_id"?,
  "parent_run_id"?, "thread_access"?, "client_id"?}`` -> ``201 {"serial",
  "run_id", "message_id", "duplicate"}``. A ``message`` entry published as the
  token's user, exactly as a WebSocket ``publish``: the same Run rules, the
  same de-duplication by the message id (a retry answers the first serial and
  Run with ``duplicate: true``). ``intent`` defaults to ``prompt`` (a new Run;
  ``run_id`` is chosen when absent); ``steer`` / ``follow_up`` / ``inject``
  need ``run_id``. A text message gets a fresh id unless ``message_id`` names
  one: send one to make retries safe.
* ``POST /v1/sessions/{id}/runs/{run_id}/cancel``: body ``{"reason"?, "id"?,
  "client_id"?}`` (or none) -> ``202 {"serial", "run_id", "duplicate"}``; ``id``
  is the cancel entry's id, for retries.
* ``POST /v1/sessions/{id}/runs/{run_id}/resume``: body ``{"responses":
  {interrupt_id: answer}, "decline"?, "reason"?, "id"?, "client_id"?}`` ->
  ``202 {"serial", "run_id", "duplicate"}``. Answers a paused Run's questions
  (an ``interrupt: resumed`` entry, checked by the Run rules: 400
  ``VALIDATION_ERROR`` / ``INTERRUPT_ANSWER_INVALID`` with
  ``details.interrupt_id``, 410 ``INTERRUPT_EXPIRED``); ``decline: true``
  ends the pause without answers (``interrupt: declined``, the seed's
  ``cancelPause``).
* ``GET /v1/sessions/{id}/history?before=&limit=`` -> ``{"entries", "has_older",
  "head", "epoch"}``: the newest ``limit`` (50) entries below ``before`` (default:
  the newest), in serial order, as WebSocket ``page`` frames carry them.
* ``GET /v1/sessions/{id}/events?from=&wait=&limit=``: Server-Sent Events, below.

Rights and errors. A request presents a token as a WebSocket connection does
(``Authorization: Bearer``, or the ``token`` query parameter) and has the
rights it grants in that session: ``subscribe`` to read, the Run rules'
(``transport.runs``) to publish. Entries are stamped with the token's user,
and its ``client_id`` claim or the body's ``client_id`` (default ``http``)
scoped to that user; an anonymous relay stamps no user. Every failure is
``{"error": {"code", "message", "details"}}`` with the WebSocket protocol's
code and an HTTP status (``STATUS``): 400 ``VALIDATION_ERROR`` /
``PROTOCOL_ERROR``, 401 ``UNAUTHORIZED`` (a token missing, forged or malformed)
/ ``TOKEN_EXPIRED``, 403 ``UNAUTHORIZED`` with ``details.needs`` (a capability
the token lacks), 404 ``RUN_NOT_FOUND`` / ``NOT_FOUND`` (no such route), 405,
409 ``RUN_NOT_ACTIVE`` / ``THREAD_BUSY`` / ``DUPLICATE_RUN`` /
``THREAD_ACCESS_DENIED``, 413 ``PAYLOAD_TOO_LARGE`` (a body over
``max_frame_bytes``), 410 ``INTERRUPT_EXPIRED``, 503 ``STORE_UNAVAILABLE``.

The event stream, long-poll style. websockets' ``process_request`` returns a
whole response, so a response cannot stay open and stream. The stream is
made of short responses instead, in the way ``EventSource`` already
reconnects: each response carries every entry after the position (the
``Last-Event-ID`` header, else the ``from`` query parameter, else the head:
only new entries), at most ``limit`` (100) of them, as ``id: <serial>`` /
``event: entry`` / ``data: <entry JSON>``; when there are none yet it waits up
to ``wait`` seconds (15, at most ``MAX_WAIT``, and never past the token's
expiry) for one, then ends. It starts
with ``retry: 25`` and ``id: <position>`` and ends with ``id:
<serial>@<epoch>`` (no data: it sets the last event id and fires no event),
so a browser reconnects 25 ms later with ``Last-Event-ID`` set to the last
serial it got (or the position it was at) and the epoch of that history: no
gap, no duplicate, no mix of two histories. A bare serial (ids had no epoch
before) is taken unchecked. A position the channel cannot continue from (of
another epoch, as after the store lost the history; a serial beyond its head;
or one its store trimmed) gets ``event: reset`` (data ``{"epoch", "head",
"first"}``) and the stream starts over from the oldest entry stored. An entry that
pauses a Run on questions (``interrupt``, ``paused``) is followed by ``event:
interrupt-required`` with the same id (data ``{"run_id", "serial", "interrupts"}``:
the questions), so a page can ask them without folding entries. Where the
store can lose a loaded channel (``Store.loses_channels``: Redis), the epoch
is read from the store after the entries, so a node whose channel has not yet
noticed never labels another history's entries with the old epoch. A waiting
request listens on the channel (``Channel.listen``) under ``Hub.hold``, which
releases the channel when the request ends, so waiting pins no session; it
ends as soon as the channel takes in an entry or resets (the store lost its
history: it answers ``event: reset`` then, not once ``wait`` ran out).
With ``format=ag-ui`` each entry comes as the AG-UI events it stands for
(``transport.agui``), each an unnamed ``data:`` event, the last with the
entry's ``id: <serial>``: an AG-UI client reads the stream as it is.

How a body is read. websockets parses each connection's opening request
itself (``ServerProtocol.parse`` runs ``Request.parse(reader.read_line)``),
hands ``process_request`` a ``Request`` without a body, and before that drops
the connection, with no response, of any request that declares a body (a
``Content-Length`` other than 0, or a ``Transfer-Encoding``) and, before
websockets 17, of any method but GET. So ``serve()`` gives websockets
``create_connection=connection_class(...)``: a ``RelayConnection``
(``relay.wsconn``) whose protocol reads with a ``BodyReader``, installed before the first byte
arrives. ``BodyReader.read_line`` (the only read ``Request.parse`` makes) keeps
the method of the request line and shows websockets ``GET``, shows it the
``Content-Length`` and ``Transfer-Encoding`` headers renamed
(``X-Runwire-...``), and, as it hands back the blank line that ends the
head, first reads the body (``Content-Length`` bytes, or chunks) into
``reader.body``. websockets still parses and limits the head, and the head
as a whole is capped at ``MAX_HEAD_BYTES`` (64 KiB, plus room for a token: 431
past it); the body is capped at ``max_frame_bytes`` (a larger one is answered
413 from its ``Content-Length``, unread; a chunked one is cut off at the limit),
and on a relay with tokens it is read only when the request's token is good
(``authorize``; else it is answered 401 unread). The connection's caps and
request timeout are ``relay.admission``'s. A head
websockets would refuse to parse (it drops the connection unanswered) is shown
as a stand-in: bytes outside printable ASCII in the target percent-encoded, a
malformed request line as ``GET /``, a malformed header line as a harmless
header; the latter two are answered 400 ``PROTOCOL_ERROR`` (``head_error``).
Lines longer than websockets reads (8 KiB; the request line and the
``Authorization`` header, which may carry a token, ``max_token_bytes`` more) are
skipped to their end unread and shown as a stand-in too: one that carried a
token is refused as the token (``UNAUTHORIZED``, reason ``too_large``: at
``hello`` for a WebSocket handshake, 401 otherwise), any other is answered 414
(the request line) or 431 ``PAYLOAD_TOO_LARGE`` (websockets answered these in
plain text).
Bytes
after the request (a pipelined one, a body longer than its ``Content-Length``)
are dropped unread unless it asks for an upgrade (``BodyReader.at_eof``):
websockets would take them for frames and drop the connection unanswered. It
relies on two attributes of websockets' sans-I/O protocol, ``reader`` and
``parser``, alike from websockets 14 to 17; the tests go through it. Responses
close the connection (no keep-alive), and the handshake timeout is
``OPEN_TIMEOUT`` so that a waiting request fits in it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Generator
from http import HTTPStatus
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol
from websockets.streams import StreamReader

from transport import agui, codec
from transport.errors import (
    CONFLICT,
    DUPLICATE_RUN,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    INTERRUPT_ANSWER_INVALID,
    INTERRUPT_EXPIRED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PAYLOAD_TOO_LARGE,
    PROTOCOL_ERROR,
    RATE_LIMITED,
    RUN_NOT_ACTIVE,
    RUN_NOT_FOUND,
    STORE_UNAVAILABLE,
    THREAD_ACCESS_DENIED,
    THREAD_BUSY,
    TOKEN_EXPIRED,
    UNAUTHORIZED,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import (
    CancelEntry,
    EntryBody,
    Intent,
    InterruptEntry,
    MessageEntry,
    Multitask,
    ThreadAccess,
)
from transport.messages import UIMessage, new_id, user_message
from transport.runs import SUBSCRIBE, Sender

from .admission import Admission, refuse_raw
from .auth import Identity, TokenVerifier, token_from_request, token_too_large
from .channel import Channel
from .hub import Hub
from .wsconn import RelayConnection

__all__ = [
    "MAX_WAIT",
    "OPEN_TIMEOUT",
    "RETRY_MS",
    "STATUS",
    "BodyReader",
    "HttpApi",
    "connection_class",
    "head_error",
    "head_status",
    "request_method",
]

log = logging.getLogger("runwire.relay")

MAX_WAIT = 25.0
"""The longest an event-stream request waits for a new entry (seconds)."""
OPEN_TIMEOUT = MAX_WAIT + 10.0
"""websockets' handshake timeout, which covers ``process_request``: a waiting request fits."""
RETRY_MS = 25
"""The ``retry:`` an event stream announces: browsers reconnect this soon after a response."""
DEFAULT_CLIENT_ID = "http"

STATUS: dict[str, int] = {
    VALIDATION_ERROR: 400,
    PROTOCOL_ERROR: 400,
    UNAUTHORIZED: 401,
    TOKEN_EXPIRED: 401,
    NOT_FOUND: 404,
    RUN_NOT_FOUND: 404,
    RUN_NOT_ACTIVE: 409,
    THREAD_BUSY: 409,
    DUPLICATE_RUN: 409,
    THREAD_ACCESS_DENIED: 409,
    CONFLICT: 409,
    EPOCH_MISMATCH: 409,
    INTERRUPT_ANSWER_INVALID: 400,
    INTERRUPT_EXPIRED: 410,
    PAYLOAD_TOO_LARGE: 413,
    RATE_LIMITED: 429,
    INTERNAL_ERROR: 500,
    NOT_IMPLEMENTED: 501,
    STORE_UNAVAILABLE: 503,
}
"""The HTTP status of each error code (``UNAUTHORIZED`` with ``details.needs``: 403;
codes not listed, such as an input check's refusal: 400)."""

_SESSION_ID = re.compile(r"[A-Za-z0-9._:\-]{1,200}")
# Access-Control-Allow-Origin names the request's origin when it is allowed (relay.origins).
_CORS = (
    ("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID"),
    ("Access-Control-Allow-Methods", "GET, POST, OPTIONS"),
)

# ------------------------------------------------------------ request bodies --

_REQUEST_LINE, _HEADERS, _DONE = 0, 1, 2


class BodyReader(StreamReader):
    """websockets' stream reader, reading the body of the opening request too.

    ``method`` is the request's method, ``body`` its body, ``body_error`` why
    the body could not be read (``PAYLOAD_TOO_LARGE``, ``PROTOCOL_ERROR``).
    """

    # Every connection keeps its reader: its own fields in slots, not in a __dict__.
    __slots__ = (
        "_authorization",
        "_chunked",
        "_head_bytes",
        "_length",
        "_phase",
        "_target",
        "_upgrade",
        "authorize",
        "body",
        "body_error",
        "complete",
        "credentials",
        "head_error",
        "head_status",
        "max_body",
        "max_token",
        "method",
        "opened_at",
    )

    def __init__(
        self,
        max_body: int,
        max_token: int = 0,
        *,
        credentials: bool = False,
        authorize: Authorize | None = None,
    ) -> None:
        super().__init__()
        self.authorize = authorize
        self.max_body = max_body
        self.max_token = max_token
        self.credentials = credentials
        self.method = "GET"
        self.body = b""
        self.body_error: RunwireError | None = None
        self.head_error: RunwireError | None = None
        self.head_status: int | None = None
        self.opened_at = time.monotonic()
        self._phase = _REQUEST_LINE
        self._length: int | None = None
        self._chunked = False
        self._upgrade = False
        self._head_bytes = 0
        self._target = b"/"
        self._authorization: bytes | None = None
        self.complete = False

    def read_line(self, m: int, *args: Any) -> Generator[None, None, bytearray]:
        # websockets 17 passes the exception to raise for a long line; earlier ones do not.
        if self._phase == _DONE:
            return (yield from super().read_line(m, *args))
        # The request line and the Authorization header may carry a token: they get room
        # for one beyond websockets' limit ``m``; other lines keep it.
        limit = m + self.max_token
        line, size, has_token = yield from self._head_line(limit, args)
        self._head_bytes += len(line)
        if self._head_bytes > MAX_HEAD_BYTES + 2 * self.max_token:
            return self._head_too_large()
        if self._phase == _REQUEST_LINE:
            self._phase = _HEADERS
            if size > limit:
                self._too_long("the request line", size, limit, has_token, 414)
                method = bytes(line).partition(b" ")[0] or b"GET"
                return bytearray(self._request_line(method + b" / HTTP/1.1\r\n"))
            return bytearray(self._request_line(bytes(line)))
        if bytes(line) in (b"\r\n", b"\n"):
            self._phase = _DONE
            self._check_token()
            yield from self._read_body()
            self.complete = True
            return line
        if size > m:
            name = bytes(line).partition(b":")[0].strip().lower()
            token = name == b"authorization"
            if size > (limit if token else m):
                what = "the Authorization header" if token else "a header line"
                self._too_long(what, size, limit if token else m, token, 431)
                return bytearray(b"X-Runwire-Too-Long: 1\r\n")
        if not _HEADER_LINE.fullmatch(line):
            self.head_error = RunwireError(PROTOCOL_ERROR, "a malformed header line")
            return bytearray(b"X-Runwire-Malformed: 1\r\n")
        name, colon, value = bytes(line).partition(b":")
        key = name.strip().lower()
        if colon and key == b"content-length":
            self._declare_length(value.strip())
            return bytearray(b"X-Runwire-Content-Length:" + value)
        if colon and key == b"transfer-encoding":
            if value.strip().lower().rsplit(b",", 1)[-1].strip() == b"chunked":
                self._chunked = True
            else:
                self.body_error = RunwireError(
                    PROTOCOL_ERROR, "only the chunked transfer coding is supported"
                )
            return bytearray(b"X-Runwire-Transfer-Encoding:" + value)
        if colon and key == b"upgrade":
            self._upgrade = True
        if colon and key == b"authorization":
            self._authorization = value.strip()
        return line

    def _head_too_large(self) -> bytearray:
        """End a head longer than ``MAX_HEAD_BYTES`` (and room for tokens) where it is: 431,
        and the rest of it is dropped unread (``at_eof``)."""
        if self.head_error is None or self.head_status is None:
            self.head_error = RunwireError(
                PAYLOAD_TOO_LARGE,
                f"the request head is over {MAX_HEAD_BYTES + 2 * self.max_token} bytes",
                details={"limit": MAX_HEAD_BYTES + 2 * self.max_token},
            )
            self.head_status = 431
        self._phase = _DONE
        self._upgrade = False
        self.complete = True
        return bytearray(b"\r\n")

    def _check_token(self) -> None:
        """Before a body is read, the token: a body sent without a good one is not read."""
        if self.authorize is None or self.body_error is not None:
            return
        if not (self._chunked or self._length):
            return
        authorization = None
        if self._authorization is not None:
            authorization = self._authorization.decode("latin-1")
        refused = self.authorize(self._target.decode("latin-1"), authorization)
        if refused is not None:
            self.body_error = refused

    def _head_line(
        self, limit: int, args: tuple[Any, ...]
    ) -> Generator[None, None, tuple[bytearray, int, bool]]:
        """The next line of the head and its size; a line over ``limit`` bytes is skipped to
        its end, and its start (256 bytes) returned with its size and whether a ``token``
        query parameter was in it. Past ``max_body`` bytes websockets' refusal is raised."""
        p = 0
        while True:
            n = self.buffer.find(b"\n", p) + 1
            if n > 0 or len(self.buffer) > limit:
                break
            p = len(self.buffer)
            if self.eof:
                raise EOFError(f"stream ends after {p} bytes, before end of line")
            yield
        if 0 < n <= limit:
            line = self.buffer[:n]
            del self.buffer[:n]
            return line, n, False
        start = self.buffer[:256]
        size = 0
        has_token = False
        tail = b""
        while True:
            n = self.buffer.find(b"\n") + 1
            end = n or len(self.buffer)
            window = tail + bytes(self.buffer[:end])
            has_token = has_token or _TOKEN_PARAM.search(window) is not None
            tail = window[-6:]
            size += end
            del self.buffer[:end]
            if n:
                return start, size, has_token
            if size > self.max_body:
                too_long: type[Exception] = args[0] if args else RuntimeError
                raise too_long(f"read {size} bytes, expected no more than {limit} bytes")
            if self.eof:
                raise EOFError(f"stream ends after {size} bytes, before end of line")
            yield

    def _too_long(self, what: str, size: int, limit: int, token: bool, status: int) -> None:
        """A line too long to read: the token's refusal when it carried one (and the relay
        checks tokens), else ``PAYLOAD_TOO_LARGE`` (answered ``status``, 414 or 431)."""
        if self.head_error is not None:
            return
        if token and self.credentials:
            self.head_error = token_too_large(size, self.max_token, what)
            return
        self.head_error = RunwireError(
            PAYLOAD_TOO_LARGE,
            f"{what} is {size} bytes, over the limit of {limit}",
            details={"size": size, "limit": limit},
        )
        self.head_status = status

    def _request_line(self, line: bytes) -> bytes:
        """The request line websockets is shown: ``GET``, the target with bytes outside
        printable ASCII percent-encoded (websockets refuses them), the version. A line
        it cannot parse becomes ``GET /``, and ``head_error`` says why."""
        method, _, rest = line.partition(b" ")
        target, _, version = rest.partition(b" ")
        if not method or not target or version not in (b"HTTP/1.1\r\n", b"HTTP/1.0\r\n"):
            self.head_error = RunwireError(PROTOCOL_ERROR, "a malformed request line")
            return b"GET / HTTP/1.1\r\n"
        if method != b"GET":
            self.method = method.decode("ascii", "replace")[:20]
        self._target = target
        return b"GET " + _NOT_IN_TARGET.sub(_percent, target) + b" " + version

    def at_eof(self) -> Generator[None, None, bool]:
        """True at the end of the stream. After the head (and body) of a request that is
        not a WebSocket upgrade, whatever else comes (a pipelined request, the rest of a
        body longer than its ``Content-Length``) is dropped unread: websockets would parse
        it as frames, fail, and close the connection before the response is sent."""
        if self._phase != _DONE or self._upgrade:
            return (yield from super().at_eof())
        while not self.eof:
            self.discard()
            yield
        return True

    def _declare_length(self, value: bytes) -> None:
        if not value.isdigit() or (self._length is not None and int(value) != self._length):
            self.body_error = RunwireError(PROTOCOL_ERROR, "a bad Content-Length header")
            return
        self._length = int(value)

    def _read_body(self) -> Generator[None, None, None]:
        if self.body_error is not None:
            return
        if self._chunked:
            yield from self._read_chunks()
        elif self._length:
            if self._length > self.max_body:
                self.body_error = _too_large(self._length, self.max_body)
                return
            self.body = bytes((yield from self.read_exact(self._length)))

    def _read_chunks(self) -> Generator[None, None, None]:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = yield from self.read_line(1024)
            try:
                n = int(bytes(line).split(b";", 1)[0].strip(), 16)
            except ValueError:
                n = -1
            if n < 0:
                self.body_error = RunwireError(PROTOCOL_ERROR, "a bad chunk size")
                return
            if n == 0:
                for _ in range(100):  # trailer fields, up to the blank line
                    if bytes((yield from self.read_line(8192))) in (b"\r\n", b"\n"):
                        break
                break
            size += n
            if size > self.max_body:
                self.body_error = _too_large(size, self.max_body)
                return
            chunks.append(bytes((yield from self.read_exact(n))))
            if (yield from self.read_exact(2)) != b"\r\n":
                self.body_error = RunwireError(PROTOCOL_ERROR, "a chunk without its CRLF")
                return
        self.body = b"".join(chunks)


MAX_HEAD_BYTES = 64 * 1024
"""The most a request head may hold (websockets allows 128 lines of 8 KiB), besides room for
a token on its request line and ``Authorization`` header (``max_token_bytes`` each)."""

Authorize = Callable[[str, str | None], RunwireError | None]
"""Checks a request's token from its target and ``Authorization`` header: the refusal, or
None (``BodyReader``: a body is read only when the token is good)."""

_NOT_IN_TARGET = re.compile(rb"[^\x21-\x7e]")
_TOKEN_PARAM = re.compile(rb"[?&]token=")
_HEADER_LINE = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r\n")
"""A header line as websockets takes it (``websockets.http11.parse_headers``)."""


def _percent(match: re.Match[bytes]) -> bytes:
    return b"%%%02X" % match[0][0]


def head_error(conn: ServerConnection) -> RunwireError | None:
    """Why the request's head is malformed or too long (websockets was shown a stand-in),
    or None. A token too long to read is ``UNAUTHORIZED`` (``auth.token_too_large``)."""
    reader = _reader(conn)
    return None if reader is None else reader.head_error


def head_status(conn: ServerConnection) -> int | None:
    """The HTTP status ``head_error`` is answered with, when not that of its code (414 for
    a request line too long, 431 for a header line)."""
    reader = _reader(conn)
    return None if reader is None else reader.head_status


def _too_large(size: int, limit: int) -> RunwireError:
    return RunwireError(
        PAYLOAD_TOO_LARGE,
        f"a body of {size} bytes exceeds the limit of {limit}",
        details={"size": size, "limit": limit},
    )


def connection_class(
    max_body: int,
    max_token: int = 0,
    *,
    credentials: bool = False,
    authorize: Authorize | None = None,
    admission: Admission | None = None,
) -> type[ServerConnection]:
    """A ``ServerConnection`` that reads request bodies of up to ``max_body`` bytes, and a
    request line or ``Authorization`` header with a token of up to ``max_token`` bytes (for
    websockets' ``serve(create_connection=...)``); ``credentials``: the relay checks tokens,
    so one too long to read is refused as a token; ``authorize``: a body is read only when
    it checks the token good; ``admission``: the connection caps and request timeout."""

    class HttpConnection(RelayConnection):
        def __init__(self, protocol: ServerProtocol, *args: Any, **kwargs: Any) -> None:
            # No byte has arrived yet: swap the reader, and restart the parser on it.
            protocol.reader = BodyReader(
                max_body, max_token, credentials=credentials, authorize=authorize
            )
            protocol.parser = protocol.parse()
            next(protocol.parser)
            super().__init__(protocol, *args, **kwargs)
            self.admitted: str | None = None
            self.refused = False
            self.deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if admission is not None:
                _admit(self, admission)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return  # answered already: what else comes is dropped unread
            super().data_received(data)
            if self.deadline is not None and _request_arrived(self):
                self.deadline.cancel()
                self.deadline = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None
            if admission is not None and self.admitted is not None:
                admission.release(self.admitted)
                self.admitted = None
            super().connection_lost(exc)

    return HttpConnection


def _admit(conn: Any, admission: Admission) -> None:
    """Count a new connection, or refuse it at once; start its request timeout."""
    peer = conn.transport.get_extra_info("peername")
    ip = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
    refusal = admission.admit(ip)
    if refusal is not None:
        conn.refused = True
        refuse_raw(conn.transport, *refusal)
        return
    conn.admitted = ip

    def timed_out() -> None:
        conn.deadline = None
        if not _request_arrived(conn) and not conn.refused:
            conn.refused = True
            refuse_raw(conn.transport, 408, admission.timed_out(ip))

    conn.deadline = asyncio.get_running_loop().call_later(admission.request_timeout, timed_out)


def _request_arrived(conn: ServerConnection) -> bool:
    """Whether the head (and body) of the connection's request has all been read."""
    reader = _reader(conn)
    return reader is None or reader.complete


def _reader(conn: ServerConnection) -> BodyReader | None:
    reader = conn.protocol.reader
    return reader if isinstance(reader, BodyReader) else None


def request_method(conn: ServerConnection, request: Request) -> str:
    """The method of the request as the client sent it."""
    reader = _reader(conn)
    if reader is not None:
        return reader.method
    return str(getattr(request, "method", "GET"))


# ------------------------------------------------------------- request models --


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


Id = Annotated[str, Field(min_length=1, max_length=200)]


class PostMessage(_Body):
    """The body of ``POST /v1/sessions/{id}/messages``."""

    message: UIMessage | str
    message_id: Id | None = None
    run_id: Id | None = None
    intent: Intent = "prompt"
    multitask: Multitask | None = None
    agent: Id | None = None
    parent_id: Id | None = None
    parent_run_id: Id | None = None
    thread_access: ThreadAccess | None = None
    client_id: Id | None = None


class PostCancel(_Body):
    """The body of ``POST /v1/sessions/{id}/runs/{run_id}/cancel``."""

    reason: str | None = Field(default=None, max_length=1000)
    id: Id | None = None
    client_id: Id | None = None


class PostResume(_Body):
    """The body of ``POST /v1/sessions/{id}/runs/{run_id}/resume``."""

    responses: dict[str, Any] = Field(default_factory=dict)
    decline: bool = False
    reason: str | None = Field(default=None, max_length=1000)
    id: Id | None = None
    client_id: Id | None = None


B = TypeVar("B", bound=_Body)

# -------------------------------------------------------------------- the API --

_ROUTES: dict[str, str] = {
    "messages": "POST",
    "history": "GET",
    "events": "GET",
    "cancel": "POST",
    "resume": "POST",
}


class HttpApi:
    """Answers ``/v1/...`` requests of one relay (see the module docstring)."""

    def __init__(self, hub: Hub, verifier: TokenVerifier | None) -> None:
        self.hub = hub
        self.store = hub.store
        self.options = hub.options
        self.verifier = verifier
        self.closing = False
        self._wakers: set[asyncio.Event] = set()

    def close(self) -> None:
        """The relay is stopping: waiting requests answer now, new ones do not wait."""
        self.closing = True
        for waker in self._wakers:
            waker.set()

    async def handle(self, conn: ServerConnection, request: Request) -> Response:
        """Answer one request (never raises)."""
        try:
            return await self._route(conn, request)
        except RunwireError as exc:
            return self._error(exc)
        except Exception:
            log.exception("HTTP %s failed", request.path.split("?", 1)[0])
            return self._error(RunwireError(INTERNAL_ERROR, "the relay failed on this request"))

    async def _route(self, conn: ServerConnection, request: Request) -> Response:
        method = request_method(conn, request)
        split = urlsplit(request.path)
        parts = split.path.split("/")
        name = ""
        run_id: str | None = None
        if len(parts) == 5 and parts[1:3] == ["v1", "sessions"] and parts[4] in _ROUTES:
            name = parts[4]
        elif len(parts) == 7 and parts[1:3] == ["v1", "sessions"] and parts[4] == "runs":
            if parts[6] in ("cancel", "resume"):
                name, run_id = parts[6], unquote(parts[5])
        if not name:
            raise RunwireError(
                NOT_FOUND, f"no route {split.path!r}", details={"path": split.path[:300]}
            )
        if method == "OPTIONS":
            return _response(204, b"", None)
        if method != _ROUTES[name]:
            response = self._error(
                RunwireError(
                    PROTOCOL_ERROR,
                    f"{split.path} takes {_ROUTES[name]}, not {method}",
                    details={"allow": _ROUTES[name]},
                ),
                status=405,
            )
            response.headers["Allow"] = f"{_ROUTES[name]}, OPTIONS"
            return response
        identity = self._identity(request)
        session_id = unquote(parts[3])
        if not _SESSION_ID.fullmatch(session_id):
            raise RunwireError(
                VALIDATION_ERROR,
                "a session id is 1-200 characters out of A-Z a-z 0-9 . _ : -",
                details={"session_id": session_id[:300]},
            )
        if run_id is not None and not 0 < len(run_id) <= 200:
            raise RunwireError(VALIDATION_ERROR, "a run id is 1-200 characters")
        query = parse_qs(split.query)
        if name == "messages":
            return await self._post_message(conn, identity, session_id)
        if name == "cancel":
            assert run_id is not None
            return await self._cancel(conn, identity, session_id, run_id)
        if name == "resume":
            assert run_id is not None
            return await self._resume(conn, identity, session_id, run_id)
        self._need_subscribe(identity, session_id)
        if name == "history":
            return await self._history(session_id, query)
        return await self._events(conn, request, session_id, query, identity)

    # ----------------------------------------------------------- publishing --

    async def _post_message(
        self, conn: ServerConnection, identity: Identity | None, session_id: str
    ) -> Response:
        body = self._body(conn, PostMessage)
        if isinstance(body.message, str):
            message = user_message(body.message, id=body.message_id)
        else:
            message = body.message
            if body.message_id is not None and body.message_id != message.id:
                raise RunwireError(
                    VALIDATION_ERROR,
                    "message_id differs from message.id (give one or the other)",
                    details={"message_id": body.message_id, "message.id": message.id},
                )
        run_id = body.run_id
        if run_id is None:
            if body.intent != "prompt":
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run_id: required for intent {body.intent!r} (the Run it is aimed at)",
                    details={
                        "errors": [{"loc": ["run_id"], "msg": "Field required", "type": "missing"}]
                    },
                )
            run_id = new_id()
        entry = MessageEntry(
            id=message.id,
            run_id=run_id,
            intent=body.intent,
            message=message,
            parent_id=body.parent_id,
            agent=body.agent,
            multitask=body.multitask,
            parent_run_id=body.parent_run_id,
            thread_access=body.thread_access,
        )
        sender = self.hub.sender(identity, body.client_id or DEFAULT_CLIENT_ID, session_id)
        serial, duplicate = await self._publish(session_id, entry, sender)
        if duplicate:
            run_id = await self._stored_run_id(session_id, entry.id) or run_id
        return _json(
            201,
            {"serial": serial, "run_id": run_id, "message_id": message.id, "duplicate": duplicate},
        )

    async def _cancel(
        self, conn: ServerConnection, identity: Identity | None, session_id: str, run_id: str
    ) -> Response:
        body = self._body(conn, PostCancel)
        entry = CancelEntry(id=body.id or new_id(), run_id=run_id, reason=body.reason)
        sender = self.hub.sender(identity, body.client_id or DEFAULT_CLIENT_ID, session_id)
        serial, duplicate = await self._publish(session_id, entry, sender)
        if duplicate:
            run_id = await self._stored_run_id(session_id, entry.id) or run_id
        return _json(202, {"serial": serial, "run_id": run_id, "duplicate": duplicate})

    async def _resume(
        self, conn: ServerConnection, identity: Identity | None, session_id: str, run_id: str
    ) -> Response:
        body = self._body(conn, PostResume)
        entry = InterruptEntry(
            id=body.id or new_id(),
            run_id=run_id,
            status="declined" if body.decline else "resumed",
            responses=None if body.decline else body.responses,
            reason=body.reason,
        )
        sender = self.hub.sender(identity, body.client_id or DEFAULT_CLIENT_ID, session_id)
        serial, duplicate = await self._publish(session_id, entry, sender)
        return _json(202, {"serial": serial, "run_id": run_id, "duplicate": duplicate})

    async def _publish(self, session_id: str, entry: EntryBody, sender: Sender) -> tuple[int, bool]:
        """Publish as ``hub.publish`` does, on a channel loaded again if the store lost the
        one this node had (``EPOCH_MISMATCH``: nothing was stored, and the channel's
        clients were told to rebuild). A request has no history to rebuild, so its
        entry goes into the session as the store has it now, as if it came first."""
        try:
            async with self.hub.hold(session_id) as channel:
                return await self.hub.publish(channel, entry, sender)
        except RunwireError as exc:
            if exc.code != EPOCH_MISMATCH:
                raise
        async with self.hub.hold(session_id) as channel:
            return await self.hub.publish(channel, entry, sender)

    async def _stored_run_id(self, session_id: str, entry_id: str) -> str | None:
        """The Run of the entry already stored under ``entry_id`` (a retry names the first)."""
        found = await self.store.find(session_id, entry_id)
        if found is None:
            return None
        try:
            run_id = codec.loads(found.data, max_depth=codec.RELAY_FRAME_DEPTH).get("run_id")
        except (RunwireError, AttributeError):
            return None
        return run_id if isinstance(run_id, str) else None

    # -------------------------------------------------------------- reading --

    async def _history(self, session_id: str, query: dict[str, list[str]]) -> Response:
        limit = min(_int(query, "limit", 50, 1, 1000), self.options.history_page_max)
        before = _opt_int(query, "before")
        for attempt in range(2):
            try:
                async with self.hub.hold(session_id) as channel:
                    page, has_older = await channel.history(
                        channel.last + 1 if before is None else before, limit
                    )
                    head, epoch = channel.last, channel.epoch
                break
            except RunwireError as exc:
                # The node's channel was of a history the store lost: read the session
                # as the store has it now.
                if exc.code != EPOCH_MISMATCH or attempt:
                    raise
        body = (
            b'{"entries":['
            + b",".join(e.data for e in page)
            + b'],"has_older":'
            + (b"true" if has_older else b"false")
            + b',"head":%d,"epoch":' % head
            + codec.dumps(epoch)
            + b"}"
        )
        return _response(200, body, "application/json")

    async def _events(
        self,
        conn: ServerConnection,
        request: Request,
        session_id: str,
        query: dict[str, list[str]],
        identity: Identity | None,
    ) -> Response:
        limit = min(_int(query, "limit", 100, 1, 1000), self.options.history_page_max)
        wait = _float(query, "wait", 15.0, 0.0, MAX_WAIT)
        shape = _param(query, "format") or "entries"
        if shape not in ("entries", "ag-ui"):
            raise RunwireError(VALIDATION_ERROR, "format must be entries or ag-ui")
        if identity is not None:
            # Not past the token's expiry: what is stored after it is not the token's to
            # read (a WebSocket connection is closed 4003 at that moment). The next
            # request, with the expired token, gets 401 TOKEN_EXPIRED.
            wait = max(0.0, min(wait, identity.expires_at - time.time()))
        header = request.headers.get("Last-Event-ID")
        after: int | None
        epoch: str | None
        if header is not None and header.strip():
            after, epoch = _position("Last-Event-ID", header.strip())
        else:
            text = _param(query, "from")
            after, epoch = _position("from", text) if text else (None, None)
        reader = _reader(conn)
        if reader is not None:  # stay inside websockets' handshake timeout
            wait = min(wait, OPEN_TIMEOUT - 2.0 - (time.monotonic() - reader.opened_at))
        blocks: list[bytes] = []
        async with self.hub.hold(session_id) as channel:
            if after is None:
                after = channel.last
            expected = channel.epoch if epoch is None else epoch
            # A position the channel cannot simply continue from: ask the store below.
            odd = expected != channel.epoch or not channel.first - 1 <= after <= channel.last
            if not odd and channel.last <= after and wait > 0:
                await self._wait(conn, channel, wait)
            entries = await self.store.read(session_id, after=after, limit=limit)
            now: str | None = channel.epoch
            head = channel.last
            if odd or self.store.loses_channels:
                # Read after the entries: they are of the epoch expected if the store
                # still has it (an epoch, once lost, never comes back). Not
                # ``open_channel``, which would make a session the store lost anew under
                # the loaded channel (its publishes would then expect that new epoch, at
                # serials it never took in).
                now, head = await self.store.head(session_id)
            if (
                (now != expected and (after or now is not None))
                or after > head
                or (entries and entries[0].serial != after + 1)
            ):
                # Not the history the position is in (the store lost it), beyond its
                # head, or trimmed since: start over from the oldest entry stored.
                entries = await self.store.read(session_id, after=0, limit=limit)
                first = entries[0].serial if entries else 0
                after = max(first - 1, 0)
                reset = {"epoch": now, "head": head, "first": first}
                blocks.append(b"id: %d\nevent: reset\ndata: %s\n\n" % (after, codec.dumps(reset)))
        blocks.insert(0, b"retry: %d\nid: %d\n\n" % (RETRY_MS, after))
        if shape == "ag-ui":
            blocks.extend(_ag_ui_block(e.serial, e.data, session_id) for e in entries)
        else:
            for e in entries:
                blocks.append(b"id: %d\nevent: entry\ndata: %s\n\n" % (e.serial, e.data))
                questions = _interrupt_required(e.data)
                if questions is not None:
                    blocks.append(
                        b"id: %d\nevent: interrupt-required\ndata: %s\n\n" % (e.serial, questions)
                    )
        if now is not None:
            # The position to resume from, with its epoch: an id without data sets the
            # last event id EventSource sends back, and fires no event.
            last = entries[-1].serial if entries else after
            blocks.append(b"id: %d@%s\n\n" % (last, now.encode()))
        response = _response(200, b"".join(blocks), "text/event-stream; charset=utf-8")
        response.headers["Cache-Control"] = "no-cache"
        return response

    async def _wait(self, conn: ServerConnection, channel: Channel, timeout: float) -> None:
        """Until the channel takes in an entry or resets (the store lost its history), the
        client hangs up, the relay stops, or ``timeout`` seconds pass."""
        if self.closing or channel.reset:
            return
        woke = asyncio.Event()
        stop = channel.listen(lambda _stored: woke.set(), on_reset=woke.set)
        self._wakers.add(woke)
        lost: asyncio.Future[None] | None = getattr(conn, "connection_lost_waiter", None)

        def hung_up(_: object) -> None:
            woke.set()

        if isinstance(lost, asyncio.Future):
            lost.add_done_callback(hung_up)
        try:
            async with asyncio.timeout(timeout):
                await woke.wait()
        except TimeoutError:
            pass
        finally:
            stop()
            self._wakers.discard(woke)
            if isinstance(lost, asyncio.Future):
                lost.remove_done_callback(hung_up)

    # -------------------------------------------------------------- helpers --

    def _identity(self, request: Request) -> Identity | None:
        if self.verifier is None:
            return None
        return self.verifier.verify(token_from_request(request.headers, request.path))

    @staticmethod
    def _need_subscribe(identity: Identity | None, session_id: str) -> None:
        if identity is not None and SUBSCRIBE not in identity.caps(session_id):
            raise RunwireError(
                UNAUTHORIZED,
                f"the token does not grant 'subscribe' in {session_id!r}",
                details={"session_id": session_id, "needs": SUBSCRIBE},
            )

    def _body(self, conn: ServerConnection, model: type[B]) -> B:
        reader = _reader(conn)
        raw = b"" if reader is None else reader.body
        if reader is not None and reader.body_error is not None:
            raise reader.body_error
        if len(raw) > self.options.max_frame_bytes:
            raise _too_large(len(raw), self.options.max_frame_bytes)
        data: Any = {}
        if raw.strip():
            try:
                data = codec.loads(raw)
            except RunwireError as exc:
                if exc.code != PROTOCOL_ERROR:  # nested too deep: VALIDATION_ERROR
                    raise
                raise RunwireError(
                    PROTOCOL_ERROR, exc.message.replace("frame", "the body", 1)
                ) from None
        if not isinstance(data, dict):
            raise RunwireError(PROTOCOL_ERROR, "the body must be a JSON object")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise codec.validation_error(exc) from None

    def refuse(self, exc: RunwireError, status: int | None = None) -> Response:
        """The JSON error response for ``exc`` (of a request the relay will not route), with
        ``status`` or the code's."""
        return self._error(exc, status)

    def _error(self, exc: RunwireError, status: int | None = None) -> Response:
        self.hub.metrics.errors.labels(exc.code).inc()
        if status is None:
            status = STATUS.get(exc.code, 400)
            if exc.code == UNAUTHORIZED and "needs" in exc.details:
                status = 403
        response = _json(status, {"error": exc.to_wire()})
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="runwire"'
        return response


def _ag_ui_block(serial: int, data: bytes, session_id: str) -> bytes:
    """One stored entry as AG-UI events: unnamed ``data:`` events, the entry's id on the last."""
    events = agui.entry_events(codec.loads(data), session_id)
    lines = [b"data: %s\n\n" % codec.dumps(event) for event in events]
    if lines:
        lines[-1] = b"id: %d\n" % serial + lines[-1]
        return b"".join(lines)
    return b"id: %d\n\n" % serial


def _param(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _parse_int(name: str, text: str, low: int, high: int | None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise RunwireError(
            VALIDATION_ERROR, f"{name}: an integer {bounds}", details={"param": name}
        )
    return value


_POSITION = re.compile(r"(\d{1,15})(?:@([A-Za-z0-9]{1,64}))?")


def _position(name: str, text: str) -> tuple[int, str | None]:
    """An event stream's position: ``<serial>`` (without an epoch: the form ids had before
    they carried one) or ``<serial>@<epoch>``."""
    match = _POSITION.fullmatch(text)
    if match is None:
        raise RunwireError(
            VALIDATION_ERROR,
            f"{name}: a serial, or <serial>@<epoch> (an id: line of the stream)",
            details={"param": name},
        )
    return int(match[1]), match[2]


def _int(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    text = _param(query, name)
    return default if not text else _parse_int(name, text, low, high)


def _opt_int(query: dict[str, list[str]], name: str) -> int | None:
    text = _param(query, name)
    return None if not text else _parse_int(name, text, 0, None)


def _float(
    query: dict[str, list[str]], name: str, default: float, low: float, high: float
) -> float:
    text = _param(query, name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise RunwireError(
            VALIDATION_ERROR, f"{name}: a number {low:g}..{high:g}", details={"param": name}
        )
    return value


def _response(status: int, body: bytes, content_type: str | None) -> Response:
    headers = Headers(_CORS)
    if content_type is not None:
        headers["Content-Type"] = content_type
    if status != 204:
        headers["Content-Length"] = str(len(body))
    headers["Connection"] = "close"
    return Response(status, HTTPStatus(status).phrase, headers, body)


def _json(status: int, value: Any) -> Response:
    return _response(status, codec.dumps(value), "application/json")


def _interrupt_required(data: bytes) -> bytes | None:
    """The ``interrupt-required`` event's data for a stored entry that pauses a Run on
    questions (its run id, serial and questions), else None."""
    if b'"paused"' not in data or b'"interrupt"' not in data:
        return None  # most entries: not decoded
    entry = codec.loads(data)
    if entry.get("kind") != "interrupt" or entry.get("status") != "paused":
        return None
    return codec.dumps(
        {
            "run_id": entry.get("run_id"),
            "serial": entry.get("serial"),
            "interrupts": entry.get("interrupts") or [],
        }
    )
