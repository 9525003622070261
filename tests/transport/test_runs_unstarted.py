"""RunRegistry: a cancel of a Run no agent has started ends it at once (the relay's end)."""

from __future__ import annotations

from dataclasses import replace

from transport._policy import RELAY
from transport._runs import RunRegistry, relay_entry_id
from transport.frames import CancelDenied, RunEntry

from .test_runs import AGENT, ALICE, ALICE_LAPTOP, cancel, drain, prompt, publish, refused, state


def test_a_cancelled_pending_run_no_agent_started_is_ended_by_the_relay() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    assert reg.due() == []
    publish(reg, cancel("a"), ALICE)
    assert drain(reg) == [("a", "cancelled", "relay")]
    record = reg.get("a")
    assert record is not None and record.status == "cancelled" and record.owner is None
    # The worker the Run was handed to starts it too late: it ended.
    assert refused(reg, RunEntry(id="x", run_id="a", status="active"), AGENT) == "RUN_NOT_ACTIVE"
    # Nothing goes on any more: a reject prompt is taken.
    publish(reg, prompt("b", "reject"), ALICE)
    assert state(reg) == {"a": "cancelled", "b": "pending"}


def test_an_enqueued_run_does_not_wait_behind_a_cancelled_unstarted_run() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    publish(reg, prompt("b", "enqueue"), ALICE)
    assert state(reg)["b"] == "queued"
    publish(reg, cancel("a"), ALICE_LAPTOP)
    assert drain(reg) == [("a", "cancelled", "relay"), ("b", "pending", "relay")]


def test_no_agent_refuses_the_cancel_of_a_run_it_has_not_started() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    publish(reg, cancel("a"), ALICE)
    denied = CancelDenied(id="d", run_id="a", cancel_id="c-a-0")
    assert refused(reg, denied, AGENT) == "UNAUTHORIZED"


def test_the_relay_ends_a_pending_run_only_while_a_cancel_stands() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    end = RunEntry(id=relay_entry_id("a", "cancelled"), run_id="a", status="cancelled")
    assert refused(reg, end, RELAY) == "RUN_NOT_ACTIVE"


def test_a_handed_over_pending_run_keeps_its_cancel_for_the_worker_that_adopts_it() -> None:
    """A Run an agent started and left is pending again, but its adopter may refuse the
    cancel (``on_cancel``): the relay does not end it."""
    reg = RunRegistry("s")
    publish(reg, prompt("a"), ALICE)
    publish(reg, RunEntry(id="r1", run_id="a", status="active", durable=True), AGENT)
    publish(reg, RunEntry(id="r2", run_id="a", status="pending"), RELAY)
    publish(reg, cancel("a"), ALICE)
    assert drain(reg) == []
    record = reg.get("a")
    assert record is not None and record.status == "pending" and record.cancel_requested


def test_every_node_replays_the_relays_end_alike() -> None:
    reg = RunRegistry("s")
    other = RunRegistry("s")
    stamped = []
    for entry, sender in [(prompt("a"), ALICE), (cancel("a"), ALICE)]:
        changes = reg.plan(entry, sender, 1)
        stamped.append(reg.stamp(entry, sender, 1, changes))
        reg.apply(changes)
    [(end, sender)] = reg.due()
    changes = reg.plan(end, sender, 2)
    stamped.append(reg.stamp(end, sender, 2, changes))
    reg.apply(changes)
    for entry in stamped:
        other.replay(entry)
    mine, theirs = reg.get("a"), other.get("a")
    assert mine is not None and theirs is not None
    assert theirs.status == "cancelled" and theirs.owner is None
    assert replace(theirs, prompt_id="") == replace(mine, prompt_id="")
