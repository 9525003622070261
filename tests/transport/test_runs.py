"""RunRegistry: rights, the multitask strategies, queued Runs, slots, what the relay owes."""

from __future__ import annotations

from typing import Any

import pytest

from transport._policy import CAPABILITIES, RELAY, Policy, Sender, SlotBook
from transport._runs import RunRecord, RunRegistry, relay_entry_id
from transport.errors import RunwireError
from transport.frames import (
    CancelDenied,
    CancelEntry,
    EntryBody,
    MessageEntry,
    ResponseAppend,
    RunEntry,
)
from transport.messages import user_message

ALICE = Sender(client_id="alice/phone", user_id="alice", caps=CAPABILITIES - {"agent"})
ALICE_LAPTOP = Sender(client_id="alice/laptop", user_id="alice", caps=ALICE.caps)
BOB = Sender(client_id="bob/web", user_id="bob", caps=ALICE.caps)
AGENT = Sender(client_id="agent-1", user_id="svc", role="agent", caps=frozenset({"agent"}))

# ------------------------------------------------------------- helpers ---


def prompt(run_id: str, multitask: str | None = None, **kw: Any) -> MessageEntry:
    return MessageEntry(
        id=f"p-{run_id}",
        run_id=run_id,
        intent="prompt",
        message=user_message(run_id, id=f"m-{run_id}"),
        multitask=multitask,  # type: ignore[arg-type]
        **kw,
    )


def steer(run_id: str) -> MessageEntry:
    return MessageEntry(
        id=f"s-{run_id}", run_id=run_id, intent="steer", message=user_message("more")
    )


def status(run_id: str, value: str, n: int = 0) -> RunEntry:
    return RunEntry(id=f"r-{run_id}-{value}-{n}", run_id=run_id, status=value)  # type: ignore[arg-type]


def cancel(run_id: str, n: int = 0) -> CancelEntry:
    return CancelEntry(id=f"c-{run_id}-{n}", run_id=run_id)


def publish(reg: RunRegistry, entry: EntryBody, sender: Sender) -> list[RunRecord]:
    changes = reg.plan(entry, sender, 1000)
    reg.apply(changes)
    return changes


def refused(reg: RunRegistry, entry: EntryBody, sender: Sender) -> str:
    with pytest.raises(RunwireError) as info:
        reg.plan(entry, sender, 1000)
    return info.value.code


def state(reg: RunRegistry) -> dict[str, str]:
    return {r.run_id: r.status for r in reg.runs.values()}


def drain(reg: RunRegistry) -> list[tuple[str, str, str]]:
    """Publish what the relay owes until nothing is owed; what it published, in order."""
    out: list[tuple[str, str, str]] = []
    for _ in range(50):
        due = reg.due()
        if not due:
            return out
        for entry, sender in due:
            try:
                publish(reg, entry, sender)
            except RunwireError:
                continue
            what = entry.status if isinstance(entry, RunEntry) else entry.kind
            out.append((entry.run_id, what, sender.user_id or "relay"))
    raise AssertionError("the relay kept owing entries")


def session(*running: tuple[str, Sender], policy: Policy | None = None) -> RunRegistry:
    """A registry with Runs started by the given senders (status ``active``)."""
    reg = RunRegistry("s", policy=policy)
    for run_id, sender in running:
        publish(reg, prompt(run_id), sender)
        publish(reg, status(run_id, "active"), AGENT)
    return reg


# -------------------------------------------------------------- rights ---

NONE: frozenset[str] = frozenset()


@pytest.mark.parametrize(
    ("caps", "entry", "code"),
    [
        (frozenset({"publish"}), prompt("new"), None),
        (frozenset({"steer", "cancel"}), prompt("new"), "UNAUTHORIZED"),
        (frozenset({"steer"}), steer("mine"), None),
        (frozenset({"publish"}), steer("mine"), "UNAUTHORIZED"),
        (frozenset({"cancel"}), cancel("mine"), None),
        (frozenset({"cancel"}), cancel("bobs"), "UNAUTHORIZED"),
        (frozenset({"cancel-any"}), cancel("bobs"), None),
        (frozenset({"cancel-any"}), cancel("mine"), None),
        (frozenset({"publish", "steer"}), cancel("mine"), "UNAUTHORIZED"),
        (None, cancel("bobs"), None),  # anonymous relay: every right
    ],
)
def test_client_rights(caps: frozenset[str] | None, entry: EntryBody, code: str | None) -> None:
    reg = session(("mine", ALICE), ("bobs", BOB))
    sender = Sender(client_id="alice/x", user_id="alice", caps=caps)
    if code is None:
        reg.plan(entry, sender, 1)
    else:
        assert refused(reg, entry, sender) == code


def _as(entry: MessageEntry, role: str) -> MessageEntry:
    message = entry.message.model_copy(update={"role": role})
    return entry.model_copy(update={"message": message})


@pytest.mark.parametrize("role", ["system", "assistant"])
@pytest.mark.parametrize("entry", [prompt("new"), steer("mine")], ids=["prompt", "steer"])
def test_only_agents_publish_system_or_assistant_messages(role: str, entry: MessageEntry) -> None:
    reg = session(("mine", ALICE))
    anonymous = Sender(client_id="anon", user_id=None, caps=None)
    for sender in (ALICE, anonymous):
        with pytest.raises(RunwireError) as info:
            reg.plan(_as(entry, role), sender, 1)
        assert info.value.code == "UNAUTHORIZED"
        assert info.value.details == {"role": role}
        reg.plan(entry, sender, 1)  # the same as a user's message is fine
    backend = Sender(client_id="agent-1", user_id="svc", role="agent", caps=None)
    reg.plan(_as(entry, role), backend, 1)


@pytest.mark.parametrize(
    ("sender", "entry", "code"),
    [
        (AGENT, status("mine", "complete"), None),
        (
            Sender("agent-2", "svc", "agent", frozenset({"subscribe"})),
            status("mine", "complete"),
            "UNAUTHORIZED",
        ),
        (
            Sender("agent-2", "svc", "agent", None),
            status("mine", "complete"),
            "UNAUTHORIZED",
        ),  # not owner
        (ALICE, status("mine", "complete"), "UNAUTHORIZED"),
        (AGENT, ResponseAppend(id="a", run_id="mine", message_id="x", chunks=[{"t": 1}]), None),
        (
            ALICE,
            ResponseAppend(id="a", run_id="mine", message_id="x", chunks=[{"t": 1}]),
            "UNAUTHORIZED",
        ),
        (AGENT, CancelDenied(id="d", run_id="mine", cancel_id="c"), None),
        (ALICE, CancelDenied(id="d", run_id="mine", cancel_id="c"), "UNAUTHORIZED"),
    ],
)
def test_agent_rights(sender: Sender, entry: EntryBody, code: str | None) -> None:
    reg = session(("mine", ALICE))
    if code is None:
        reg.plan(entry, sender, 1)
    else:
        assert refused(reg, entry, sender) == code


def test_stamp_overwrites_what_the_sender_claims() -> None:
    reg = RunRegistry("s")
    claimed = prompt("r1").model_copy(
        update={"user_id": "mallory", "client_id": "x", "queued": True, "interrupts": ["zz"]}
    )
    changes = reg.plan(claimed, ALICE, 42)
    stamped = reg.stamp(claimed, ALICE, 42, changes)
    assert isinstance(stamped, MessageEntry)
    assert (stamped.user_id, stamped.client_id, stamped.ts) == ("alice", "alice/phone", 42)
    assert (stamped.queued, stamped.interrupts, stamped.multitask) == (None, None, "alongside")
    reg.apply(changes)
    fake = CancelEntry(id="c", run_id="r1", interrupted_by="r9")
    assert reg.stamp(fake, ALICE, 43, []).interrupted_by is None  # type: ignore[union-attr]


# ---------------------------------------------------------- strategies ---

# (running Runs (id, user), strategy, sender, shared, expected status or error, interrupts)
STRATEGIES: list[tuple[list[tuple[str, Sender]], str, Sender, bool, str, list[str]]] = [
    ([], "alongside", ALICE, False, "pending", []),
    ([], "reject", ALICE, False, "pending", []),
    ([], "enqueue", ALICE, False, "pending", []),
    ([], "interrupt", ALICE, False, "pending", []),
    ([], "rollback", ALICE, False, "pending", []),
    ([("a", ALICE)], "alongside", ALICE, False, "pending", []),
    ([("a", ALICE)], "reject", ALICE_LAPTOP, False, "THREAD_BUSY", []),
    ([("a", ALICE)], "enqueue", ALICE, False, "queued", []),
    ([("a", ALICE)], "interrupt", ALICE, False, "queued", ["a"]),
    ([("a", ALICE)], "rollback", ALICE, False, "queued", ["a"]),
    ([("a", BOB)], "alongside", ALICE, False, "pending", []),
    ([("a", BOB)], "reject", ALICE, False, "THREAD_ACCESS_DENIED", []),
    ([("a", BOB)], "enqueue", ALICE, False, "THREAD_ACCESS_DENIED", []),
    ([("a", BOB)], "interrupt", ALICE, False, "THREAD_ACCESS_DENIED", []),
    ([("a", BOB)], "rollback", ALICE, False, "THREAD_ACCESS_DENIED", []),
    ([("a", BOB)], "reject", ALICE, True, "THREAD_BUSY", []),
    ([("a", BOB)], "enqueue", ALICE, True, "queued", []),
    ([("a", BOB)], "interrupt", ALICE, True, "queued", ["a"]),
    ([("a", ALICE), ("b", BOB)], "rollback", ALICE, True, "queued", ["a", "b"]),
]


@pytest.mark.parametrize(
    ("running", "strategy", "sender", "shared", "expected", "interrupts"), STRATEGIES
)
def test_strategy(
    running: list[tuple[str, Sender]],
    strategy: str,
    sender: Sender,
    shared: bool,
    expected: str,
    interrupts: list[str],
) -> None:
    reg = session(*running, policy=Policy(thread_access="shared" if shared else "own"))
    before = dict(reg.runs)
    entry = prompt("new", strategy)
    if expected.isupper():
        assert refused(reg, entry, sender) == expected
        assert reg.runs == before
        return
    [record] = reg.plan(entry, sender, 1)
    assert (record.status, record.interrupts, record.multitask) == (expected, interrupts, strategy)


def test_the_relay_default_applies_to_prompts_that_name_no_strategy() -> None:
    reg = session(("a", ALICE), policy=Policy(multitask="reject"))
    assert refused(reg, prompt("b"), ALICE) == "THREAD_BUSY"
    [record] = reg.plan(prompt("c", "alongside"), ALICE, 1)
    assert record.status == "pending"


def test_interrupting_needs_the_cancel_right_over_every_run_it_stops() -> None:
    reg = session(("a", ALICE), ("b", BOB), policy=Policy(thread_access="shared"))
    only_own = Sender("alice/x", "alice", caps=frozenset({"publish", "cancel"}))
    assert refused(reg, prompt("new", "interrupt"), only_own) == "UNAUTHORIZED"
    no_cancel = Sender("alice/x", "alice", caps=frozenset({"publish"}))
    reg2 = session(("a", ALICE))
    assert refused(reg2, prompt("new", "rollback"), no_cancel) == "UNAUTHORIZED"
    assert reg2.plan(prompt("new", "enqueue"), no_cancel, 1)[0].status == "queued"


def test_the_first_prompt_decides_whether_the_session_is_shared() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("a", thread_access="shared"), BOB)
    publish(reg, status("a", "active"), AGENT)
    [record] = reg.plan(prompt("b", "enqueue"), ALICE, 1)
    assert record.status == "queued"
    own = RunRegistry("s")
    publish(own, prompt("a"), BOB)
    publish(own, status("a", "active"), AGENT)
    # A later prompt cannot make the session shared.
    assert refused(own, prompt("b", "enqueue", thread_access="shared"), ALICE) == (
        "THREAD_ACCESS_DENIED"
    )


def test_a_suspended_run_is_not_going_on() -> None:
    reg = session(("a", ALICE))
    publish(reg, status("a", "suspended"), AGENT)
    assert reg.plan(prompt("b", "reject"), ALICE, 1)[0].status == "pending"
    assert reg.plan(prompt("c", "interrupt"), ALICE, 1)[0].interrupts == []


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_a_run_started_from_a_tool_call_of_the_run_going_on_is_never_held_back(
    strategy: str,
) -> None:
    reg = session(("a", ALICE))
    reg.slots = SlotBook(1)
    reg.slots.sync(reg.runs.values())
    [record] = reg.plan(prompt("child", strategy, parent_run_id="a"), ALICE, 1)
    assert (record.status, record.multitask, record.interrupts) == ("pending", "alongside", [])
    # Naming a Run that is not going on changes nothing.
    publish(reg, status("a", "complete"), AGENT)
    [other] = reg.plan(prompt("late", strategy, parent_run_id="a"), ALICE, 1)
    assert other.multitask == strategy


# --------------------------------------------------------- queued Runs ---


def test_enqueued_runs_take_turns_in_arrival_order() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("b", "enqueue"), ALICE)
    publish(reg, prompt("c", "enqueue"), ALICE_LAPTOP)
    assert reg.due() == []
    publish(reg, status("a", "complete"), AGENT)
    assert drain(reg) == [("b", "pending", "relay")]
    assert state(reg) == {"a": "complete", "b": "pending", "c": "queued"}
    publish(reg, status("b", "active"), AGENT)
    publish(reg, status("b", "error"), AGENT)
    assert drain(reg) == [("c", "pending", "relay")]


def test_an_enqueue_waits_behind_an_older_one_whose_turn_has_not_been_published() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("b", "enqueue"), ALICE)
    publish(reg, status("a", "complete"), AGENT)  # b's turn came, not published yet
    [record] = reg.plan(prompt("c", "enqueue"), ALICE, 1)
    assert record.status == "queued"


def test_interrupt_cancels_what_goes_on_then_starts_ahead_of_enqueued_runs() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("p", "alongside"), ALICE)  # pending: no agent started it
    publish(reg, prompt("q", "enqueue"), ALICE)
    publish(reg, prompt("i", "interrupt"), ALICE_LAPTOP)
    assert reg.get("i").interrupts == ["a", "p"]  # type: ignore[union-attr]
    assert drain(reg) == [("a", "cancel", "alice"), ("p", "cancelled", "alice")]
    assert reg.get("a").interrupted_by == "i"  # type: ignore[union-attr]
    assert drain(reg) == []  # owed once
    publish(reg, status("a", "cancelled"), AGENT)
    assert drain(reg) == [("i", "pending", "relay")]
    assert state(reg)["q"] == "queued"


def test_a_refused_interrupt_cancel_is_not_sent_again_and_the_run_waits() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("i", "interrupt"), ALICE)
    assert drain(reg) == [("a", "cancel", "alice")]
    cancel_id = relay_entry_id("i", "interrupt", "a")
    publish(reg, CancelDenied(id="d1", run_id="a", cancel_id=cancel_id), AGENT)
    assert reg.get("a").cancel_requested is False  # type: ignore[union-attr]
    assert drain(reg) == []
    publish(reg, status("a", "complete"), AGENT)
    assert drain(reg) == [("i", "pending", "relay")]


def test_an_interrupts_cancel_is_refused_once_its_interrupting_run_was_cancelled() -> None:
    """The relay worked out the cancel, then the user cancelled the interrupting prompt
    (on another node, say) before the cancel was stored: it is stale, and refused."""
    reg = session(("a", ALICE))
    publish(reg, prompt("i", "interrupt"), ALICE_LAPTOP)
    [(stale, asker)] = reg.due()
    publish(reg, cancel("i"), ALICE_LAPTOP)  # i is queued: its cancel is the relay's to apply
    with pytest.raises(RunwireError) as info:
        reg.plan(stale, asker, 1)
    assert info.value.code == "RUN_NOT_ACTIVE"
    assert info.value.details == {"run_id": "a", "interrupted_by": "i", "status": "queued"}
    assert drain(reg) == [("i", "cancelled", "relay")]
    with pytest.raises(RunwireError):
        reg.plan(stale, asker, 2)  # and after i ended, too
    assert reg.get("a").cancel_requested is False  # type: ignore[union-attr]
    assert state(reg) == {"a": "active", "i": "cancelled"}


def test_an_interrupts_end_of_a_run_no_agent_started_is_refused_once_it_was_taken_back() -> None:
    reg = RunRegistry("s")
    publish(reg, prompt("p"), ALICE)  # pending: no agent started it
    publish(reg, prompt("i", "interrupt"), ALICE_LAPTOP)
    [(stale, asker)] = reg.due()
    assert isinstance(stale, RunEntry) and stale.status == "cancelled"
    publish(reg, cancel("i"), ALICE_LAPTOP)
    with pytest.raises(RunwireError) as info:
        reg.plan(stale, asker, 1)
    assert info.value.code == "RUN_NOT_ACTIVE"
    assert drain(reg) == [("i", "cancelled", "relay")]
    assert state(reg) == {"p": "pending", "i": "cancelled"}


def test_the_relay_ends_a_queued_run_only_while_its_cancel_stands() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("b", "enqueue"), ALICE)
    with pytest.raises(RunwireError) as info:
        reg.plan(status("b", "cancelled"), RELAY, 1)
    assert info.value.code == "VALIDATION_ERROR"
    publish(reg, cancel("b"), ALICE)
    assert drain(reg) == [("b", "cancelled", "relay")]


def test_an_interrupts_cancel_stored_again_on_another_node_is_still_taken() -> None:
    """While the interrupting Run waits, its cancel is valid however often it is planned."""
    reg = session(("a", ALICE))
    publish(reg, prompt("i", "interrupt"), ALICE_LAPTOP)
    [(owed, asker)] = reg.due()
    assert reg.plan(owed, asker, 1)  # a second node plans the same cancel: allowed
    assert drain(reg) == [("a", "cancel", "alice")]


def test_a_queued_run_its_sender_cancels_stops_waiting() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("b", "enqueue"), ALICE)
    publish(reg, prompt("c", "enqueue"), ALICE)
    bob_own_only = Sender("bob/web", "bob", caps=frozenset({"cancel"}))
    assert refused(reg, cancel("b"), bob_own_only) == "UNAUTHORIZED"
    publish(reg, cancel("b"), ALICE_LAPTOP)
    assert drain(reg) == [("b", "cancelled", "relay")]
    publish(reg, status("a", "complete"), AGENT)
    assert drain(reg) == [("c", "pending", "relay")]


def test_only_the_relay_moves_a_queued_run_and_only_when_its_turn_came() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("b", "enqueue"), ALICE)
    assert refused(reg, status("b", "active"), AGENT) == "VALIDATION_ERROR"
    assert refused(reg, status("b", "cancelled"), AGENT) == "UNAUTHORIZED"
    assert refused(reg, status("b", "pending"), AGENT) == "UNAUTHORIZED"
    assert refused(reg, status("b", "pending"), RELAY) == "VALIDATION_ERROR"  # a goes on
    append = ResponseAppend(id="x", run_id="b", message_id="m", chunks=[{"type": "x"}])
    assert refused(reg, append, AGENT) == "VALIDATION_ERROR"
    # The relay ends only Runs nobody started; a started one gets a cancel entry.
    assert refused(reg, status("a", "cancelled"), RELAY) == "VALIDATION_ERROR"


def test_a_refused_cancel_clears_the_request_and_only_the_owner_refuses() -> None:
    reg = session(("a", ALICE))
    publish(reg, cancel("a"), ALICE)
    other = Sender("agent-2", "svc", "agent", frozenset({"agent"}))
    assert refused(reg, CancelDenied(id="d", run_id="a"), other) == "UNAUTHORIZED"
    [record] = publish(reg, CancelDenied(id="d", run_id="a", cancel_id="c-a-0"), AGENT)
    assert not record.cancel_requested and record.status == "active"
    assert publish(reg, cancel("a", 1), ALICE)[0].cancel_requested


# --------------------------------------------------------------- slots ---


def test_slots_are_shared_by_sessions_and_a_queued_run_holds_none() -> None:
    slots = SlotBook(2)
    one = RunRegistry("one", slots=slots)
    two = RunRegistry("two", slots=slots)
    publish(one, prompt("a"), ALICE)
    publish(two, prompt("b"), BOB)
    assert slots.in_use == 2 and not slots.free()
    [waiting] = publish(two, prompt("c", "alongside"), BOB)
    assert waiting.status == "queued" and slots.in_use == 2
    publish(one, status("a", "active"), AGENT)
    publish(one, status("a", "complete"), AGENT)
    assert slots.in_use == 1
    assert drain(two) == [("c", "pending", "relay")]
    assert slots.in_use == 2


def test_a_planned_run_holds_its_slot_until_applied_or_abandoned() -> None:
    slots = SlotBook(1)
    one = RunRegistry("one", slots=slots)
    two = RunRegistry("two", slots=slots)
    changes = one.plan(prompt("a"), ALICE, 1)  # the store is writing it
    assert two.plan(prompt("b"), BOB, 1)[0].status == "queued"
    one.abandon(changes)  # the write failed
    assert slots.free()
    assert two.plan(prompt("c"), BOB, 1)[0].status == "pending"


def test_reload_recounts_a_sessions_slots() -> None:
    slots = SlotBook(3)
    reg = RunRegistry("s", slots=slots)
    reg.plan(prompt("a"), ALICE, 1)
    reg.plan(prompt("b"), ALICE, 1)
    assert slots.in_use == 2
    reg.reload([RunRecord(session_id="s", run_id="a", agent="default", status="active")])
    assert slots.in_use == 1


def test_a_slot_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        SlotBook(0)


# ------------------------------------------------------------- records ---


def test_records_round_trip_and_ignore_unknown_keys() -> None:
    reg = session(("a", ALICE))
    publish(reg, prompt("i", "rollback", thread_access="shared"), ALICE)
    record = reg.get("i")
    assert record is not None
    data = record.to_dict()
    assert RunRecord.from_dict(data) == record
    assert RunRecord.from_dict({**data, "from_a_newer_relay": 1}) == record
    assert (record.seq, record.interrupts, record.thread_access) == (2, ["a"], "shared")
