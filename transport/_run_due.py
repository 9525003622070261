"""What the relay still has to publish in a session after a change (no I/O).

``due`` lists the entries the relay publishes for the Run rules: the cancels
of an interrupt, the ends of cancelled Runs no agent started, the resumes of
settled pauses and the turn of the next queued Run. Their ids are fixed by
what they are for, so however many relay nodes publish one, it is stored once.
docs/explanation/run-rules.md tells when each is due.
"""

from __future__ import annotations

from typing import Literal

from ._run_book import RunBook
from ._run_state import INTERRUPTING, relay_entry_id
from ._run_status import resume_id
from .frames import CancelEntry, EntryBody, RunEntry
from .policy import RELAY, Sender

__all__ = ["due"]


def due(book: RunBook) -> list[tuple[EntryBody, Sender]]:
    """What the relay still has to publish in the session now, with the identity to use.

    In order, first ``run: cancelled`` for each pending Run no agent started
    whose cancel stands. Then, for each queued interrupting Run, a ``cancel``
    for each Run it interrupts that is running, or ``run: cancelled`` for one no
    agent started. That ``cancel`` carries the interrupting sender's identity
    and ``interrupted_by``. Then ``run: cancelled`` for each queued Run whose
    sender cancelled it, and ``run: pending`` for each suspended Run whose
    questions are settled (its resume). Last, ``run: pending`` for the queued
    Run whose turn came. Publishing
    them goes through ``plan`` like any entry, which refuses what is stale.
    """
    out: list[tuple[EntryBody, Sender]] = []
    for record in book.ordered(book.runs.values()):
        if record.unstarted and record.cancel_requested:
            out.append((_status(record.run_id, "cancelled"), RELAY))
    for record in book.queued():
        if record.cancel_requested:
            out.append((_status(record.run_id, "cancelled"), RELAY))
            continue
        if record.multitask not in INTERRUPTING:
            continue
        asker = Sender(
            client_id=record.client_id or RELAY.client_id,
            user_id=record.user_id,
            role="relay",
        )
        for target_id in record.interrupts:
            target = book.runs.get(target_id)
            if (
                target is None
                or not (target.going_on or target.resume_owed)
                or target.interrupted_by is not None
            ):
                continue
            if target.status == "pending":
                out.append((_status(target_id, "cancelled"), asker))
            elif not target.cancel_requested:
                cancel = CancelEntry(
                    id=relay_entry_id(record.run_id, "interrupt", target_id),
                    run_id=target_id,
                    reason="interrupted by a newer Run",
                    interrupted_by=record.run_id,
                )
                out.append((cancel, asker))
    for record in book.resumable():
        assert record.pause is not None
        entry = RunEntry(
            id=resume_id(record.run_id, record.pause.round),
            run_id=record.run_id,
            status="pending",
        )
        out.append((entry, RELAY))
    turn = book.promotable()
    if turn is not None:
        out.append((_status(turn.run_id, "pending"), RELAY))
    return out


def _status(run_id: str, status: Literal["pending", "cancelled"]) -> RunEntry:
    return RunEntry(id=relay_entry_id(run_id, status), run_id=run_id, status=status)
