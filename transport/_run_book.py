"""The Run records of one session, and the questions the Run rules ask of them (no I/O).

``RunBook`` holds the records and the relay's slots. It answers which Runs are
running, queued or waiting for their resume, and whose turn has come. The rules
that change records (``transport.runs``) read it and write it back through
``apply``. docs/explanation/run-rules.md tells the rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ._run_record import RunRecord
from ._run_state import INTERRUPTING, WAITING, ended_error
from .errors import RUN_NOT_FOUND, RunwireError
from .frames import MessageEntry, ThreadAccess
from .policy import Policy, SlotBook

__all__ = ["RunBook"]


class RunBook:
    """The Runs of one session: their records, the relay's policy and its slots."""

    __slots__ = ("policy", "runs", "session_id", "slots")  # one per loaded session

    def __init__(
        self,
        session_id: str,
        records: list[RunRecord] | None = None,
        *,
        policy: Policy | None = None,
        slots: SlotBook | None = None,
    ) -> None:
        self.session_id = session_id
        self.policy = policy or Policy()
        self.slots = slots
        self.runs: dict[str, RunRecord] = {}
        self.reload(records or [])

    # --------------------------------------------------------------- reading

    def get(self, run_id: str) -> RunRecord | None:
        """The record of a Run, if the session has it."""
        return self.runs.get(run_id)

    def require(self, run_id: str) -> RunRecord:
        """The record of a Run; ``RUN_NOT_FOUND`` if the session has none."""
        record = self.runs.get(run_id)
        if record is None:
            raise RunwireError(
                RUN_NOT_FOUND, f"no run {run_id!r} in this session", details={"run_id": run_id}
            )
        return record

    def live(self, run_id: str) -> RunRecord:
        """The record of a Run that has not ended; ``RUN_NOT_ACTIVE`` once it has."""
        record = self.require(run_id)
        if record.terminal:
            raise ended_error(run_id, record.status)
        return record

    def active(self) -> list[RunRecord]:
        """Runs that have not ended."""
        return [r for r in self.runs.values() if not r.terminal]

    def going_on(self) -> list[RunRecord]:
        """Runs ``pending`` or ``active``, oldest first."""
        return self.ordered(r for r in self.runs.values() if r.going_on)

    def queued(self) -> list[RunRecord]:
        """Runs waiting their turn, oldest first."""
        return self.ordered(r for r in self.runs.values() if r.status == "queued")

    def ordered(self, records: Iterable[RunRecord]) -> list[RunRecord]:
        """``records`` in the order their Runs were created."""
        return sorted(records, key=lambda r: r.seq)

    def thread_access(self, entry: MessageEntry | None = None) -> ThreadAccess:
        """Whether the session is shared: its first Run's prompt decides, else the policy.

        ``entry`` is a prompt about to be the session's first.
        """
        if self.runs:
            first = min(self.runs.values(), key=lambda r: r.seq)
            return first.thread_access or self.policy.thread_access
        if entry is not None and entry.thread_access is not None:
            return entry.thread_access
        return self.policy.thread_access

    def promotable(self) -> RunRecord | None:
        """The queued Run whose turn has come, if any.

        Interrupting Runs go first, then the rest by age. An ``enqueue``,
        ``interrupt`` or ``rollback`` Run waits until no Run is running or
        waiting for its resume. Any queued Run waits for a free slot.
        """
        going = any((r.going_on or r.resume_owed) and not r.off_thread for r in self.runs.values())
        if not self.slot_left():
            return None
        waiting = sorted(
            (r for r in self.runs.values() if r.status == "queued" and not r.cancel_requested),
            key=lambda r: (r.multitask not in INTERRUPTING, r.seq),
        )
        for record in waiting:
            if record.multitask in WAITING and going:
                continue
            return record
        return None

    def resumes_owed(self) -> list[RunRecord]:
        """Suspended Runs whose every question is settled, oldest first.

        A suspended Run holds no slot, so its resume waits for a free one. The
        session's resumes take free slots before its queued Runs do. One whose
        cancel stands resumes at once, free slot or not: it runs only to end.
        """
        return self.ordered(r for r in self.runs.values() if r.resume_owed)

    def resumable(self) -> list[RunRecord]:
        """The resumes that go now, oldest first: every one whose cancel stands, then as
        many of the others as the free slots those leave allow."""
        owed = self.resumes_owed()
        free = self.slots.available() if self.slots is not None else None
        if free is None:
            return owed
        ending = [r for r in owed if r.cancel_requested]
        held = [r for r in owed if not r.cancel_requested]
        return self.ordered([*ending, *held[: max(0, free - len(ending))]])

    def slot_left(self, owed: int | None = None) -> bool:
        """True if a slot is free for a Run that was not running, once the session's
        resumes still to make took theirs. The argument counts those resumes; by
        default it is the number the records hold."""
        free = self.slots.available() if self.slots is not None else None
        if free is None:
            return True
        if owed is None:
            owed = len(self.resumes_owed())
        return free > owed

    def hold_slot(self, run_id: str) -> None:
        """Take a slot for one of the session's Runs (no limit: nothing to do)."""
        if self.slots is not None:
            self.slots.hold((self.session_id, run_id))

    # --------------------------------------------------------------- writing

    def apply(self, records: list[RunRecord]) -> None:
        """Make planned changes current (after the store wrote them)."""
        for record in records:
            self.runs[record.run_id] = record
        if self.slots is not None:
            self.slots.sync(records)

    def abandon(self, records: list[RunRecord]) -> None:
        """Planned changes that were not written: give back the slots they held."""
        if self.slots is None:
            return
        self.slots.sync(self.runs.get(r.run_id, replace(r, status="error")) for r in records)

    def reload(self, records: list[RunRecord]) -> None:
        """Replace every record (read back from the store after a failed write)."""
        self.runs = {r.run_id: r for r in records}
        if self.slots is not None:
            self.slots.replace_session(self.session_id, records)
