"""One root exception with a stable code, and the codes the wire uses.

Every error that crosses the wire is a ``RunwireError``: ``code`` is a stable
upper-case string (the contract), ``message`` is for people, ``details`` is a
JSON-able dict. ``to_wire()`` / ``from_wire()`` round-trip it through the
``error`` frame, so the relay, both SDKs and the JavaScript client report the
same failure the same way.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ABORTED",
    "AGENT_LOST",
    "CANCEL_DENIED",
    "CLOSE_CODES",
    "CONFLICT",
    "DUPLICATE_RUN",
    "EPOCH_MISMATCH",
    "INTERNAL_ERROR",
    "INTERRUPT_ANSWER_INVALID",
    "INTERRUPT_EXPIRED",
    "LLM_CONTENT_FILTERED",
    "NOT_ATTACHED",
    "NOT_FOUND",
    "NOT_IMPLEMENTED",
    "PAYLOAD_TOO_LARGE",
    "PROTOCOL_ERROR",
    "RATE_LIMITED",
    "RUN_CANCELLED",
    "RUN_NOT_ACTIVE",
    "RUN_NOT_FOUND",
    "RUN_TIMEOUT",
    "SLOW_CONSUMER",
    "STORE_UNAVAILABLE",
    "THREAD_ACCESS_DENIED",
    "THREAD_BUSY",
    "TOKEN_EXPIRED",
    "UNAUTHORIZED",
    "UNKNOWN_FRAME",
    "VALIDATION_ERROR",
    "CloseCode",
    "RunwireError",
]

PROTOCOL_ERROR = "PROTOCOL_ERROR"
"""A frame that is not valid JSON, or not an object, or misses ``type``."""
UNKNOWN_FRAME = "UNKNOWN_FRAME"
"""A frame whose ``type`` the receiver does not know."""
VALIDATION_ERROR = "VALIDATION_ERROR"
"""A known frame whose fields have the wrong type or value."""
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
"""A frame larger than the relay's ``max_frame_bytes``."""
NOT_ATTACHED = "NOT_ATTACHED"
"""A frame about a session this connection has not attached to."""
RUN_NOT_FOUND = "RUN_NOT_FOUND"
"""A frame about a Run the session does not have."""
RUN_CANCELLED = "RUN_CANCELLED"
"""The error a Run that ended ``cancelled`` carries: its message is the abort's reason."""
RUN_NOT_ACTIVE = "RUN_NOT_ACTIVE"
"""Steering, cancelling or streaming into a Run that has already ended."""
DUPLICATE_RUN = "DUPLICATE_RUN"
"""A prompt that names a run id the session already has."""
INTERRUPT_ANSWER_INVALID = "INTERRUPT_ANSWER_INVALID"
"""An answer that breaks its interrupt's JSON Schema (``details.interrupt_id``)."""
INTERRUPT_EXPIRED = "INTERRUPT_EXPIRED"
"""An answer to an interrupt after its ``expires_at``."""
EPOCH_MISMATCH = "EPOCH_MISMATCH"
"""A resume from a serial of another epoch: the channel's history was lost."""
SLOW_CONSUMER = "SLOW_CONSUMER"
"""The connection's send queue overflowed; it is closed and should resume."""
AGENT_LOST = "AGENT_LOST"
"""The agent worker of an active Run went away and did not come back in time."""
RUN_TIMEOUT = "RUN_TIMEOUT"
"""Not an error frame: the ``error.code`` of a Run the relay ended ``cancelled`` at its deadline."""
UNAUTHORIZED = "UNAUTHORIZED"
"""The credentials do not allow this (no token, a bad one, or a capability it lacks)."""
TOKEN_EXPIRED = "TOKEN_EXPIRED"
"""The connection's token expired (at connect, or later: the relay then closes with 4003)."""
THREAD_BUSY = "THREAD_BUSY"
"""A ``reject`` prompt while a Run of the session is going on."""
THREAD_ACCESS_DENIED = "THREAD_ACCESS_DENIED"
"""A prompt with a strategy while another user's Run is going on in a session not shared."""
CANCEL_DENIED = "CANCEL_DENIED"
"""The Run's agent refused a cancel (its ``on_cancel`` hook); the Run goes on."""
LLM_CONTENT_FILTERED = "LLM_CONTENT_FILTERED"
"""The content filter input check refused the message (``details.categories`` says why)."""
ABORTED = "ABORTED"
"""The caller's abort signal had fired: nothing was sent."""
STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
"""The relay's store cannot take writes right now."""
RATE_LIMITED = "RATE_LIMITED"
"""Too many requests in flight on one connection."""
CONFLICT = "CONFLICT"
"""The channel moved on since the entry was checked; re-check and retry."""
NOT_IMPLEMENTED = "NOT_IMPLEMENTED"
"""A request for a feature this relay does not have yet (HTTP 501); nothing happened."""
NOT_FOUND = "NOT_FOUND"
"""An HTTP API path that names no route (HTTP 404)."""
INTERNAL_ERROR = "INTERNAL_ERROR"
"""A fault inside the relay; the request had no effect."""


class CloseCode:
    """WebSocket close codes the relay uses (4000-4999 are application codes)."""

    NORMAL = 1000
    GOING_AWAY = 1001
    SERVICE_RESTART = 1012
    MESSAGE_TOO_BIG = 1009
    PROTOCOL_ERROR = 4002
    UNAUTHORIZED = 4001
    SLOW_CONSUMER = 4008
    TOKEN_EXPIRED = 4003


CLOSE_CODES: dict[int, str] = {
    CloseCode.NORMAL: "NORMAL",
    CloseCode.GOING_AWAY: "GOING_AWAY",
    CloseCode.SERVICE_RESTART: "SERVICE_RESTART",
    CloseCode.MESSAGE_TOO_BIG: PAYLOAD_TOO_LARGE,
    CloseCode.PROTOCOL_ERROR: PROTOCOL_ERROR,
    CloseCode.UNAUTHORIZED: UNAUTHORIZED,
    CloseCode.SLOW_CONSUMER: SLOW_CONSUMER,
    CloseCode.TOKEN_EXPIRED: TOKEN_EXPIRED,
}
"""What each close code means, by the error code it stands for."""


class RunwireError(Exception):
    """The one exception runwire raises for anything the caller can act on.

    ``code`` is stable and travels on the wire; ``details`` is JSON-able.
    """

    def __init__(
        self, code: str, message: str | None = None, *, details: dict[str, Any] | None = None
    ) -> None:
        self.code = code
        self.message = message or code
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(f"{code}: {self.message}")

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` object of an error frame."""
        return {"code": self.code, "message": self.message, "details": self.details}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RunwireError:
        """Rebuild an error from the ``error`` object of a frame; tolerant of junk."""
        code = data.get("code")
        message = data.get("message")
        details = data.get("details")
        return cls(
            code if isinstance(code, str) and code else INTERNAL_ERROR,
            message if isinstance(message, str) else None,
            details=details if isinstance(details, dict) else None,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunwireError):
            return NotImplemented
        return (self.code, self.message, self.details) == (other.code, other.message, other.details)

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def __repr__(self) -> str:
        return f"RunwireError({self.code!r}, {self.message!r}, details={self.details!r})"
