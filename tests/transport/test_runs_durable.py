"""RunRegistry: the rules for refusals, checkpoints, durable Runs and hand-overs."""

from __future__ import annotations

import pytest

from transport._runs import RunRecord, RunRegistry, Sender
from transport.errors import RunwireError
from transport.frames import (
    CancelDenied,
    CheckpointEntry,
    ErrorBody,
    MessageEntry,
    RefusedEntry,
    ResponseAppend,
    ResponseOpen,
    RunEntry,
)
from transport.messages import user_message

CLIENT = Sender("client-1", "user-1", "client")
AGENT = Sender("agent-1", None, "agent")
OTHER_AGENT = Sender("agent-2", None, "agent")
RELAY = Sender("relay", None, "relay")


def registry_with_active_run(*, durable: bool = False) -> RunRegistry:
    registry = RunRegistry("s")
    prompt = MessageEntry(id="p", run_id="r1", message=user_message("go", id="m1"))
    registry.apply(registry.plan(prompt, CLIENT, 1))
    active = RunEntry(id="a", run_id="r1", status="active", durable=durable or None)
    registry.apply(registry.plan(active, AGENT, 2))
    return registry


def refused(run_id: str = "r1") -> RefusedEntry:
    return RefusedEntry(
        id="x", run_id=run_id, message_id="m2", error=ErrorBody(code="PII_DETECTED")
    )


def test_refusals_come_from_the_runs_agent_or_the_relay_not_from_clients() -> None:
    registry = registry_with_active_run()
    assert registry.plan(refused(), AGENT, 3) == []
    assert registry.plan(refused(), RELAY, 3) == []
    with pytest.raises(RunwireError) as client:
        registry.plan(refused(), CLIENT, 3)
    assert client.value.code == "UNAUTHORIZED"
    with pytest.raises(RunwireError) as other:
        registry.plan(refused(), OTHER_AGENT, 3)
    assert other.value.code == "UNAUTHORIZED"
    with pytest.raises(RunwireError) as missing:
        registry.plan(refused("nope"), RELAY, 3)
    assert missing.value.code == "RUN_NOT_FOUND"


def test_a_checkpoint_becomes_the_records_checkpoint() -> None:
    registry = registry_with_active_run(durable=True)
    record = registry.get("r1")
    assert record is not None and record.durable
    entry = CheckpointEntry(
        id="c", run_id="r1", step=2, turn=1, iterations=2, seen=["m2"], state={"k": 1}
    )
    (changed,) = registry.plan(entry, AGENT, 5)
    assert changed.checkpoint == {
        "step": 2,
        "turn": 1,
        "iterations": 2,
        "seen": ["m2"],
        "state": {"k": 1},
    }
    with pytest.raises(RunwireError):
        registry.plan(entry, CLIENT, 5)
    # The record survives a store round trip, and old records without the fields load.
    assert RunRecord.from_dict(changed.to_dict()) == changed
    old = changed.to_dict()
    for key in ("durable", "checkpoint", "adoptions"):
        del old[key]
    assert RunRecord.from_dict(old).adoptions == 0


def test_only_the_relay_hands_a_run_back_to_pending_and_another_agent_adopts_it() -> None:
    registry = registry_with_active_run(durable=True)
    back = RunEntry(id="b", run_id="r1", status="pending")
    with pytest.raises(RunwireError) as agent:
        registry.plan(back, AGENT, 6)
    assert agent.value.code == "UNAUTHORIZED"
    (released,) = registry.plan(back, RELAY, 6)
    assert (released.status, released.owner, released.adoptions) == ("pending", None, 1)
    registry.apply([released])
    (adopted,) = registry.plan(RunEntry(id="c", run_id="r1", status="active"), OTHER_AGENT, 7)
    assert adopted.owner == "agent-2" and adopted.durable
    registry.apply([adopted])
    with pytest.raises(RunwireError) as old_owner:
        registry.plan(refused(), AGENT, 8)
    assert old_owner.value.code == "UNAUTHORIZED"


def test_a_handed_over_run_takes_no_agent_output_until_a_worker_starts_it() -> None:
    """The old owner back from a partition (owner cleared) may not write into it."""
    registry = registry_with_active_run(durable=True)
    registry.apply(registry.plan(RunEntry(id="b", run_id="r1", status="pending"), RELAY, 6))
    late = [
        ResponseOpen(id="o", run_id="r1", message_id="r1.s1"),
        ResponseAppend(
            id="a2",
            run_id="r1",
            message_id="r1.s1",
            chunks=[{"type": "text-delta", "id": "t", "delta": "x"}],
        ),
        CheckpointEntry(id="k", run_id="r1", step=1),
        CancelDenied(id="d", run_id="r1", cancel_id="c1"),
    ]
    for entry in late:
        for sender in (AGENT, OTHER_AGENT):
            with pytest.raises(RunwireError) as exc:
                registry.plan(entry, sender, 7)
            assert exc.value.code == "RUN_NOT_ACTIVE"
    registry.apply(registry.plan(RunEntry(id="c", run_id="r1", status="active"), AGENT, 8))
    assert registry.plan(late[0], AGENT, 9) == []  # the adopter (the same client here) streams


def test_an_ended_run_is_not_handed_back() -> None:
    registry = registry_with_active_run()
    registry.apply(registry.plan(RunEntry(id="e", run_id="r1", status="complete"), AGENT, 3))
    with pytest.raises(RunwireError) as exc:
        registry.plan(RunEntry(id="b", run_id="r1", status="pending"), RELAY, 4)
    assert exc.value.code == "RUN_NOT_ACTIVE"


def _stamped(registry: RunRegistry, entry, sender: Sender, ts: int):  # type: ignore[no-untyped-def]
    """Plan, apply and stamp ``entry`` as the publishing relay node would."""
    changes = registry.plan(entry, sender, ts)
    registry.apply(changes)
    return registry.stamp(entry, sender, ts, changes)


def test_replay_on_another_node_applies_checkpoints_refusals_and_the_hand_over() -> None:
    writer = RunRegistry("s")
    reader = RunRegistry("s")
    prompt = MessageEntry(id="p", run_id="r1", message=user_message("go", id="m1"))
    entries = [
        _stamped(writer, prompt, CLIENT, 1),
        _stamped(writer, RunEntry(id="a", run_id="r1", status="active", durable=True), AGENT, 2),
        _stamped(writer, CheckpointEntry(id="c", run_id="r1", step=1, state={"k": 1}), AGENT, 3),
        _stamped(writer, refused(), AGENT, 4),
        _stamped(writer, RunEntry(id="b", run_id="r1", status="pending"), RELAY, 5),
    ]
    for entry in entries:
        reader.replay(entry)
    record = reader.get("r1")
    assert record is not None
    assert (record.status, record.owner, record.adoptions, record.durable) == (
        "pending",
        None,
        1,
        True,
    )
    assert record.checkpoint is not None and record.checkpoint["state"] == {"k": 1}
    assert record == writer.get("r1")
    # Another worker adopts it; both nodes agree on the new owner.
    adopt = _stamped(writer, RunEntry(id="a2", run_id="r1", status="active"), OTHER_AGENT, 6)
    reader.replay(adopt)
    assert reader.get("r1") == writer.get("r1")
    assert reader.get("r1").owner == "agent-2"  # type: ignore[union-attr]
