"""RunRegistry under random publishes: the docstring's promises hold after every step.

One registry takes random entries from two users' clients, two agents and the
relay (which publishes what ``due()`` says). Every accepted entry is stamped
and kept; a second registry replays them in order and must end with the same
records. ``RUNWIRE_STATEFUL_EXAMPLES`` raises the number of examples (the
default run is derandomized, so CI always checks the same cases).
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from transport._policy import CAPABILITIES, RELAY, Policy, Sender, SlotBook
from transport._runs import TERMINAL, RunRecord, RunRegistry
from transport.errors import RunwireError
from transport.frames import (
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    EntryBody,
    Interrupt,
    InterruptEntry,
    MessageEntry,
    ResponseAppend,
    RunEntry,
)
from transport.messages import user_message

ALICE = Sender(client_id="alice/phone", user_id="alice", caps=CAPABILITIES - {"agent"})
BOB = Sender(client_id="bob/web", user_id="bob", caps=CAPABILITIES - {"agent", "cancel-any"})
AGENT_1 = Sender(client_id="agent-1", user_id="svc", role="agent", caps=frozenset({"agent"}))
AGENT_2 = Sender(client_id="agent-2", user_id="svc", role="agent", caps=frozenset({"agent"}))
CLIENTS = [ALICE, BOB]
AGENTS = [AGENT_1, AGENT_2]
RUN_IDS = [f"r{i}" for i in range(6)]
SESSION = "s1"

EXAMPLES = int(os.environ.get("RUNWIRE_STATEFUL_EXAMPLES", "0"))


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.reg = RunRegistry(
            SESSION, policy=Policy(thread_access="shared"), slots=SlotBook(limit=2)
        )
        self.log: list[EntryBody] = []
        self.ids: set[str] = set()
        self.owed: list[tuple[EntryBody, Sender]] = []
        self.past_limit: set[str] = set()
        """Runs resumed to end (a cancel standing) while no slot was free, still going on."""
        self.now = 1000
        self.n = 0

    # ------------------------------------------------------------ helpers

    def _id(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n}"

    def publish(self, entry: EntryBody, sender: Sender) -> list[RunRecord] | None:
        """Plan, stamp and apply ``entry``; None when refused (records untouched) or when
        the channel already holds its id (the store acknowledges a duplicate, nothing more)."""
        self.now += 10
        if entry.id in self.ids:
            return None
        before = copy.deepcopy(self.reg.runs)
        held = set(self.reg.slots._held) if self.reg.slots else set()
        free = self.reg.slots is None or self.reg.slots.free()
        room = self.reg.slots.available() if self.reg.slots else None
        try:
            changes = self.reg.plan(entry, sender, self.now)
        except RunwireError:
            assert self.reg.runs == before, "a refusal changed the records"
            if self.reg.slots is not None:
                assert self.reg.slots._held == held, "a refusal kept a slot"
            return None
        old = {r.run_id: before.get(r.run_id) for r in changes}
        for record in changes:
            prev = old[record.run_id]
            if prev is not None and prev.terminal:
                assert record == prev, f"ended Run {record.run_id} changed"
            if sender.role == "agent" and prev is not None and prev.owner is not None:
                assert prev.owner == sender.client_id, "another agent moved an owned Run"
            if prev is not None and prev.owner is not None and record.owner is not None:
                assert record.owner == prev.owner, "a Run changed owner without a hand-over"
        target = before.get(getattr(entry, "run_id", ""))
        if isinstance(entry, MessageEntry) and entry.intent == "prompt":
            self._check_strategy(changes, before, room)
        started = [
            r
            for r in changes
            if r.going_on
            and (r.run_id not in before or before[r.run_id].status in ("queued", "suspended"))
        ]
        for record in started:
            child = record.parent_run_id is not None and record.multitask == "alongside"
            ending = record.run_id in before and _resumed_to_end(before[record.run_id])
            assert free or child or ending, (
                f"{record.run_id} started (or resumed) while no slot was free"
            )
            if ending and not free:
                self.past_limit.add(record.run_id)
        for record in (r for r in started if r.run_id in before):
            prev = before[record.run_id]
            if prev.status != "suspended" or _resumed_to_end(prev):
                continue  # a resume to end goes on whatever the slots
            # The owed resumes whose cancel stands, and the older other owed resumes, take
            # the free slots before this one.
            ahead = [
                r
                for r in before.values()
                if r.resume_owed
                and r.run_id != record.run_id
                and (r.cancel_requested or r.seq < record.seq)
            ]
            assert room is None or len(ahead) < room, "a resume took the slot of one owed first"

        if isinstance(entry, RunEntry) and target is not None and target.status == "queued":
            assert sender.role == "relay", "only the relay moves a queued Run"
        if isinstance(entry, RunEntry) and sender.role == "client":
            raise AssertionError("a client changed a Run's status")
        handed_over = target is not None and target.status == "pending" and target.adoptions > 0
        if handed_over and sender.role == "agent":
            assert not isinstance(entry, ResponseAppend | CheckpointEntry | CancelDenied), (
                "an agent wrote into a handed-over Run before a worker started it"
            )
        if sender.role == "agent" and isinstance(entry, CancelDenied | CheckpointEntry):
            assert target is not None and target.owner == sender.client_id, (
                "an agent refused the cancels of (or checkpointed) a Run it had not started"
            )
        stamped = self.reg.stamp(entry, sender, self.now, changes)
        self.reg.apply(changes)
        self.past_limit -= {r.run_id for r in changes if not r.going_on}
        self.log.append(stamped)
        self.ids.add(stamped.id)
        return changes

    def _check_strategy(
        self, changes: list[RunRecord], before: dict[str, RunRecord], room: int | None
    ) -> None:
        """What the module docstring says each strategy does with a new prompt."""
        record, *moved_on = changes
        after = {**before, **{r.run_id: r for r in moved_on}}
        # A slot is free for the new Run once the owed resumes (its move on included) took
        # theirs: they started first.
        free = room is None or room > sum(1 for r in after.values() if r.resume_owed)
        child = record.parent_run_id is not None and record.multitask == "alongside"
        if record.multitask in ("alongside", "reject") and not child:
            assert record.status == ("pending" if free else "queued")
        # A Run owed its resume (this prompt's move on included) goes on, for every strategy.
        busy = sorted(
            (r for r in after.values() if r.going_on or r.resume_owed), key=lambda r: r.seq
        )
        if record.multitask == "reject":
            assert not busy, "a reject prompt started while a Run goes on (or is owed its resume)"
        if record.multitask in ("interrupt", "rollback"):
            assert record.interrupts == [r.run_id for r in busy]
            assert record.status == ("queued" if busy or not free else "pending")
        if record.multitask == "enqueue":
            waits = any(r.status == "queued" for r in before.values())
            assert record.status == ("queued" if busy or waits or not free else "pending")

    def _run(self, data: st.DataObject, *statuses: str) -> str:
        """Mostly a Run that has not ended (of ``statuses``, if given), sometimes any id
        (refusals are checked too)."""
        live = sorted(
            r.run_id
            for r in self.reg.runs.values()
            if not r.terminal and (not statuses or r.status in statuses)
        )
        if live and data.draw(st.integers(0, 9)) < 8:
            return data.draw(st.sampled_from(live))
        return data.draw(st.sampled_from(RUN_IDS))

    def _agent(self, data: st.DataObject, run_id: str) -> Sender:
        """Mostly the Run's owner, sometimes the other agent."""
        record = self.reg.get(run_id)
        if record is not None and record.owner and data.draw(st.integers(0, 9)) < 8:
            return AGENT_1 if record.owner == AGENT_1.client_id else AGENT_2
        return data.draw(st.sampled_from(AGENTS))

    # -------------------------------------------------------------- rules

    @rule(
        data=st.data(),
        sender=st.sampled_from(CLIENTS),
        multitask=st.sampled_from(
            [None, "alongside", "reject", "enqueue", "interrupt", "rollback"]
        ),
        child=st.booleans(),
    )
    def prompt(self, data: st.DataObject, sender: Sender, multitask: Any, child: bool) -> None:
        fresh = f"r{len(self.reg.runs)}"
        run_id = fresh if data.draw(st.integers(0, 9)) < 8 else self._run(data)
        parent = self._run(data) if child else None
        entry = MessageEntry(
            id=self._id("p"),
            run_id=run_id,
            intent="prompt",
            message=user_message("hi", id=self._id("m")),
            multitask=multitask,
            parent_run_id=parent,
        )
        self.publish(entry, sender)

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data(), sender=st.sampled_from(CLIENTS))
    def steer(self, data: st.DataObject, sender: Sender) -> None:
        entry = MessageEntry(
            id=self._id("s"), run_id=self._run(data), intent="steer", message=user_message("more")
        )
        self.publish(entry, sender)

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data(), sender=st.sampled_from(CLIENTS))
    def cancel(self, data: st.DataObject, sender: Sender) -> None:
        run_id = self._run(data, "queued", "pending", "active", "suspended")
        self.publish(CancelEntry(id=self._id("c"), run_id=run_id), sender)

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data())
    def cancel_denied(self, data: st.DataObject) -> None:
        run_id = self._run(data)
        self.publish(CancelDenied(id=self._id("cd"), run_id=run_id), self._agent(data, run_id))

    @precondition(lambda self: bool(self.reg.runs))
    @rule(
        data=st.data(),
        status=st.sampled_from(
            ["active", "active", "suspended", "complete", "cancelled", "error", "pending"]
        ),
        durable=st.booleans(),
    )
    def agent_status(self, data: st.DataObject, status: Any, durable: bool) -> None:
        run_id = self._run(data)
        entry = RunEntry(id=self._id("r"), run_id=run_id, status=status, durable=durable or None)
        self.publish(entry, self._agent(data, run_id))

    @precondition(
        lambda self: any(r.status in ("pending", "suspended") for r in self.reg.runs.values())
    )
    @rule(data=st.data(), durable=st.booleans())
    def agent_starts(self, data: st.DataObject, durable: bool) -> None:
        """A worker starts (or adopts) a pending Run, or its owner resumes a suspended one."""
        pending = sorted(
            r.run_id for r in self.reg.runs.values() if r.status in ("pending", "suspended")
        )
        run_id = data.draw(st.sampled_from(pending))
        entry = RunEntry(id=self._id("r"), run_id=run_id, status="active", durable=durable or None)
        self.publish(entry, self._agent(data, run_id))

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data(), status=st.sampled_from(["pending", "error", "cancelled"]))
    def relay_status(self, data: st.DataObject, status: Any) -> None:
        """The relay hands a Run on (its agent went away) or ends it."""
        self.publish(RunEntry(id=self._id("rr"), run_id=self._run(data), status=status), RELAY)

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data(), checkpoint=st.booleans())
    def stream(self, data: st.DataObject, checkpoint: bool) -> None:
        run_id = self._run(data)
        sender = self._agent(data, run_id)
        entry: EntryBody
        if checkpoint:
            entry = CheckpointEntry(id=self._id("k"), run_id=run_id, step=self.n)
        else:
            entry = ResponseAppend(
                id=self._id("a"), run_id=run_id, message_id="msg", chunks=[{"type": "text"}]
            )
        self.publish(entry, sender)

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data(), two=st.booleans(), suspend=st.booleans())
    def pause(self, data: st.DataObject, two: bool, suspend: bool) -> None:
        """The agent pauses on questions (and, mostly, suspends the Run)."""
        run_id = self._run(data, "active")
        sender = self._agent(data, run_id)
        n = self.n
        questions = [Interrupt(id=f"q{n}a", message="?")]
        if two:
            questions.append(Interrupt(id=f"q{n}b", message="?", expires_at=self.now + 30))
        entry = InterruptEntry(
            id=self._id("i"), run_id=run_id, status="paused", interrupts=questions
        )
        if self.publish(entry, sender) is not None and suspend:
            self.publish(RunEntry(id=self._id("r"), run_id=run_id, status="suspended"), sender)

    @precondition(lambda self: bool(self.reg.runs))
    @rule(data=st.data(), sender=st.sampled_from(CLIENTS), how=st.sampled_from(["a", "b", "no"]))
    def answer(self, data: st.DataObject, sender: Sender, how: str) -> None:
        asked = sorted(r.run_id for r in self.reg.runs.values() if r.waiting())
        run_id = data.draw(st.sampled_from(asked)) if asked else self._run(data)
        record = self.reg.get(run_id)
        entry: InterruptEntry
        if how == "no":
            entry = InterruptEntry(id=self._id("d"), run_id=run_id, status="declined")
        else:
            questions = record.waiting() if record else []
            responses = {q["id"]: "yes" for q in questions if q["id"].endswith(how)}
            entry = InterruptEntry(
                id=self._id("ans"), run_id=run_id, status="resumed", responses=responses
            )
        self.publish(entry, sender)

    @precondition(lambda self: bool(self.reg.due()))
    @rule(data=st.data())
    def relay_publishes_one(self, data: st.DataObject) -> None:
        due = self.reg.due()
        entry, sender = data.draw(st.sampled_from(due))
        self.publish(entry, sender)

    @rule()
    def relay_works_out_what_it_owes(self) -> None:
        """A relay node reads due() now and publishes it later (after other entries)."""
        self.owed.extend(self.reg.due())

    @precondition(lambda self: bool(self.owed))
    @rule(data=st.data())
    def relay_publishes_late(self, data: st.DataObject) -> None:
        """What was owed then goes through plan() now: a status change (a turn, a resume,
        an end) passes only while still owed. (An interrupt's cancel passes while its Run
        waits and names the target, as the docstring says, owed or not.)"""
        i = data.draw(st.integers(0, len(self.owed) - 1))
        entry, sender = self.owed.pop(i)
        now_owed = {e.id for e, _ in self.reg.due()}
        if self.publish(entry, sender) is not None and isinstance(entry, RunEntry):
            assert entry.id in now_owed, f"plan() took {entry.id}, which is no longer owed"

    @rule()
    def relay_drains(self) -> None:
        for _ in range(100):
            due = self.reg.due()
            if not due:
                return
            for entry, sender in due:
                self.publish(entry, sender)
        raise AssertionError(f"draining due() does not end: {self.reg.due()}")

    @rule(take=st.booleans())
    def another_session(self, take: bool) -> None:
        """A Run of another session sharing the relay's slots starts, or one ends."""
        book = self.reg.slots
        assert book is not None
        others = sorted(k for k in book._held if k[0] != SESSION)
        if take and book.free():
            self.n += 1
            book.hold(("other", f"x{self.n}"))
        elif not take and others:
            book._held.discard(others[0])

    # ---------------------------------------------------------- invariants

    @invariant()
    def a_cancelled_paused_run_resumes_at_once(self) -> None:
        """An owed resume whose cancel stands is due whatever the slots: it goes on to end."""
        due = _resumes_due(self.reg)
        for record in self.reg.resumes_owed():
            if record.cancel_requested:
                assert record.run_id in due, (
                    f"{record.run_id} is cancelled and owed its resume, and due() does not say so"
                )

    @invariant()
    def a_free_slot_goes_to_the_oldest_owed_resume(self) -> None:
        """Nothing waits for a slot while one is free: once the owed resumes whose cancel
        stands took theirs, a slot left makes the oldest other owed resume due."""
        assert self.reg.slots is not None
        owed = self.reg.resumes_owed()
        ending = [r for r in owed if r.cancel_requested]
        held = [r for r in owed if not r.cancel_requested]
        room = self.reg.slots.available()
        if not held or (room is not None and room <= len(ending)):
            return
        assert held[0].run_id in _resumes_due(self.reg), (
            f"{held[0].run_id} is owed its resume, a slot is free, and due() does not say so"
        )

    @invariant()
    def due_entries_pass_the_rules(self) -> None:
        for entry, sender in self.reg.due():
            probe = RunRegistry(
                SESSION,
                list(self.reg.runs.values()),
                policy=self.reg.policy,
                slots=copy.deepcopy(self.reg.slots),
            )
            try:
                probe.plan(entry, sender, self.now + 1)
            except RunwireError as exc:
                raise AssertionError(f"due() lists {entry!r}, plan() refuses: {exc}") from exc

    @invariant()
    def what_is_owed_is_not_stored_yet(self) -> None:
        for entry, _ in self.reg.due():
            assert entry.id not in self.ids, f"due() owes {entry.id}, which the channel holds"

    @invariant()
    def slots_held_by_the_runs_going_on(self) -> None:
        assert self.reg.slots is not None
        going = {(SESSION, r.run_id) for r in self.reg.runs.values() if r.going_on}
        assert {k for k in self.reg.slots._held if k[0] == SESSION} == going

    @invariant()
    def slots_past_the_limit_only_for_tool_calls_and_runs_resumed_to_end(self) -> None:
        """Past the limit: tool-call Runs, and Runs resumed while no slot was free because
        a cancel stood (they hold a slot while they go on, even if their worker refused it)."""
        assert self.reg.slots is not None and self.reg.slots.limit is not None
        going = [
            r
            for r in self.reg.runs.values()
            if r.going_on
            and not (r.parent_run_id is not None and r.multitask == "alongside")
            and r.run_id not in self.past_limit
        ]
        others = sum(1 for k in self.reg.slots._held if k[0] != SESSION)
        assert len(going) + others <= self.reg.slots.limit, f"{len(going)} Runs hold slots"

    @invariant()
    def the_next_queued_run_gets_its_turn(self) -> None:
        runs = self.reg.runs.values()
        waiting = [r for r in runs if r.status == "queued" and not r.cancel_requested]
        if not waiting or any(r.going_on or r.resume_owed for r in runs):
            return
        assert self.reg.slots is not None
        if any(k[0] != SESSION for k in self.reg.slots._held) and not self.reg.slots.free():
            return  # another session's Runs hold the slots: it waits for one
        assert self.reg.slots.free()
        first = min(waiting, key=lambda r: (r.multitask not in ("interrupt", "rollback"), r.seq))
        assert self.reg.promotable() is first
        assert any(
            isinstance(e, RunEntry) and e.run_id == first.run_id and e.status == "pending"
            for e, _ in self.reg.due()
        )

    @invariant()
    def a_waiting_interrupt_stops_what_it_names(self) -> None:
        """Each Run a waiting interrupt names that goes on, or is owed its resume, gets the
        relay's cancel (or, not started, its end) unless a cancel already stands."""
        owed = self.reg.due()
        for record in self.reg.queued():
            if record.cancel_requested or record.multitask not in ("interrupt", "rollback"):
                continue
            for target_id in record.interrupts:
                target = self.reg.runs[target_id]
                if not (target.going_on or target.resume_owed) or target.interrupted_by:
                    continue
                if target.cancel_requested and target.status != "pending":
                    continue
                assert any(e.run_id == target_id for e, _ in owed), (
                    f"{record.run_id} interrupts {target_id}, and nothing stops it"
                )

    @invariant()
    def interrupt_cancels_go_to_named_runs(self) -> None:
        for entry in self.log:
            if isinstance(entry, CancelEntry) and entry.interrupted_by:
                assert entry.run_id in self.reg.runs[entry.interrupted_by].interrupts
        for record in self.reg.runs.values():
            if record.interrupted_by is not None:
                assert record.run_id in self.reg.runs[record.interrupted_by].interrupts
            if record.interrupts:
                assert record.multitask in ("interrupt", "rollback")

    @invariant()
    def owners_are_agents(self) -> None:
        for record in self.reg.runs.values():
            assert record.owner in (None, AGENT_1.client_id, AGENT_2.client_id), record
            if record.status in ("queued",):
                assert record.owner is None

    @invariant()
    def another_node_rebuilds_the_same_records(self) -> None:
        other = RunRegistry(SESSION, policy=self.reg.policy)
        for entry in self.log:
            other.replay(entry)
        assert other.runs == self.reg.runs

    @invariant()
    def statuses_are_known(self) -> None:
        for record in self.reg.runs.values():
            assert record.status in TERMINAL | {"queued", "pending", "active", "suspended"}


def _resumed_to_end(record: RunRecord) -> bool:
    """True if ``record`` is owed its resume with a cancel standing: it goes on only to end."""
    return record.resume_owed and record.cancel_requested


def _resumes_due(reg: RunRegistry) -> set[str]:
    """The Runs whose ``run: pending`` ``due()`` lists."""
    return {e.run_id for e, _ in reg.due() if isinstance(e, RunEntry) and e.status == "pending"}


RegistryMachine.TestCase.settings = settings(
    max_examples=EXAMPLES or 400,
    stateful_step_count=40,
    derandomize=not EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
TestRegistryMachine = RegistryMachine.TestCase
