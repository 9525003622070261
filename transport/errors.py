"""One root exception with a stable code, and the codes the wire uses.

Every error that crosses the wire is a ``RunwireError``. Its ``code`` is a
stable upper-case string (the contract), ``message`` is for people, and
``details`` is a JSON-able dict. ``to_wire()`` and ``from_wire()`` carry it
through the ``error`` frame, so the relay and the SDKs report a failure the
same way.

Each code belongs to one group that says what the caller should do:
``RetryableError`` (retry), ``CredentialsError`` (authenticate again),
``RequestError`` (fix the request) and ``FinalError`` (give up).
``RunwireError(code, ...)`` builds an instance of the code's group, so
``except RunwireError`` still catches every one. ``ERROR_GROUPS`` is the table;
docs/reference/errors.md shows it.
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
    "ERROR_GROUPS",
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
    "CredentialsError",
    "FinalError",
    "RequestError",
    "RetryableError",
    "RunwireError",
    "error_group",
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
    Built as ``RunwireError(code, ...)``, the instance is of the code's group
    (see ``ERROR_GROUPS``); a code of no group gives a plain ``RunwireError``.
    """

    def __new__(cls, code: str = INTERNAL_ERROR, *args: Any, **kwargs: Any) -> RunwireError:
        if cls is RunwireError:
            cls = error_group(code)
        return super().__new__(cls)

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

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message), {"details": self.details})

    def __repr__(self) -> str:
        return f"RunwireError({self.code!r}, {self.message!r}, details={self.details!r})"


class RetryableError(RunwireError):
    """Retry: the request may work later, as it stands (after a backoff or a new attach)."""


class CredentialsError(RunwireError):
    """Authenticate again: the token is missing, expired or lacks the right."""


class RequestError(RunwireError):
    """Fix the request: as sent, it will be refused again."""


class FinalError(RunwireError):
    """Give up: the Run or the question moved on, and no retry changes that."""


ERROR_GROUPS: dict[type[RunwireError], frozenset[str]] = {
    RetryableError: frozenset(
        {
            STORE_UNAVAILABLE,
            RATE_LIMITED,
            CONFLICT,
            SLOW_CONSUMER,
            EPOCH_MISMATCH,
            INTERNAL_ERROR,
            THREAD_BUSY,
            "CONNECTION_CLOSED",  # the SDKs' own code (transport.asyncio._connection)
        }
    ),
    CredentialsError: frozenset({UNAUTHORIZED, TOKEN_EXPIRED}),
    RequestError: frozenset(
        {
            PROTOCOL_ERROR,
            UNKNOWN_FRAME,
            VALIDATION_ERROR,
            PAYLOAD_TOO_LARGE,
            NOT_ATTACHED,
            RUN_NOT_FOUND,
            DUPLICATE_RUN,
            INTERRUPT_ANSWER_INVALID,
            NOT_FOUND,
            LLM_CONTENT_FILTERED,
            "PII_DETECTED",  # the input checks' codes (transport.checks)
            "PROMPT_INJECTION_DETECTED",
            "CHECK_FAILED",
        }
    ),
    FinalError: frozenset(
        {
            RUN_NOT_ACTIVE,
            RUN_CANCELLED,
            RUN_TIMEOUT,
            AGENT_LOST,
            INTERRUPT_EXPIRED,
            CANCEL_DENIED,
            THREAD_ACCESS_DENIED,
            ABORTED,
            NOT_IMPLEMENTED,
        }
    ),
}
"""Which codes belong to which group: what the caller should do about them."""

_GROUP_OF: dict[str, type[RunwireError]] = {
    code: group for group, codes in ERROR_GROUPS.items() for code in codes
}


def error_group(code: str) -> type[RunwireError]:
    """The class ``RunwireError(code)`` builds: the code's group, else ``RunwireError``."""
    return _GROUP_OF.get(code, RunwireError)
