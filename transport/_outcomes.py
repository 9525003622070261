"""Steering outcomes: when a steer, follow-up or inject message is settled, and how.

Nobody publishes outcomes. Every side works them out from the same channel entries, so every
client agrees. ``OutcomeBook`` does that for one session, fed the entries in serial order:

* ``track`` a steer, follow-up or inject message when it arrives: it is pending;
* ``saw`` the ``seen`` list of a reply of its Run: it is consumed;
* ``run_status`` at a suspend or an end of the Run: it resolves;
* ``refuse`` when an input check refused it: it resolves at once.

``ended_before_stored()`` gives the outcome of a message the relay refused to store because its
Run had ended.

Each message resolves exactly once. Each method returns the records it resolved, in tracking
order, so the caller reports each one once. ``outcome(message_id)`` is ``None`` while a message
is pending or unknown.

See docs/explanation/steering-outcomes.md for the rules in full.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._run_state import end_reason
from .errors import RUN_NOT_ACTIVE
from .frames import RunEndReason

__all__ = ["OutcomeBook", "OutcomeRecord", "ended_before_stored"]


@dataclass(frozen=True)
class OutcomeRecord:
    """How a steering message settled.

    ``consumed``: the agent saw the message before it sent a response.
    ``run_terminal_reason``: how the Run ended, ``None`` when the message
    resolved at a suspend (the Run had not ended). ``refused``: the error
    object (``code``, ``message``, ``details``) of the input check that
    refused the message, ``None`` otherwise.
    """

    message_id: str
    run_id: str
    consumed: bool
    run_terminal_reason: RunEndReason | None = None
    refused: dict[str, Any] | None = None


def ended_before_stored(
    message_id: str, run_id: str, code: str, details: Mapping[str, Any]
) -> OutcomeRecord | None:
    """The outcome of a queued message the relay refused because its Run had ended.

    ``code`` and ``details`` are the relay's error. ``None`` unless it is
    ``RUN_NOT_ACTIVE`` for this Run with a terminal ``details.status``.
    """
    if code != RUN_NOT_ACTIVE or details.get("run_id") != run_id:
        return None
    status = details.get("status")
    reason = end_reason(status) if isinstance(status, str) else None
    if reason is None:
        return None
    return OutcomeRecord(
        message_id=message_id, run_id=run_id, consumed=False, run_terminal_reason=reason
    )


class OutcomeBook:
    """Pending and resolved steering outcomes of one session (fed in serial order)."""

    def __init__(self) -> None:
        self._run_of: dict[str, str] = {}
        self._pending: dict[str, dict[str, None]] = {}
        self._seen: dict[str, set[str]] = {}
        self._ended: dict[str, RunEndReason] = {}
        self._resolved: dict[str, OutcomeRecord] = {}

    def track(self, message_id: str, run_id: str) -> list[OutcomeRecord]:
        """Start tracking a message aimed at ``run_id``; returns it if it resolved at once.

        A message id already tracked is ignored (returns ``[]``).
        """
        if message_id in self._run_of:
            return []
        self._run_of[message_id] = run_id
        reason = self._ended.get(run_id)
        if reason is not None:
            return [self._resolve(message_id, run_id, reason)]
        self._pending.setdefault(run_id, {})[message_id] = None
        return []

    def saw(self, run_id: str, message_ids: Iterable[str]) -> None:
        """Record that a response of ``run_id`` had seen ``message_ids`` (they are consumed)."""
        self._seen.setdefault(run_id, set()).update(message_ids)

    def run_status(self, run_id: str, status: str) -> list[OutcomeRecord]:
        """Apply a Run lifecycle status; returns the records it resolved, in tracking order."""
        if run_id in self._ended:
            return []
        reason = end_reason(status)
        if reason is not None:
            self._ended[run_id] = reason
            pending = self._pending.pop(run_id, {})
            return [self._resolve(mid, run_id, reason) for mid in pending]
        if status != "suspended":
            return []
        pending = self._pending.get(run_id, {})
        seen = self._seen.get(run_id, set())
        done = [mid for mid in pending if mid in seen]
        for mid in done:
            del pending[mid]
        return [self._resolve(mid, run_id, None) for mid in done]

    def refuse(self, message_id: str, run_id: str, error: dict[str, Any]) -> list[OutcomeRecord]:
        """An input check refused ``message_id``; returns its record (``[]`` if it had resolved)."""
        if message_id in self._resolved:
            return []
        self._run_of.setdefault(message_id, run_id)
        self._pending.get(run_id, {}).pop(message_id, None)
        record = OutcomeRecord(
            message_id=message_id,
            run_id=run_id,
            consumed=False,
            run_terminal_reason=None,
            refused=dict(error),
        )
        self._resolved[message_id] = record
        return [record]

    def refused(self, message_id: str) -> bool:
        """True once an input check refused the message."""
        record = self._resolved.get(message_id)
        return record is not None and record.refused is not None

    def outcome(self, message_id: str) -> OutcomeRecord | None:
        """The resolved outcome of a message; ``None`` while pending or unknown."""
        return self._resolved.get(message_id)

    def pending(self, run_id: str) -> list[str]:
        """Ids of the Run's messages not resolved yet, in tracking order."""
        return list(self._pending.get(run_id, ()))

    def consumed(self, message_id: str) -> bool:
        """True once a response of the message's Run has seen it (resolved or not)."""
        run_id = self._run_of.get(message_id)
        return run_id is not None and message_id in self._seen.get(run_id, ())

    def resolved(self) -> list[OutcomeRecord]:
        """Every resolved outcome, in the order they resolved."""
        return list(self._resolved.values())

    def _resolve(self, message_id: str, run_id: str, reason: RunEndReason | None) -> OutcomeRecord:
        record = OutcomeRecord(
            message_id=message_id,
            run_id=run_id,
            consumed=message_id in self._seen.get(run_id, ()),
            run_terminal_reason=reason,
        )
        self._resolved[message_id] = record
        return record
