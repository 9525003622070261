"""The statuses of a Run, the moves between them, and when a Run has ended (no I/O).

Every side asks ``run_ended`` whether a Run is over, and refuses what comes
after with ``ended_error``: the relay's rules, both SDKs and the agent's
``Run``. docs/explanation/run-rules.md tells the whole lifecycle.
"""

from __future__ import annotations

import hashlib

from .errors import RUN_NOT_ACTIVE, RunwireError
from .frames import Multitask, RunEndReason

__all__ = [
    "GOING_ON",
    "INTERRUPTING",
    "MULTITASK_STRATEGIES",
    "TERMINAL",
    "TRANSITIONS",
    "WAITING",
    "end_reason",
    "ended_error",
    "relay_entry_id",
    "run_ended",
]

MULTITASK_STRATEGIES: tuple[Multitask, ...] = (
    "alongside",
    "reject",
    "enqueue",
    "interrupt",
    "rollback",
)
WAITING: frozenset[str] = frozenset({"enqueue", "interrupt", "rollback"})
"""Strategies whose prompt waits while a Run is running."""
INTERRUPTING: frozenset[str] = frozenset({"interrupt", "rollback"})
"""Strategies whose prompt cancels the running Runs first."""

TERMINAL: frozenset[str] = frozenset({"complete", "cancelled", "error"})
GOING_ON: frozenset[str] = frozenset({"pending", "active"})
"""Statuses of Runs that count as running (and hold a slot)."""
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"pending", "cancelled", "error"}),
    "pending": frozenset({"active", "cancelled", "error"}),
    "active": frozenset({"suspended", "complete", "cancelled", "error"}),
    "suspended": frozenset({"active", "complete", "cancelled", "error"}),
    "complete": frozenset(),
    "cancelled": frozenset(),
    "error": frozenset(),
}


def run_ended(status: str | None) -> bool:
    """True once a Run with ``status`` has ended: the one place every side decides it."""
    return status in TERMINAL


def ended_error(run_id: str, status: str) -> RunwireError:
    """The ``RUN_NOT_ACTIVE`` refusal of anything sent to a Run that ended ``status``."""
    return RunwireError(
        RUN_NOT_ACTIVE,
        f"run {run_id!r} already ended ({status})",
        details={"run_id": run_id, "status": status},
    )


def end_reason(status: str) -> RunEndReason | None:
    """The ``RunEndReason`` of a terminal status, None otherwise."""
    if status == "complete":
        return "complete"
    if status == "cancelled":
        return "cancelled"
    if status == "error":
        return "error"
    return None


def relay_entry_id(*parts: str) -> str:
    """A deterministic id for an entry the relay publishes (at most 200 characters)."""
    text = "relay:" + ":".join(parts)
    if len(text) <= 200:
        return text
    return "relay:" + hashlib.sha256(text.encode()).hexdigest()
