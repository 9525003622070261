"""The Run rules: whether a publish is allowed, and how it changes a session's Runs (no I/O).

A Run is created by the prompt that names it. It is ``pending`` until its agent
starts it, or ``queued`` while its multitask strategy makes it wait. A started
Run is ``active``, may be ``suspended`` and ``active`` again, and ends
``complete``, ``cancelled`` or ``error``.

``RunRegistry`` holds the records of one session. The relay runs ``plan`` on
every entry before storing anything, and a store writes the changed records
in the same transaction as the entry. ``replay`` takes in entries the channel
already holds, so every relay node holds the same records. ``due`` lists what
the relay still has to publish after a change.

Every rule lives in ``transport``, so a relay node that replays a session's
records decides exactly as the node that wrote them. The rules and their
reasons are in docs/explanation/run-rules.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from ._policy import (
    AGENT,
    CANCEL,
    CANCEL_ANY,
    CAPABILITIES,
    PUBLISH,
    RELAY,
    STEER,
    SUBSCRIBE,
    Policy,
    Sender,
    SlotBook,
)
from ._rights import (
    check_not_passed_on,
    check_owner,
    check_right,
    check_started,
    rights_refusal,
)
from ._run_book import RunBook
from ._run_due import due
from ._run_plans import applied_prompt, plan_cancel, plan_interrupt, plan_prompt
from ._run_record import RunRecord, deadline_at, effective_timeout, timeout_entry
from ._run_state import (
    GOING_ON,
    MULTITASK_STRATEGIES,
    TERMINAL,
    TRANSITIONS,
    end_reason,
    ended_error,
    relay_entry_id,
    run_ended,
)
from ._run_status import passed_on, plan_status, taken_up
from .errors import UNAUTHORIZED, VALIDATION_ERROR, RunwireError
from .frames import (
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    EntryBody,
    Interrupt,
    InterruptEntry,
    MessageEntry,
    RefusedEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
)

__all__ = [
    "AGENT",
    "CANCEL",
    "CANCEL_ANY",
    "CAPABILITIES",
    "GOING_ON",
    "MULTITASK_STRATEGIES",
    "PUBLISH",
    "STEER",
    "SUBSCRIBE",
    "TERMINAL",
    "TRANSITIONS",
    "Policy",
    "RunRecord",
    "RunRegistry",
    "Sender",
    "SlotBook",
    "effective_timeout",
    "end_reason",
    "ended_error",
    "relay_entry_id",
    "rights_refusal",
    "run_ended",
    "timeout_entry",
]


class RunRegistry(RunBook):
    """The Runs of one session and the publish rules over them."""

    __slots__ = ()

    def plan(self, entry: EntryBody, sender: Sender, now_ms: int) -> list[RunRecord]:
        """Check ``entry`` against the rules; return the records it changes (not applied).

        Raises ``RunwireError`` when the entry is not allowed. A prompt that
        starts a Run at once holds a slot of the ``SlotBook`` until ``apply``
        or ``abandon`` settles it.
        """
        if isinstance(entry, MessageEntry):
            if sender.role == "client" and entry.message.role != "user":
                # A system or assistant message from a client would reach the model as the
                # app's instructions or the agent's own words: only agents write those.
                raise RunwireError(
                    UNAUTHORIZED,
                    f"a client's message must have role 'user', not {entry.message.role!r}",
                    details={"role": entry.message.role},
                )
            if entry.intent == "prompt":
                return plan_prompt(self, entry, sender, now_ms)
            check_right(entry, sender)
            self.live(entry.run_id)
            return []
        if isinstance(entry, CancelEntry):
            return plan_cancel(self, entry, sender, now_ms)
        if isinstance(entry, CancelDenied):
            record = self.live(entry.run_id)
            check_right(entry, sender, "refuse cancels")
            check_not_passed_on(record, sender)
            check_started(record, sender, "refuse its cancels")
            check_owner(record, sender)
            if not record.cancel_requested:
                return []
            return [replace(record, cancel_requested=False, updated_ts=now_ms)]
        if isinstance(entry, RunEntry):
            return plan_status(self, entry, sender, now_ms)
        if isinstance(entry, ResponseOpen | ResponseAppend | ResponseClose):
            record = self.live(entry.run_id)
            check_right(entry, sender, "stream responses")
            if record.status == "queued":
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run {record.run_id!r} is queued; it has not started",
                    details={"run_id": record.run_id, "status": record.status},
                )
            check_not_passed_on(record, sender)
            check_owner(record, sender)
            return []
        if isinstance(entry, InterruptEntry):
            return plan_interrupt(self, entry, sender, now_ms)
        if isinstance(entry, RefusedEntry | CheckpointEntry):
            record = self.live(entry.run_id)
            check_right(entry, sender)
            check_owner(record, sender)
            if isinstance(entry, RefusedEntry):
                return []
            check_not_passed_on(record, sender)
            check_started(record, sender, "checkpoint it")
            checkpoint = entry.model_dump(
                include={"step", "turn", "iterations", "seen", "state"}, mode="json"
            )
            return [replace(record, checkpoint=checkpoint, updated_ts=now_ms)]
        raise RunwireError(VALIDATION_ERROR, "unknown entry kind")  # pragma: no cover

    def stamp(
        self, entry: EntryBody, sender: Sender, now_ms: int, changes: list[RunRecord]
    ) -> EntryBody:
        """The entry as the channel stores it: the sender's identity, the time, and what
        the relay decided (for a prompt: strategy in effect, ``queued``, ``interrupts``).

        Whatever the publisher put in these fields is overwritten.
        """
        update: dict[str, Any] = {
            "serial": None,
            "ts": now_ms,
            "user_id": sender.user_id,
            "client_id": sender.client_id,
        }
        if isinstance(entry, MessageEntry):
            record = next((r for r in changes if r.run_id == entry.run_id), None)
            if entry.intent == "prompt" and record is not None:
                update["multitask"] = record.multitask
                update["queued"] = True if record.status == "queued" else None
                update["interrupts"] = list(record.interrupts) or None
            else:
                update.update(multitask=None, queued=None, interrupts=None)
        elif isinstance(entry, CancelEntry) and sender.role != "relay":
            update["interrupted_by"] = None
        elif isinstance(entry, RunEntry):
            record = next((r for r in changes if r.run_id == entry.run_id), None)
            active = entry.status == "active" and record is not None
            update["timeout"] = record.timeout if active and record is not None else None
        elif isinstance(entry, InterruptEntry) and entry.status != "paused":
            record = next((r for r in changes if r.run_id == entry.run_id), None)
            pause = record.pause if record is not None else None
            answers: dict[str, Any] = pause.answers if pause is not None else {}
            update["interrupts"] = [
                Interrupt.model_validate({**q, "response": answers.get(q["id"])})
                for q in (pause.interrupts if pause is not None else [])
                if entry.status == "declined" or q["id"] in (entry.responses or {})
            ]
            update["checkpoint"] = None
        return entry.model_copy(update=update)

    def replay(self, entry: EntryBody) -> list[RunRecord]:
        """Take in an entry the channel already holds; returns (and applies) what it changed.

        Every relay node replays every entry of a session in serial order, so
        all hold the same records. The entry passed the rules when it was
        published, so replay applies what was decided then. A status change is
        applied as it stands, and a prompt makes its Run as its stamps say:
        queued or not, its strategy and its interrupts. Nodes may differ in
        free slots, so neither is planned again. Rights are never checked
        again. A cancel, a pause, an answer or a checkpoint applies only while
        the Run's state allows it. An entry that no longer applies returns ``[]``.
        """
        ts = entry.ts or 0
        client_id = entry.client_id or ""
        if isinstance(entry, RunEntry):
            record = self.runs.get(entry.run_id)
            if record is None or record.terminal or record.status == entry.status:
                return []
            base = record
            if entry.status == "pending" and record.status in ("active", "suspended"):
                # The relay passed a Run whose agent went away to another worker.
                base = passed_on(record, ts)
                pause = base.pause
            else:
                pause = taken_up(record, entry.status)
            owner = base.owner
            if (
                owner is None
                and client_id != RELAY.client_id
                and entry.status != "pending"
                and not _ends_for_interrupt(self, record, entry)
            ):
                # An agent's first move makes it the owner; the relay's never does.
                owner = client_id
            timeout = entry.timeout if entry.status == "active" else record.timeout
            changes = [
                replace(
                    record,
                    status=entry.status,
                    owner=owner,
                    error=entry.error.model_dump() if entry.error else None,
                    durable=record.durable or bool(entry.status == "active" and entry.durable),
                    adoptions=base.adoptions,
                    pause=pause,
                    updated_ts=ts,
                    timeout=timeout,
                    deadline_ms=deadline_at(entry.status, timeout, ts),
                )
            ]
        elif isinstance(entry, MessageEntry):
            changes = applied_prompt(self, entry) if entry.intent == "prompt" else []
        elif isinstance(entry, ResponseOpen | ResponseAppend | ResponseClose | RefusedEntry):
            changes = []
        else:
            # Cancels, refused cancels, pauses, answers and checkpoints apply only while
            # the Run's state allows them: the rules decide that, with every right granted.
            role: Literal["client", "agent", "relay"] = "agent"
            if client_id == RELAY.client_id or (
                isinstance(entry, CancelEntry) and entry.interrupted_by
            ):
                role = "relay"
            elif isinstance(entry, CancelEntry) or (
                isinstance(entry, InterruptEntry) and entry.status != "paused"
            ):
                role = "client"
            sender = Sender(client_id=client_id, user_id=entry.user_id, role=role)
            try:
                changes = self.plan(entry, sender, ts)
            except RunwireError:
                return []
        self.apply(changes)
        return changes

    def due(self) -> list[tuple[EntryBody, Sender]]:
        """What the relay still has to publish in the session now (see ``_run_due.due``)."""
        return due(self)


def _ends_for_interrupt(book: RunBook, record: RunRecord, entry: RunEntry) -> bool:
    """True if ``entry`` is the relay's ``run: cancelled`` for a pending Run that a
    waiting interrupt names. ``due()`` publishes it under the interrupting sender's
    identity, so its stamps name a client, not the relay, and it makes no owner."""
    return (
        entry.status == "cancelled"
        and record.status == "pending"
        and any(
            r.status == "queued"
            and not r.cancel_requested
            and record.run_id in r.interrupts
            and r.client_id == entry.client_id
            and r.user_id == entry.user_id
            for r in book.runs.values()
        )
    )
