"""RunRegistry: a suspended Run owed its resume under the slot limit and the strategies,
and who may refuse cancels of (or checkpoint) a Run nobody started."""

from __future__ import annotations

import pytest

from transport._policy import RELAY, Policy, Sender, SlotBook
from transport._runs import RunRegistry
from transport.frames import CancelDenied, CheckpointEntry, InterruptEntry, RunEntry

from .test_runs import AGENT, ALICE, BOB, cancel, drain, prompt, publish, refused, status
from .test_runs_interrupts import Q1, answer, paused

OTHER_AGENT = Sender(client_id="agent-2", user_id="svc", role="agent", caps=frozenset({"agent"}))


def paused_run(slots: SlotBook | None = None) -> RunRegistry:
    """Session ``s`` whose Run r1 (Alice's) is suspended on question Q1."""
    reg = RunRegistry("s", slots=slots)
    publish(reg, prompt("r1"), ALICE)
    publish(reg, status("r1", "active"), AGENT)
    publish(reg, paused(Q1), AGENT)
    publish(reg, status("r1", "suspended"), AGENT)
    return reg


def owed_run(slots: SlotBook | None = None) -> RunRegistry:
    """As ``paused_run``, with Q1 answered: the relay owes r1 its resume."""
    reg = paused_run(slots)
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
    assert reg.runs["r1"].resume_owed
    return reg


# ----------------------------------------------------------- slots ---


def test_a_resume_waits_for_a_free_slot_and_goes_before_queued_runs() -> None:
    """A suspended Run holds no slot; its resume takes one, so it is owed (and taken)
    only while one is free, and it goes first when one frees: nothing is lost."""
    slots = SlotBook(1)
    reg = paused_run(slots)
    other = RunRegistry("o", slots=slots)
    publish(other, prompt("x"), BOB)  # takes the one slot while r1 waits on a person
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
    assert reg.runs["r1"].resume_owed and not slots.free()
    assert reg.due() == []  # no slot: the resume waits
    resume = RunEntry(id="relay:r1:resume:1", run_id="r1", status="pending")
    assert refused(reg, resume, RELAY) == "VALIDATION_ERROR"
    assert slots.in_use == 1  # the refusal held nothing
    [waiting] = publish(reg, prompt("r2"), ALICE)
    assert waiting.status == "queued"
    publish(other, status("x", "active"), AGENT)
    publish(other, status("x", "complete"), AGENT)
    assert slots.free()
    # r1 was started before r2 was sent: it takes the slot that freed.
    assert drain(reg) == [("r1", "pending", "relay")]
    assert slots.in_use == 1 and reg.runs["r2"].status == "queued"
    publish(reg, status("r1", "active", 2), OTHER_AGENT)
    publish(reg, status("r1", "complete", 3), OTHER_AGENT)
    assert drain(reg) == [("r2", "pending", "relay")]
    assert slots.in_use == 1


def test_a_planned_resume_holds_its_slot() -> None:
    """Two sessions planning at once cannot both take the last slot."""
    slots = SlotBook(1)
    reg = owed_run(slots)
    [(resume, relay)] = reg.due()
    changes = reg.plan(resume, relay, 1)  # the store is writing it
    other = RunRegistry("o", slots=slots)
    assert other.plan(prompt("x"), BOB, 1)[0].status == "queued"
    reg.abandon(changes)
    assert slots.free()


def test_the_owner_resuming_its_suspended_run_needs_a_free_slot() -> None:
    slots = SlotBook(1)
    reg = owed_run(slots)
    other = RunRegistry("o", slots=slots)
    publish(other, prompt("x"), BOB)
    assert refused(reg, status("r1", "active", 2), AGENT) == "VALIDATION_ERROR"
    assert reg.runs["r1"].status == "suspended" and slots.in_use == 1
    publish(other, status("x", "cancelled"), AGENT)
    publish(reg, status("r1", "active", 2), AGENT)
    assert slots.in_use == 1 and reg.due() == []


# ------------------------------------------------------ strategies ---


def test_reject_is_refused_while_a_run_is_owed_its_resume() -> None:
    reg = owed_run()
    assert refused(reg, prompt("r2", "reject"), ALICE) == "THREAD_BUSY"
    assert reg.runs["r1"].resume_owed and "r2" not in reg.runs


def test_reject_is_refused_when_its_move_on_would_resume_a_paused_run() -> None:
    """A prompt settles the pause of a Run waiting on questions (it moves on), so that
    Run goes on again: a reject prompt must not start beside it."""
    reg = paused_run()
    assert refused(reg, prompt("r2", "reject"), ALICE) == "THREAD_BUSY"
    assert reg.runs["r1"].waiting()  # the refused prompt moved nothing on


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_interrupt_cancels_a_run_owed_its_resume(strategy: str) -> None:
    reg = owed_run()
    [record] = publish(reg, prompt("r2", strategy), ALICE)
    assert (record.status, record.interrupts) == ("queued", ["r1"])
    assert drain(reg) == [("r1", "cancel", "alice"), ("r1", "pending", "relay")]
    assert reg.runs["r1"].interrupted_by == "r2" and reg.runs["r1"].cancel_requested
    assert reg.runs["r2"].status == "queued"
    publish(reg, status("r1", "active", 2), OTHER_AGENT)  # a worker adopts it
    publish(reg, status("r1", "cancelled", 3), OTHER_AGENT)  # and applies the cancel
    assert drain(reg) == [("r2", "pending", "relay")]


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_interrupt_cancels_a_paused_run_it_moves_on(strategy: str) -> None:
    reg = paused_run()
    [record, moved] = publish(reg, prompt("r2", strategy), ALICE)
    assert moved.run_id == "r1" and moved.resume_owed
    assert (record.status, record.interrupts) == ("queued", ["r1"])
    changes = reg.plan(prompt("r3", strategy), ALICE, 1)
    stamped = reg.stamp(prompt("r3", strategy), ALICE, 1, changes)
    assert stamped.interrupts == ["r1"]  # type: ignore[union-attr]
    assert ("r1", "cancel", "alice") in drain(reg)


def test_interrupting_a_run_owed_its_resume_needs_the_cancel_right() -> None:
    reg = owed_run()
    bob_own_only = Sender("bob/web", "bob", caps=frozenset({"publish", "cancel"}))
    reg.policy = Policy(thread_access="shared")
    assert refused(reg, prompt("r2", "interrupt"), bob_own_only) == "UNAUTHORIZED"


def test_strategies_keep_to_their_own_users_runs_owed_a_resume() -> None:
    reg = owed_run()  # Alice's r1; the session is not shared
    for strategy in ("reject", "enqueue", "interrupt", "rollback"):
        assert refused(reg, prompt("r2", strategy), BOB) == "THREAD_ACCESS_DENIED"
    assert publish(reg, prompt("r2", "alongside"), BOB)[0].status == "pending"


# ------------------------------------------- Runs nobody started yet ---


@pytest.mark.parametrize("sender", [AGENT, OTHER_AGENT])
def test_no_agent_refuses_the_cancel_of_a_queued_run(sender: Sender) -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    publish(reg, status("a", "active"), AGENT)
    publish(reg, prompt("b", "enqueue"), ALICE)
    publish(reg, cancel("b"), ALICE)
    denied = CancelDenied(id="d", run_id="b", cancel_id="c-b-0")
    assert refused(reg, denied, sender) == "UNAUTHORIZED"
    checkpoint = CheckpointEntry(id="k", run_id="b", step=1)
    assert refused(reg, checkpoint, sender) == "UNAUTHORIZED"
    assert reg.runs["b"].cancel_requested and reg.runs["b"].checkpoint is None
    assert drain(reg) == [("b", "cancelled", "relay")]


def test_only_the_agent_that_started_a_run_refuses_its_cancels_or_checkpoints_it() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    publish(reg, cancel("a"), ALICE)  # kept for the agent that starts it
    denied = CancelDenied(id="d", run_id="a", cancel_id="c-a-0")
    checkpoint = CheckpointEntry(id="k", run_id="a", step=1)
    for sender in (AGENT, OTHER_AGENT):  # pending, not started: nobody owns it yet
        assert refused(reg, denied, sender) == "UNAUTHORIZED"
        assert refused(reg, checkpoint, sender) == "UNAUTHORIZED"
    publish(reg, status("a", "active"), AGENT)
    assert refused(reg, denied, OTHER_AGENT) == "UNAUTHORIZED"
    assert refused(reg, checkpoint, OTHER_AGENT) == "UNAUTHORIZED"
    [record] = publish(reg, denied, AGENT)
    assert not record.cancel_requested
    [record] = publish(reg, checkpoint, AGENT)
    assert record.checkpoint is not None and record.checkpoint["step"] == 1
    assert publish(reg, CheckpointEntry(id="k2", run_id="a", step=2), RELAY)


# ------------------------------------ owed while no slot is free ---


def full(slots: SlotBook) -> RunRegistry:
    """Another session whose Run x holds the one slot."""
    other = RunRegistry("o", slots=slots)
    publish(other, prompt("x"), BOB)
    publish(other, status("x", "active"), AGENT)
    assert not slots.free()
    return other


@pytest.mark.parametrize("answered", [True, False])
def test_a_cancel_of_a_paused_run_makes_its_resume_due_though_no_slot_is_free(
    answered: bool,
) -> None:
    """Cancelled while it waits on its question (or while its resume waits for a slot)
    with every slot held: its resume is owed at once, and it goes on only to end. It
    takes a slot while it goes on (nothing else starts meanwhile) and gives it back when
    its worker ends it; the Run holding the slot goes on untouched."""
    slots = SlotBook(1)
    reg = paused_run(slots)
    other = full(slots)
    if answered:
        publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
        assert reg.due() == []  # without a cancel the resume waits for a slot
    publish(reg, cancel("r1"), ALICE)
    r1 = reg.runs["r1"]
    assert r1.status == "suspended" and r1.cancel_requested and r1.resume_owed
    assert drain(reg) == [("r1", "pending", "relay")]
    assert slots.in_use == 2 and reg.runs["r1"].cancel_requested
    assert other.runs["x"].status == "active"
    [waiting] = publish(reg, prompt("r2"), ALICE)
    assert waiting.status == "queued"  # the Run going on to end holds a slot
    publish(reg, status("r1", "active", 2), OTHER_AGENT)  # a worker adopts it
    publish(reg, status("r1", "cancelled", 3), OTHER_AGENT)  # and applies the cancel
    assert slots.in_use == 1 and drain(reg) == []  # r2 waits for x's slot
    publish(other, status("x", "complete", 2), AGENT)
    assert drain(reg) == [("r2", "pending", "relay")]
    assert slots.in_use == 1


def test_the_resumes_whose_cancel_stands_take_the_free_slots_first() -> None:
    """In a session with an owed resume and a cancelled paused Run, the free slot goes to
    the one that goes on only to end; the other resumes once that one ends (it is not lost)."""
    slots = SlotBook(2)
    reg = RunRegistry("s", slots=slots)
    for run_id in ("r1", "r3"):
        publish(reg, prompt(run_id), ALICE)
        publish(reg, status(run_id, "active"), AGENT)
    for run_id in ("r1", "r3"):
        question = InterruptEntry(id=f"q-{run_id}", run_id=run_id, status="paused", interrupts=[Q1])
        publish(reg, question, AGENT)
        publish(reg, status(run_id, "suspended"), AGENT)
    publish(RunRegistry("o", slots=slots), prompt("x"), BOB)  # one slot of two left
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
    assert [e.run_id for e, _ in reg.due()] == ["r1"]
    publish(reg, cancel("r3"), ALICE)
    assert drain(reg) == [("r3", "pending", "relay")]
    assert slots.in_use == 2 and reg.runs["r1"].status == "suspended"
    publish(reg, status("r3", "active", 2), OTHER_AGENT)
    publish(reg, status("r3", "cancelled", 3), OTHER_AGENT)
    assert drain(reg) == [("r1", "pending", "relay")]
    assert slots.in_use == 2


def test_a_run_resumed_to_end_that_refuses_its_cancel_keeps_its_slot() -> None:
    """The worker may refuse the cancel (``cancel_denied``): the Run goes on, holding the
    slot it took, and nothing else starts until a slot frees."""
    slots = SlotBook(1)
    reg = paused_run(slots)
    other = full(slots)
    publish(reg, cancel("r1"), ALICE)
    assert drain(reg) == [("r1", "pending", "relay")]
    publish(reg, status("r1", "active", 2), OTHER_AGENT)
    denied = CancelDenied(id="d", run_id="r1", cancel_id="c-r1-0")
    [record] = publish(reg, denied, OTHER_AGENT)
    assert record.status == "active" and not record.cancel_requested
    assert slots.in_use == 2
    assert publish(reg, prompt("r2"), ALICE)[0].status == "queued"
    publish(other, status("x", "complete", 2), AGENT)
    assert slots.in_use == 1 and drain(reg) == []  # r1 still holds the one slot
    publish(reg, status("r1", "complete", 3), OTHER_AGENT)
    assert drain(reg) == [("r2", "pending", "relay")]


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_an_interrupt_of_a_run_whose_resume_waits_for_a_slot_ends_it_at_once(
    strategy: str,
) -> None:
    """The interrupt's cancel is stored at once and the interrupted Run resumes at once to
    apply it, though no slot is free; the interrupting Run's turn comes after its end,
    once a slot is free."""
    slots = SlotBook(1)
    reg = owed_run(slots)
    other = full(slots)
    [record] = publish(reg, prompt("r2", strategy), ALICE)
    assert (record.status, record.interrupts) == ("queued", ["r1"])
    assert drain(reg) == [("r1", "cancel", "alice"), ("r1", "pending", "relay")]
    assert reg.runs["r2"].status == "queued" and slots.in_use == 2
    publish(reg, status("r1", "active", 2), OTHER_AGENT)
    publish(reg, status("r1", "cancelled", 3), OTHER_AGENT)
    assert slots.in_use == 1 and drain(reg) == []  # x holds the one slot
    publish(other, status("x", "complete", 2), AGENT)
    assert drain(reg) == [("r2", "pending", "relay")]
    assert slots.in_use == 1
