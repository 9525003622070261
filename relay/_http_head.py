"""Reading a request head line by line, within the relay's limits, before h11 parses it.

``HeadReader`` takes a connection's bytes until the blank line that ends a
request head. It enforces the head's limits as the bytes come, so that a
client cannot make the relay hold more than they allow:

* the request line may be ``LINE_LIMIT`` bytes plus room for a token
  (``max_token_bytes``); past it the answer is 414;
* a header line may be ``LINE_LIMIT`` bytes, the ``Authorization`` header
  plus room for a token; past it the answer is 431;
* the whole head may be ``MAX_HEAD_BYTES`` plus room for two tokens; past it
  the answer is 431, and the rest is not read.

A line too long is skipped to its end unread, and left out of the head. It
may carry a token: the ``Authorization`` header, or a request line with a
``token`` query parameter. Then, on a relay that checks tokens, the refusal is
the token's: ``UNAUTHORIZED`` with ``details.reason`` ``too_large``. It is
answered 401, or at ``hello`` for a WebSocket handshake. Bytes outside printable ASCII in the
request target are percent-encoded, so such a request is answered by its route
rather than refused as malformed. The result is a ``Head``: the bytes h11 then
parses (``relay._http_front``), and the error to answer, if any.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transport.errors import PAYLOAD_TOO_LARGE, RunwireError

from .auth import token_too_large

__all__ = ["LINE_LIMIT", "MAX_HEAD_BYTES", "Head", "HeadReader", "head_limit"]

LINE_LIMIT = 8192
"""The longest request line or header line read, besides room for a token."""
MAX_HEAD_BYTES = 64 * 1024
"""The most a request head may hold, besides room for a token on its request line and
``Authorization`` header (``max_token_bytes`` each)."""

_NOT_IN_TARGET = re.compile(rb"[^\x21-\x7e]")
_TOKEN_PARAM = re.compile(rb"[?&]token=")


def head_limit(max_token: int) -> int:
    """The most bytes a request head may hold on a relay with this token limit."""
    return MAX_HEAD_BYTES + 2 * max_token


@dataclass(frozen=True)
class Head:
    """A request head read to its blank line (``complete``), or cut off at the head limit.

    ``data`` is the head to parse, ``rest`` the bytes that came after it. ``error`` is
    why the request is refused (``status``: its HTTP status, when not the code's)."""

    data: bytes
    rest: bytes
    error: RunwireError | None = None
    status: int | None = None
    complete: bool = True


class HeadReader:
    """The head of one request, fed as it arrives (see the module docstring)."""

    def __init__(self, max_token: int, *, credentials: bool, max_skip: int) -> None:
        self.max_token = max_token
        self.credentials = credentials
        self.max_skip = max(max_skip, LINE_LIMIT + max_token)
        self.buffer = bytearray()
        self.lines: list[bytes] = []
        self.size = 0
        self.error: RunwireError | None = None
        self.status: int | None = None
        # The line being skipped: its first bytes, size so far, whether a token was seen,
        # and the last bytes of what was skipped (a ``token=`` split between reads).
        self._skip: tuple[bytes, int, bool, bytes] | None = None

    @property
    def started(self) -> bool:
        """Whether any byte of this head has arrived."""
        return bool(self.buffer or self.lines or self._skip)

    def feed(self, data: bytes) -> Head | None:
        """Take ``data``; the head once it is complete (or refused), else None."""
        self.buffer += data
        while True:
            if self._skip is not None and not self._skip_on():
                return self._cut_off() if self._skip_too_far() else None
            end = self.buffer.find(b"\n") + 1
            limit = self._limit()
            if end == 0:
                if len(self.buffer) > limit:
                    self._skip = (bytes(self.buffer[:256]), 0, False, b"")
                    continue
                return None
            if end > limit:
                self._skip = (bytes(self.buffer[:256]), 0, False, b"")
                continue
            line = bytes(self.buffer[:end])
            del self.buffer[:end]
            if line in (b"\r\n", b"\n"):
                if not self.lines:
                    continue  # a blank line before the request line is ignored
                return Head(
                    b"".join(self.lines) + b"\r\n", bytes(self.buffer), self.error, self.status
                )
            self.size += len(line)
            if self.size > head_limit(self.max_token):
                return self._cut_off()
            self.lines.append(_sane_request_line(line) if not self.lines else line)

    def _limit(self) -> int:
        if not self.lines:
            return LINE_LIMIT + self.max_token
        if self.buffer[:14].lower() == b"authorization:":
            return LINE_LIMIT + self.max_token
        return LINE_LIMIT

    def _skip_on(self) -> bool:
        """Drop the line being skipped up to its end; True once it ended."""
        assert self._skip is not None
        start, size, has_token, tail = self._skip
        end = self.buffer.find(b"\n") + 1
        stop = end or len(self.buffer)
        window = tail + bytes(self.buffer[:stop])
        has_token = has_token or _TOKEN_PARAM.search(window) is not None
        size += stop
        del self.buffer[:stop]
        if not end:
            self._skip = (start, size, has_token, window[-6:])
            return False
        self._skip = None
        self._too_long(start, size, has_token)
        return True

    def _skip_too_far(self) -> bool:
        return self._skip is not None and self._skip[1] > self.max_skip

    def _too_long(self, start: bytes, size: int, has_token: bool) -> None:
        """Note a line too long to read; the request line gets a stand-in."""
        request_line = not self.lines
        if request_line:
            method = start.partition(b" ")[0] or b"GET"
            self.lines.append(method[:20] + b" / HTTP/1.1\r\n")
            what, limit, status = "the request line", LINE_LIMIT + self.max_token, 414
        elif start[:14].lower() == b"authorization:":
            what, limit, status = "the Authorization header", LINE_LIMIT + self.max_token, 431
            has_token = True
        else:
            what, limit, status = "a header line", LINE_LIMIT, 431
        if self.error is not None:
            return
        if has_token and self.credentials:
            self.error = token_too_large(size, self.max_token, what)
            return
        self.error = RunwireError(
            PAYLOAD_TOO_LARGE,
            f"{what} is {size} bytes, over the limit of {limit}",
            details={"size": size, "limit": limit},
        )
        self.status = status

    def _cut_off(self) -> Head:
        """A head past the limits: refused where it is, the rest unread."""
        if self._skip is not None:
            start, size, has_token, _ = self._skip
            self._too_long(start, size, has_token)
        if self.error is None:
            limit = head_limit(self.max_token)
            self.error = RunwireError(
                PAYLOAD_TOO_LARGE,
                f"the request head is over {limit} bytes",
                details={"limit": limit},
            )
            self.status = 431
        return Head(b"", b"", self.error, self.status, complete=False)


def _sane_request_line(line: bytes) -> bytes:
    """The request line with bytes outside printable ASCII in its target percent-encoded
    (h11 refuses them); a line that is not ``method target version`` is left as it is."""
    parts = line.rstrip(b"\r\n").split(b" ")
    if len(parts) != 3 or not _NOT_IN_TARGET.search(parts[1]):
        return line
    target = _NOT_IN_TARGET.sub(lambda m: b"%%%02X" % m[0][0], parts[1])
    return b"%s %s %s\r\n" % (parts[0], target, parts[2])
