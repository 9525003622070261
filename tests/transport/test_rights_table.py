"""One table says which right each kind of entry needs; the rules and the repeat check use it."""

from __future__ import annotations

import typing

import pytest

from transport._policy import CAPABILITIES, Sender
from transport._rights import ENTRY_RIGHTS, needed_right, rights_refusal
from transport._runs import RunRegistry, ended_error, run_ended
from transport.errors import RUN_NOT_ACTIVE, RunwireError
from transport.frames import EntryBody, Intent, InterruptEntry, MessageEntry
from transport.messages import user_message

from .test_runs import AGENT, ALICE, cancel, prompt, publish, status, steer


def test_the_table_names_every_entry_kind() -> None:
    union = typing.get_args(EntryBody)[0]
    kinds = {typing.get_args(t.model_fields["kind"].annotation)[0] for t in typing.get_args(union)}
    keyed = {key.split(":")[0] for key in ENTRY_RIGHTS}
    assert keyed == kinds
    intents = set(typing.get_args(Intent))
    assert {k.split(":")[1] for k in ENTRY_RIGHTS if k.startswith("message:")} == intents
    statuses = set(typing.get_args(InterruptEntry.model_fields["status"].annotation))
    assert {k.split(":")[1] for k in ENTRY_RIGHTS if k.startswith("interrupt:")} == statuses


@pytest.mark.parametrize(
    "entry",
    [prompt("r9"), steer("r1"), cancel("r1"), status("r1", "active")],
    ids=["prompt", "steer", "cancel", "run"],
)
def test_a_sender_without_the_tables_right_is_refused_by_the_rules_and_the_repeat_check(
    entry: EntryBody,
) -> None:
    needs = needed_right(entry)
    role: typing.Literal["client", "agent"] = "agent" if needs == "agent" else "client"
    without = {needs, "cancel-any"}  # cancel-any grants every cancel
    lacking = Sender(client_id="x", user_id="alice", role=role, caps=CAPABILITIES - without)
    reg = RunRegistry("s")
    publish(reg, prompt("r1"), ALICE)
    with pytest.raises(RunwireError) as refused:
        reg.plan(entry, lacking, 1000)
    assert refused.value.code == "UNAUTHORIZED" and refused.value.details["needs"] == needs
    repeat = rights_refusal(entry, lacking)
    assert repeat is not None and repeat.details["needs"] == needs
    holding = Sender(client_id="x", user_id="alice", role=role, caps=frozenset({needs}))
    assert rights_refusal(entry, holding) is None


def test_a_client_never_publishes_what_needs_the_agent_right() -> None:
    everything = Sender(client_id="c", user_id="alice", caps=None)
    refusal = rights_refusal(status("r1", "active"), everything)
    assert refusal is not None and refusal.code == "UNAUTHORIZED"


def test_one_place_decides_a_run_ended_and_how_later_entries_are_refused() -> None:
    assert [s for s in ("pending", "active", "complete", "cancelled", "error") if run_ended(s)] == [
        "complete",
        "cancelled",
        "error",
    ]
    reg = RunRegistry("s")
    publish(reg, prompt("r1"), ALICE)
    publish(reg, status("r1", "active"), AGENT)
    publish(reg, status("r1", "complete"), AGENT)
    with pytest.raises(RunwireError) as late:
        reg.plan(steer("r1"), ALICE, 2000)
    assert late.value == ended_error("r1", "complete")
    assert late.value.code == RUN_NOT_ACTIVE


def test_a_message_entry_of_each_intent_needs_its_right() -> None:
    for intent, right in (("prompt", "publish"), ("steer", "steer"), ("inject", "steer")):
        entry = MessageEntry(id="e", run_id="r", intent=intent, message=user_message("x"))
        assert needed_right(entry) == right
