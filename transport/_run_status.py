"""The Run rules for ``run`` entries: a Run's moves from one status to the next (no I/O).

``plan_status`` checks a move against ``TRANSITIONS``, the sender's role and
the Run's owner, and the relay's slots. The relay alone puts a Run back to
``pending`` when its agent went away (``release``), and ends only Runs no agent
started. docs/explanation/run-rules.md tells the rules and their reasons.
"""

from __future__ import annotations

from dataclasses import replace

from ._rights import check_owner, check_right
from ._run_book import RunBook
from ._run_record import (
    RunRecord,
    deadline_at,
    effective_timeout,
    timed_out,
)
from ._run_state import TRANSITIONS, ended_error, relay_entry_id
from .errors import RUN_NOT_ACTIVE, UNAUTHORIZED, VALIDATION_ERROR, RunwireError
from .frames import RunEntry
from .interrupts import PauseRecord
from .policy import Sender

__all__ = ["is_resume", "plan_status", "release", "resume_id", "taken_up"]


def plan_status(book: RunBook, entry: RunEntry, sender: Sender, now_ms: int) -> list[RunRecord]:
    """The record once the Run moves to ``entry.status``, if the move is allowed."""
    record = book.require(entry.run_id)
    check_right(entry, sender, "change a Run's status")
    if entry.status == "pending" and record.status in ("active", "suspended"):
        if is_resume(entry, record) and not record.resume_owed:
            # Worked out while the Run waited; its owner went on (or it paused anew).
            raise RunwireError(
                RUN_NOT_ACTIVE,
                f"run {record.run_id!r} is not owed this resume any more",
                details={"run_id": record.run_id, "status": record.status},
            )
        released = release(record, sender, now_ms)
        if record.status == "suspended":
            _take_slot(book, record)
        return [released]
    if entry.status not in TRANSITIONS[record.status]:
        if record.terminal:
            raise ended_error(record.run_id, record.status)
        raise RunwireError(
            VALIDATION_ERROR,
            f"run {record.run_id!r} cannot go from {record.status} to {entry.status}",
            details={"run_id": record.run_id, "status": record.status},
        )
    if sender.role != "relay":
        if record.status == "queued":
            raise RunwireError(
                UNAUTHORIZED,
                f"run {record.run_id!r} is queued; only the relay moves it",
                details={"run_id": record.run_id},
            )
    elif entry.status == "pending":
        if book.promotable() is not record:
            raise RunwireError(
                VALIDATION_ERROR,
                f"run {record.run_id!r} is not next in line",
                details={"run_id": record.run_id},
            )
    elif entry.status == "cancelled" and not timed_out(record, entry, now_ms):
        _relay_may_end(book, record)
    check_owner(record, sender)
    if record.status == "suspended" and entry.status == "active":
        _take_slot(book, record)  # its owner resumes it itself
    owner = record.owner
    if sender.role == "agent" and owner is None:
        owner = sender.client_id
    timeout = record.timeout
    if entry.status == "active":
        timeout = effective_timeout(entry.timeout, book.policy.max_run_seconds)
    new = replace(
        record,
        status=entry.status,
        owner=owner,
        error=entry.error.model_dump() if entry.error else None,
        durable=record.durable or bool(entry.status == "active" and entry.durable),
        pause=taken_up(record, entry.status),
        updated_ts=now_ms,
        timeout=timeout,
        deadline_ms=deadline_at(entry.status, timeout, now_ms),
    )
    if entry.status == "pending":
        book.hold_slot(record.run_id)
    return [new]


def _take_slot(book: RunBook, record: RunRecord) -> None:
    """A suspended Run that runs again takes a slot. One must be free, and the session's
    resumes take the free ones oldest first (``due()`` lists them in that order), except
    those whose cancel stands: they run (to end) whatever the slots."""
    if book.slots is None:
        return
    if record.resume_owed:
        ok = record in book.resumable()
    else:
        ok = book.slot_left()
    if not ok:
        raise RunwireError(
            VALIDATION_ERROR,
            f"no slot of max_concurrent_runs is free for run {record.run_id!r}; it stays "
            "suspended until one frees",
            details={"run_id": record.run_id, "status": record.status},
        )
    book.hold_slot(record.run_id)


def release(record: RunRecord, sender: Sender, now_ms: int) -> RunRecord:
    """The relay puts a Run whose agent went away back to ``pending`` for another worker."""
    if sender.role != "relay":
        raise RunwireError(UNAUTHORIZED, "only the relay hands a Run back to pending")
    if record.status not in ("active", "suspended"):
        raise RunwireError(
            RUN_NOT_ACTIVE if record.terminal else VALIDATION_ERROR,
            f"run {record.run_id!r} cannot go from {record.status} to pending",
            details={"run_id": record.run_id, "status": record.status},
        )
    return passed_on(record, now_ms)


def passed_on(record: RunRecord, now_ms: int) -> RunRecord:
    """``record`` back to ``pending`` for another worker: no owner, one more adoption."""
    return replace(
        record,
        status="pending",
        owner=None,
        adoptions=record.adoptions + 1,
        pause=record.pause.settle(due=False) if record.pause is not None else None,
        updated_ts=now_ms,
        deadline_ms=None,
    )


def _relay_may_end(book: RunBook, record: RunRecord) -> None:
    """The relay ends only Runs no agent started, and only while that is due: a queued
    Run whose cancel stands, a pending one never started whose cancel stands, or a
    pending one that a waiting ``interrupt`` names."""
    if record.status not in ("queued", "pending"):
        # A started one gets a cancel entry instead, unless its deadline passed.
        raise RunwireError(
            VALIDATION_ERROR,
            f"run {record.run_id!r} has started; the relay cancels it with a cancel entry",
            details={"run_id": record.run_id, "status": record.status},
        )
    if record.status == "queued" and not record.cancel_requested:
        raise RunwireError(
            VALIDATION_ERROR,
            f"run {record.run_id!r} waits its turn and nobody cancelled it",
            details={"run_id": record.run_id, "status": record.status},
        )
    if record.unstarted and record.cancel_requested:
        return
    if record.status == "pending" and not any(
        r.status == "queued" and not r.cancel_requested and record.run_id in r.interrupts
        for r in book.runs.values()
    ):
        raise RunwireError(
            RUN_NOT_ACTIVE,
            f"no waiting interrupt names run {record.run_id!r} any more",
            details={"run_id": record.run_id, "status": record.status},
        )


def resume_id(run_id: str, round_: int) -> str:
    """The id of the relay's resume of a Run's pause ``round_`` (see ``due()``)."""
    return relay_entry_id(run_id, "resume", str(round_))


def is_resume(entry: RunEntry, record: RunRecord) -> bool:
    """True if ``entry`` is a resume ``due()`` worked out for one of the Run's pauses."""
    rounds = record.pause.round if record.pause is not None else 0
    return any(entry.id == resume_id(record.run_id, n) for n in range(rounds + 1))


def taken_up(record: RunRecord, status: str) -> PauseRecord | None:
    """The pause once ``record`` goes to ``status``. Its agent resuming a suspended Run
    itself takes up the settled pause, so the relay no longer has a resume to make."""
    if record.pause is None or status != "active" or record.status != "suspended":
        return record.pause
    return record.pause.settle(due=False)
