"""Connections before they are served: the connection caps and the request timeout.

Whatever a connection holds before its token is checked is bounded here.
``max_connections`` caps the connections open at once, and
``max_connections_per_ip`` those of one address. One more is answered at once with
503 for the total or 429 for one address, and closed. The answer is a JSON
``RATE_LIMITED`` error whose ``details`` name the limit; what the connection sends is
dropped unread. A connection whose request has not all arrived ``request_timeout``
seconds after it opened is answered 408 and closed. Each kind of refusal is logged
once per burst: again only after ``QUIET`` seconds without one.

These are plain functions and a small class, called by the HTTP front
(``relay._front_connection``, ``relay._http_front``), which reads every connection first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from http import HTTPStatus

from transport import _codec as codec
from transport.errors import PROTOCOL_ERROR, RATE_LIMITED, RunwireError

__all__ = ["QUIET", "Admission", "BurstLog", "refuse_raw"]

log = logging.getLogger("runwire.relay")

QUIET = 10.0
"""Seconds without a refusal of one kind before the next one is logged again."""
LINGER = 2.0
"""Seconds a refused connection stays open to let its response be read, then it is cut."""


class BurstLog:
    """Logs the first event of each burst (events less than ``quiet`` seconds apart)."""

    def __init__(self, quiet: float = QUIET) -> None:
        self.quiet = quiet
        self.last = -float("inf")
        self.count = 0

    def note(self, message: str, *args: object) -> bool:
        """Count one event; log ``message`` if it starts a burst (returns whether it did)."""
        now = time.monotonic()
        starts = now - self.last > self.quiet
        self.last = now
        if starts:
            if self.count:
                log.warning(message + " (%d more in the last burst)", *args, self.count)
            else:
                log.warning(message, *args)
            self.count = 0
        else:
            self.count += 1
        return starts


@dataclass
class Admission:
    """The open connections of one relay, counted in total and per address."""

    max_connections: int | None
    max_per_ip: int | None
    request_timeout: float
    total: int = 0
    per_ip: dict[str, int] = field(default_factory=dict)
    _full: BurstLog = field(default_factory=BurstLog)
    _ip_full: BurstLog = field(default_factory=BurstLog)
    _slow: BurstLog = field(default_factory=BurstLog)

    def admit(self, ip: str) -> tuple[int, RunwireError] | None:
        """Count a new connection from ``ip``, or the status and error it is refused with."""
        if self.max_connections is not None and self.total >= self.max_connections:
            self._full.note(
                "refusing connections: %d open, the limit (--max-connections)", self.total
            )
            return 503, _limited(
                f"the relay has {self.max_connections} connections open, its limit",
                "max_connections",
                self.max_connections,
            )
        count = self.per_ip.get(ip, 0)
        if self.max_per_ip is not None and count >= self.max_per_ip:
            self._ip_full.note(
                "refusing connections from %s: %d open, the limit (--max-connections-per-ip)",
                ip,
                count,
            )
            return 429, _limited(
                f"{ip} has {self.max_per_ip} connections open, the limit for one address",
                "max_connections_per_ip",
                self.max_per_ip,
            )
        self.total += 1
        self.per_ip[ip] = count + 1
        return None

    def release(self, ip: str) -> None:
        """A connection ``admit`` counted has closed."""
        self.total -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)

    def timed_out(self, ip: str) -> RunwireError:
        """The error a request that did not arrive in time is answered with (408)."""
        self._slow.note(
            "closed a connection from %s: its request did not arrive within %g s",
            ip,
            self.request_timeout,
        )
        return RunwireError(
            PROTOCOL_ERROR,
            f"the request did not arrive within {self.request_timeout:g} s",
            details={"limit": "request_timeout", "value": self.request_timeout},
        )


def _limited(message: str, limit: str, value: int) -> RunwireError:
    return RunwireError(RATE_LIMITED, message, details={"limit": limit, "value": value})


def refuse_raw(transport: asyncio.Transport, status: int, error: RunwireError) -> None:
    """Answer ``error`` with ``status`` straight on ``transport`` and end the connection:
    a half-close now (so the response is read, not lost to a reset), a cut ``LINGER``
    seconds later if the client has not closed by then."""
    body = codec.dumps({"error": error.to_wire()})
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    if transport.is_closing():
        return
    transport.write(head.encode() + body)
    if transport.can_write_eof():
        transport.write_eof()
    asyncio.get_running_loop().call_later(LINGER, transport.abort)
