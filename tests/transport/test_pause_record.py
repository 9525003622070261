"""The typed pause record: what a paused Run waits on, and its round trip through a store."""

from __future__ import annotations

from transport._interrupts import PauseRecord
from transport._runs import RunRecord, RunRegistry, Sender
from transport.frames import Interrupt, InterruptEntry, MessageEntry, RunEntry
from transport.messages import TextPart, UIMessage

AGENT = Sender(client_id="w", role="agent")
CLIENT = Sender(client_id="c", user_id="u")


def _paused_registry() -> RunRegistry:
    reg = RunRegistry("s")
    prompt = MessageEntry(
        id="p1",
        run_id="r1",
        message=UIMessage(id="m1", role="user", parts=[TextPart(text="hi")]),
    )
    for entry, sender in (
        (prompt, CLIENT),
        (RunEntry(id="a1", run_id="r1", status="active"), AGENT),
        (
            InterruptEntry(
                id="i1",
                run_id="r1",
                status="paused",
                interrupts=[Interrupt(id="q1", reason="ask", message="Which region?")],
            ),
            AGENT,
        ),
    ):
        reg.apply(reg.plan(entry, sender, 1))
    return reg


def test_a_pause_is_a_typed_record_that_lists_what_the_run_waits_on() -> None:
    record = _paused_registry().get("r1")
    assert record is not None and isinstance(record.pause, PauseRecord)
    assert record.pause.round == 1 and not record.pause.due
    assert [q["id"] for q in record.waiting()] == ["q1"]


def test_a_record_with_a_pause_round_trips_through_plain_data() -> None:
    record = _paused_registry().get("r1")
    assert record is not None
    data = record.to_dict()
    assert isinstance(data["pause"], dict) and data["pause"]["round"] == 1
    assert RunRecord.from_dict(data) == record


def test_a_settled_pause_waits_on_nothing() -> None:
    pause = PauseRecord(interrupts=[{"id": "q1"}, {"id": "q2"}], answers={"q1": 1})
    assert [q["id"] for q in pause.waiting()] == ["q2"]
    assert pause.settle(moved_on=True).waiting() == []
    assert pause.settle(declined={"reason": "no"}).waiting() == []
    assert PauseRecord.from_dict({"round": 2, "unknown": True}) == PauseRecord(round=2)
