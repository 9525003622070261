"""RunRegistry: pauses on questions, answers checked by the relay, the resume it owes."""

from __future__ import annotations

from typing import Any

import pytest

from transport._policy import RELAY
from transport._runs import RunRegistry
from transport.errors import RunwireError
from transport.frames import Interrupt, InterruptEntry

from .test_runs import AGENT, ALICE, drain, prompt, publish, refused, session, status

REGION = {
    "type": "object",
    "properties": {"region": {"enum": ["eu", "us"]}},
    "required": ["region"],
}


def paused(*questions: Interrupt, n: int = 0) -> InterruptEntry:
    return InterruptEntry(id=f"pause-{n}", run_id="r1", status="paused", interrupts=list(questions))


def answer(responses: dict[str, Any], n: int = 0) -> InterruptEntry:
    return InterruptEntry(id=f"ans-{n}", run_id="r1", status="resumed", responses=responses)


def suspended(*questions: Interrupt) -> RunRegistry:
    reg = session(("r1", ALICE))
    publish(reg, paused(*questions), AGENT)
    publish(reg, status("r1", "suspended"), AGENT)
    return reg


def code_of(reg: RunRegistry, entry: InterruptEntry, now: int = 1000) -> str:
    with pytest.raises(RunwireError) as info:
        reg.plan(entry, ALICE, now)
    return info.value.code


Q1 = Interrupt(id="c1#0", reason="pick_region", message="Where?", response_schema=REGION)
Q2 = Interrupt(id="c2#0", message="Why?", expires_at=5000)


def test_a_pause_records_the_questions_and_an_answer_resumes_the_run() -> None:
    reg = suspended(Q1)
    assert [q["id"] for q in reg.runs["r1"].waiting()] == ["c1#0"]
    assert drain(reg) == []
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
    assert drain(reg) == [("r1", "pending", "relay")]
    record = reg.runs["r1"]
    assert record.owner is None and record.adoptions == 1
    assert record.pause is not None and record.pause.answers == {"c1#0": {"region": "eu"}}
    assert drain(reg) == []


def test_answers_are_checked() -> None:
    reg = suspended(Q1, Q2)
    assert code_of(reg, answer({"nope": 1})) == "VALIDATION_ERROR"
    assert code_of(reg, answer({"c1#0": {"region": "mars"}})) == "INTERRUPT_ANSWER_INVALID"
    assert code_of(reg, answer({"c2#0": "x"}), now=6000) == "INTERRUPT_EXPIRED"
    publish(reg, answer({"c1#0": {"region": "us"}}), ALICE)
    assert code_of(reg, answer({"c1#0": {"region": "us"}}, 1)) == "VALIDATION_ERROR"
    assert drain(reg) == []  # c2#0 still waits
    publish(reg, answer({"c2#0": "because"}, 2), ALICE)
    assert drain(reg) == [("r1", "pending", "relay")]


def test_an_answer_once_the_rest_expired_resumes() -> None:
    reg = suspended(Q1, Q2)
    reg.apply(reg.plan(answer({"c1#0": {"region": "eu"}}), ALICE, 6000))
    assert drain(reg) == [("r1", "pending", "relay")]
    pause = reg.runs["r1"].pause
    assert pause is not None and pause.expired == ["c2#0"]


def test_a_new_prompt_moves_on_and_a_decline_ends_the_pause() -> None:
    reg = suspended(Q1)
    publish(reg, prompt("r2"), ALICE)
    assert ("r1", "pending", "relay") in drain(reg)
    pause = reg.runs["r1"].pause
    assert pause is not None and pause.moved_on
    reg = suspended(Q1)
    declined = InterruptEntry(id="d", run_id="r1", status="declined", reason="busy")
    publish(reg, declined, ALICE)
    assert drain(reg) == [("r1", "pending", "relay")]
    assert code_of(reg, answer({"c1#0": {"region": "eu"}})) == "VALIDATION_ERROR"


def test_replay_rebuilds_the_same_records() -> None:
    reg = suspended(Q1)
    entries = []
    for entry, sender in [(answer({"c1#0": {"region": "eu"}}), ALICE)]:
        changes = reg.plan(entry, sender, 1000)
        entries.append(reg.stamp(entry, sender, 1000, changes))
        reg.apply(changes)
    stamped = entries[0]
    assert isinstance(stamped, InterruptEntry)
    assert stamped.interrupts[0].response == {"region": "eu"}
    other = suspended(Q1)
    other.replay(stamped.model_copy(update={"client_id": ALICE.client_id}))
    assert other.runs["r1"].pause == reg.runs["r1"].pause


def test_only_agents_pause_and_only_active_runs() -> None:
    reg = session(("r1", ALICE))
    with pytest.raises(RunwireError) as info:
        reg.plan(paused(Q1), ALICE, 1000)
    assert info.value.code == "UNAUTHORIZED"
    assert code_of(reg, answer({"c1#0": {"region": "eu"}})) == "VALIDATION_ERROR"


@pytest.mark.parametrize("strategy", ["enqueue", "interrupt", "rollback"])
def test_a_queued_run_waits_for_a_resume_owed_before_its_turn(strategy: str) -> None:
    """A Run the relay owes a resume is about to go on: a waiting strategy's queued
    Run does not get its turn first, however late the relay publishes the resume."""
    reg = suspended(Q1)
    publish(reg, prompt("r0"), ALICE)  # r1's pause moved on: its resume is owed
    publish(reg, status("r0", "active"), AGENT)
    # queued behind r0 and r1 (and interrupting both: r1 is about to go on)
    publish(reg, prompt("r2", strategy), ALICE)
    publish(reg, status("r0", "complete"), AGENT)  # the relay published nothing yet
    assert reg.runs["r1"].status == "suspended" and reg.runs["r2"].status == "queued"
    assert reg.promotable() is None
    owed = [("r1", "pending")]
    if strategy != "enqueue":
        owed.insert(0, ("r1", "cancel"))
    assert [(e.run_id, getattr(e, "status", e.kind)) for e, _ in reg.due()] == owed
    assert refused(reg, status("r2", "pending"), RELAY) == "VALIDATION_ERROR"  # not next
    assert [(run_id, what) for run_id, what, _ in drain(reg)] == owed
    assert reg.runs["r2"].status == "queued"
    publish(reg, status("r1", "active"), AGENT)
    publish(reg, status("r1", "complete"), AGENT)
    assert drain(reg) == [("r2", "pending", "relay")]


def test_a_resume_worked_out_before_the_owner_resumed_the_run_is_stale() -> None:
    """The owner may resume its suspended Run itself (``start()``) once the answers are
    in: the relay's resume, worked out before that, is no longer owed and must not hand
    the running Run to another worker."""
    reg = suspended(Q1)
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
    [(resume, relay)] = reg.due()
    publish(reg, status("r1", "active", 2), AGENT)  # the owner went on by itself
    assert reg.due() == []
    assert refused(reg, resume, relay) == "RUN_NOT_ACTIVE"
    assert reg.runs["r1"].status == "active" and reg.runs["r1"].owner == AGENT.client_id


def test_a_run_its_owner_resumed_is_not_owed_the_old_resume_when_it_suspends_again() -> None:
    reg = suspended(Q1)
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)
    publish(reg, status("r1", "active", 2), AGENT)  # the owner went on by itself
    publish(reg, status("r1", "suspended", 3), AGENT)  # and waits again, on no question
    assert not reg.runs["r1"].resume_owed
    assert drain(reg) == []
    assert reg.runs["r1"].status == "suspended" and reg.runs["r1"].adoptions == 0


def test_an_enqueued_prompt_waits_for_a_run_owed_its_resume() -> None:
    """A suspended Run owed its resume counts as going on: ``enqueue`` queues behind it."""
    reg = suspended(Q1)
    publish(reg, answer({"c1#0": {"region": "eu"}}), ALICE)  # r1 is owed its resume
    [record] = publish(reg, prompt("r2", "enqueue"), ALICE)
    assert record.status == "queued"
    assert drain(reg) == [("r1", "pending", "relay")]
    publish(reg, status("r1", "active", 2), AGENT)
    publish(reg, status("r1", "complete", 3), AGENT)
    assert drain(reg) == [("r2", "pending", "relay")]


def test_an_enqueued_prompt_that_moves_a_paused_run_on_waits_for_its_resume() -> None:
    reg = suspended(Q1)
    [record, moved] = publish(reg, prompt("r2", "enqueue"), ALICE)
    assert moved.run_id == "r1" and moved.resume_owed
    assert record.status == "queued"
    assert drain(reg) == [("r1", "pending", "relay")]
