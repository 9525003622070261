"""The Run rules for prompts, cancels and answers: what each changes (no I/O).

``plan_prompt`` applies the prompt's multitask strategy, ``plan_cancel`` marks
a Run's cancel, and ``plan_interrupt`` records a pause or its answers. Each
reads a ``RunBook`` and returns the records it would change, without applying
them. docs/explanation/run-rules.md tells the rules and their reasons.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from ._interrupts import PauseRecord, check_answer
from ._policy import Sender
from ._rights import check_owner, check_right, need_cancel
from ._run_book import RunBook
from ._run_record import RunRecord
from ._run_state import INTERRUPTING, WAITING
from .errors import (
    DUPLICATE_RUN,
    RUN_NOT_ACTIVE,
    THREAD_ACCESS_DENIED,
    THREAD_BUSY,
    VALIDATION_ERROR,
    RunwireError,
)
from .frames import CancelEntry, InterruptEntry, MessageEntry, Multitask

__all__ = ["applied_prompt", "plan_cancel", "plan_interrupt", "plan_prompt"]


def plan_prompt(book: RunBook, entry: MessageEntry, sender: Sender, now_ms: int) -> list[RunRecord]:
    """The new Run a prompt creates, and the paused Runs it moves on."""
    check_right(entry, sender)
    if entry.run_id in book.runs:
        raise RunwireError(
            DUPLICATE_RUN,
            f"run {entry.run_id!r} already exists",
            details={"run_id": entry.run_id},
        )
    parent = book.runs.get(entry.parent_run_id) if entry.parent_run_id else None
    child = parent is not None and parent.going_on
    off_thread = entry.activate is False
    strategy: Multitask = (
        "alongside" if child or off_thread else entry.multitask or book.policy.multitask
    )
    moved_on = _moved_on_runs(book, now_ms)
    after = {**book.runs, **{r.run_id: r for r in moved_on}}
    owed = [r for r in after.values() if r.resume_owed]
    # A suspended Run waiting for its resume (this prompt's own move on included) is about
    # to run again: every strategy treats it as a running Run.
    going = book.ordered(r for r in [*book.going_on(), *owed] if not r.off_thread)
    if strategy != "alongside":
        others = [r.run_id for r in going if r.user_id != sender.user_id]
        if others and book.thread_access(entry) != "shared":
            raise RunwireError(
                THREAD_ACCESS_DENIED,
                "another user's Run is going on in this session, which is not shared",
                details={"run_ids": others, "multitask": strategy},
            )
    if strategy == "reject" and going:
        raise RunwireError(
            THREAD_BUSY,
            "a Run is going on in this session",
            details={"run_ids": [r.run_id for r in going]},
        )
    interrupts: list[str] = []
    if strategy in INTERRUPTING:
        for record in going:
            need_cancel(sender, record)
        interrupts = [r.run_id for r in going]
    if strategy in WAITING:
        queued = bool(going) or (strategy == "enqueue" and bool(book.queued()))
    else:
        queued = False
    if not queued and not child and not book.slot_left(len(owed)):
        # No slot is free, or the resumes (this prompt's move on included) take the
        # free ones first.
        queued = True
    record = _new_record(
        book,
        entry,
        status="queued" if queued else "pending",
        strategy=strategy,
        interrupts=interrupts,
        sender=sender,
        now_ms=now_ms,
    )
    if not queued:
        book.hold_slot(entry.run_id)
    return [record, *moved_on]


def applied_prompt(book: RunBook, entry: MessageEntry) -> list[RunRecord]:
    """The records a stored prompt changes, as its stamps say: its Run, queued or not,
    with the strategy and the interrupts the publishing node decided, and the paused
    Runs it moves on. Nothing is checked again; a Run the session has is left as it is."""
    if entry.run_id in book.runs:
        return []
    now_ms = entry.ts or 0
    parent = book.runs.get(entry.parent_run_id) if entry.parent_run_id else None
    child = parent is not None and parent.going_on
    strategy: Multitask = entry.multitask or (
        "alongside" if child or entry.activate is False else book.policy.multitask
    )
    sender = Sender(client_id=entry.client_id or "", user_id=entry.user_id)
    record = _new_record(
        book,
        entry,
        status="queued" if entry.queued else "pending",
        strategy=strategy,
        interrupts=list(entry.interrupts or []),
        sender=sender,
        now_ms=now_ms,
    )
    return [record, *_moved_on_runs(book, now_ms)]


def _new_record(
    book: RunBook,
    entry: MessageEntry,
    *,
    status: Literal["queued", "pending"],
    strategy: Multitask,
    interrupts: list[str],
    sender: Sender,
    now_ms: int,
) -> RunRecord:
    return RunRecord(
        session_id=book.session_id,
        run_id=entry.run_id,
        agent=entry.agent or "default",
        status=status,
        prompt_id=entry.message.id,
        user_id=sender.user_id,
        client_id=sender.client_id,
        created_ts=now_ms,
        updated_ts=now_ms,
        seq=max((r.seq for r in book.runs.values()), default=0) + 1,
        multitask=strategy,
        parent_run_id=entry.parent_run_id,
        thread_access=entry.thread_access,
        interrupts=interrupts,
        off_thread=entry.activate is False,
    )


def _moved_on_runs(book: RunBook, now_ms: int) -> list[RunRecord]:
    """A prompt moves on every Run that waits on questions."""
    return [
        replace(r, pause=_moved_on(r.pause), updated_ts=now_ms)
        for r in book.ordered(book.runs.values())
        if not r.terminal and r.waiting()
    ]


def _moved_on(pause: PauseRecord | None) -> PauseRecord:
    return (pause or PauseRecord()).settle(moved_on=True, due=True)


def plan_cancel(book: RunBook, entry: CancelEntry, sender: Sender, now_ms: int) -> list[RunRecord]:
    """A cancel marks the Run's cancel; on a Run waiting on people it declines the pause."""
    record = book.live(entry.run_id)
    if sender.role == "relay" and entry.interrupted_by:
        _still_interrupting(book, record, entry.interrupted_by)
    need_cancel(sender, record)
    new = record
    if not record.cancel_requested:
        new = replace(new, cancel_requested=True)
    if sender.role == "relay" and entry.interrupted_by and record.interrupted_by is None:
        new = replace(new, interrupted_by=entry.interrupted_by)
    if record.status == "suspended" and record.waiting():
        # Nobody runs a Run that waits on people: end the pause so a worker applies the cancel.
        reason = entry.reason or "the Run was cancelled"
        pause = (new.pause or PauseRecord()).settle(declined={"reason": reason}, due=True)
        new = replace(new, pause=pause)
    if new == record:
        return []
    return [replace(new, updated_ts=now_ms)]


def _still_interrupting(book: RunBook, target: RunRecord, interrupting_id: str) -> None:
    """An interrupt's cancel is still to publish only while its Run waits, uncancelled.

    ``due()`` works it out. Another device may cancel the interrupting prompt
    before the relay's cancel is stored: that cancel is stale.
    """
    interrupting = book.runs.get(interrupting_id)
    if (
        interrupting is None
        or interrupting.status != "queued"
        or interrupting.cancel_requested
        or target.run_id not in interrupting.interrupts
    ):
        raise RunwireError(
            RUN_NOT_ACTIVE,
            f"run {interrupting_id!r} no longer interrupts run {target.run_id!r}",
            details={
                "run_id": target.run_id,
                "interrupted_by": interrupting_id,
                "status": interrupting.status if interrupting else None,
            },
        )


def plan_interrupt(
    book: RunBook, entry: InterruptEntry, sender: Sender, now_ms: int
) -> list[RunRecord]:
    """A pause becomes the record's ``pause``; answers and a decline settle it."""
    record = book.live(entry.run_id)
    old = record.pause or PauseRecord()
    if entry.status == "paused":
        check_right(entry, sender, "pause Runs")
        check_owner(record, sender)
        if record.status != "active" or not entry.interrupts:
            raise RunwireError(
                VALIDATION_ERROR,
                f"run {record.run_id!r} pauses on questions only while active",
                details={"run_id": record.run_id, "status": record.status},
            )
        pause = PauseRecord(
            round=old.round + 1,
            interrupts=[q.model_dump(mode="json") for q in entry.interrupts],
            answers=dict(old.answers),
            expired=list(old.expired),
            step=entry.checkpoint,
        )
        return [replace(record, pause=pause, updated_ts=now_ms)]
    check_right(entry, sender)
    if not record.waiting():
        raise RunwireError(
            VALIDATION_ERROR,
            f"run {record.run_id!r} waits on no questions",
            details={"run_id": record.run_id},
        )
    if entry.status == "declined":
        pause = old.settle(declined={"reason": entry.reason}, due=True)
        return [replace(record, pause=pause, updated_ts=now_ms)]
    answers: dict[str, Any] = dict(old.answers)
    for interrupt_id, answer in (entry.responses or {}).items():
        check_answer(old, interrupt_id, answer, now_ms)
        answers[interrupt_id] = answer
    answered = old.settle(answers=answers)
    left = answered.waiting()
    if all(q.get("expires_at") is not None and now_ms > q["expires_at"] for q in left):
        answered = answered.settle(expired=[*old.expired, *(q["id"] for q in left)], due=True)
    elif not entry.responses:
        raise RunwireError(
            VALIDATION_ERROR,
            "a resume without answers needs every question it leaves out to have expired",
            details={"run_id": record.run_id},
        )
    return [replace(record, pause=answered, updated_ts=now_ms)]
