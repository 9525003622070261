"""ConversationTree: folding entries, branches, Runs, outcomes, and the shared JSON vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from transport._outcomes import OutcomeRecord
from transport._tree import (
    ConversationTree,
    DeliveryEvent,
    MessageEvent,
    RunEvent,
    RunInfo,
    TreeEvent,
    ViewMessage,
)
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import (
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    ErrorBody,
    MessageEntry,
    RefusedEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
)
from transport.messages import UIMessage, user_message

VECTORS = sorted((Path(__file__).parent.parent / "vectors" / "tree").glob("*.json"))

# ------------------------------------------------------------- helpers ---


def prompt(serial: int, mid: str, run_id: str, text: str = "q", **kw: Any) -> MessageEntry:
    return MessageEntry(
        serial=serial,
        id=f"e{serial}",
        run_id=run_id,
        intent="prompt",
        message=user_message(text, id=mid),
        client_id="c1",
        user_id="u1",
        **kw,
    )


def steer(serial: int, mid: str, run_id: str, intent: str = "steer", **kw: Any) -> MessageEntry:
    return MessageEntry(
        serial=serial,
        id=f"e{serial}",
        run_id=run_id,
        intent=intent,
        message=user_message(mid, id=mid),
        **kw,
    )


def run(serial: int, run_id: str, status: str) -> RunEntry:
    return RunEntry(serial=serial, id=f"e{serial}", run_id=run_id, status=status)


def open_(serial: int, run_id: str, mid: str, **kw: Any) -> ResponseOpen:
    return ResponseOpen(serial=serial, id=f"e{serial}", run_id=run_id, message_id=mid, **kw)


def text(serial: int, run_id: str, mid: str, delta: str) -> ResponseAppend:
    return ResponseAppend(
        serial=serial,
        id=f"e{serial}",
        run_id=run_id,
        message_id=mid,
        chunks=[{"type": "text-delta", "delta": delta}],
    )


def close(serial: int, run_id: str, mid: str, body: str) -> ResponseClose:
    message = UIMessage.model_validate(
        {"id": mid, "role": "assistant", "parts": [{"type": "text", "text": body}]}
    )
    return ResponseClose(
        serial=serial, id=f"e{serial}", run_id=run_id, message_id=mid, message=message
    )


def ids(tree: ConversationTree, tail: tuple[str, ...] = ()) -> list[str]:
    return [vm.message.id for vm in tree.messages(tail)]


def fold_all(tree: ConversationTree, entries: list[Any]) -> list[TreeEvent]:
    events: list[TreeEvent] = []
    for entry in entries:
        events.extend(tree.fold(entry))
    return events


# ------------------------------------------------------------- vectors ---


def _observed(tree: ConversationTree, expect: dict[str, Any]) -> dict[str, Any]:
    messages = []
    for exp, vm in zip(expect["messages"], tree.messages(), strict=False):
        got: dict[str, Any] = {
            "id": vm.message.id,
            "role": vm.message.role,
            "run_id": vm.run_id,
            "text": vm.message.text(),
            "parent_id": vm.parent_id,
        }
        if "parts" in exp:
            got["parts"] = [p.model_dump(mode="json") for p in vm.message.parts]
        if "metadata" in exp:
            got["metadata"] = vm.message.metadata
        messages.append(got)
    extra = len(tree.messages()) - len(expect["messages"])
    if extra > 0:
        messages.extend({"unexpected": vm.message.id} for vm in tree.messages()[-extra:])
    outcomes: dict[str, Any] = {}
    for mid, exp_outcome in expect["outcomes"].items():
        rec = tree.outcome(mid)
        outcomes[mid] = (
            None
            if rec is None
            else {
                "run_id": rec.run_id,
                "consumed": rec.consumed,
                "run_terminal_reason": rec.run_terminal_reason,
            }
        )
        if rec is not None and exp_outcome is not None and "refused" in exp_outcome:
            outcomes[mid]["refused"] = rec.refused["code"] if rec.refused else None
    runs = [
        {"run_id": r.run_id, "status": r.status, "end_reason": r.end_reason} for r in tree.runs()
    ]
    observed: dict[str, Any] = {"messages": messages, "runs": runs, "outcomes": outcomes}
    if "parents" in expect:  # where messages off the active branch were placed
        found = {mid: tree.message(mid) for mid in expect["parents"]}
        observed["parents"] = {mid: vm and vm.parent_id for mid, vm in found.items()}
    return observed


def _delivered(events: list[TreeEvent]) -> list[OutcomeRecord]:
    return [e.outcome for e in events if isinstance(e, DeliveryEvent)]


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector(path: Path) -> None:
    vector = json.loads(path.read_text())
    assert set(vector) >= {"name", "entries", "expect"}
    expect = vector["expect"]
    aimed = {
        e["message"]["id"]
        for e in vector["entries"]
        if e["kind"] == "message" and e.get("intent", "prompt") != "prompt"
    }
    assert aimed <= set(expect["outcomes"]), "a vector lists every aimed message's outcome"

    # As delivered, in the listed order.
    tree = ConversationTree()
    events = []
    message_events: list[list[Any]] = []
    for entry in vector["entries"]:
        got = tree.fold(entry)
        events.extend(got)
        message_events.extend(
            [entry["serial"], e.op, e.message.message.id, e.shown]
            for e in got
            if isinstance(e, MessageEvent)
        )
    assert _observed(tree, expect) == expect
    if "message_events" in vector:  # [serial folded, op, message id, shown]
        assert message_events == vector["message_events"]
    delivered = _delivered(events)
    assert len({r.message_id for r in delivered}) == len(delivered), "an outcome reported twice"
    resolved = {mid for mid, o in expect["outcomes"].items() if o is not None}
    assert {r.message_id for r in delivered} == resolved
    for record in delivered:
        assert tree.outcome(record.message_id) == record

    # All at once as one batch, newest first (the first delivery of each serial wins).
    first: dict[int, dict[str, Any]] = {}
    for entry in vector["entries"]:
        first.setdefault(entry["serial"], entry)
    again = ConversationTree()
    again.fold_older([first[serial] for serial in sorted(first, reverse=True)])
    assert _observed(again, expect) == expect


def test_there_are_enough_vectors() -> None:
    assert len(VECTORS) >= 10


# ------------------------------------------------------------ folding ---


def test_fold_returns_events_for_each_change() -> None:
    tree = ConversationTree()
    events = tree.fold(prompt(1, "m1", "r1", "hello"))
    assert [type(e) for e in events] == [RunEvent, MessageEvent]
    assert events[0].kind == "run" and events[1].kind == "message"
    run_event, message_event = events
    assert isinstance(run_event, RunEvent) and isinstance(message_event, MessageEvent)
    assert run_event.run == RunInfo("r1", "pending", "c1", "u1", None, None, "default")
    assert message_event.op == "added"
    assert message_event.message == ViewMessage(
        message=user_message("hello", id="m1"),
        run_id="r1",
        serial=1,
        parent_id=None,
        intent="prompt",
    )

    [started] = tree.fold(run(2, "r1", "active"))
    assert isinstance(started, RunEvent) and started.run.status == "active"

    [opened] = tree.fold(open_(3, "r1", "m2", metadata={"model": "x"}))
    assert isinstance(opened, MessageEvent) and opened.op == "added"
    assert opened.message.intent is None and opened.message.parent_id == "m1"
    assert opened.message.message.role == "assistant"
    assert opened.message.message.metadata == {"model": "x"}

    [grew] = tree.fold(text(4, "r1", "m2", "Hi"))
    assert isinstance(grew, MessageEvent) and grew.op == "updated"
    assert grew.message.message.text() == "Hi"
    assert grew.message.serial == 3, "a response's serial is its open's"

    # A chunk that changes nothing reports nothing.
    ignored = ResponseAppend(
        serial=5, id="e5", run_id="r1", message_id="m2", chunks=[{"type": "finish"}]
    )
    assert tree.fold(ignored) == []
    assert tree.fold(text(6, "r1", "nope", "x")) == []
    assert tree.fold(CancelEntry(serial=7, id="e7", run_id="r1")) == []
    assert tree.cancel_requested("r1")
    assert not tree.cancel_requested("r2")


def test_emitted_snapshots_do_not_change_later() -> None:
    tree = ConversationTree()
    fold_all(tree, [prompt(1, "m1", "r1"), open_(2, "r1", "m2")])
    [first] = tree.fold(text(3, "r1", "m2", "a"))
    tree.fold(text(4, "r1", "m2", "b"))
    assert isinstance(first, MessageEvent)
    assert first.message.message.text() == "a"
    assert tree.messages()[-1].message.text() == "ab"


def test_fold_accepts_dicts_and_validates_them() -> None:
    tree = ConversationTree()
    entry = prompt(1, "m1", "r1").model_dump(mode="json", exclude_none=True)
    assert tree.fold(entry)
    assert ids(tree) == ["m1"]
    with pytest.raises(RunwireError) as info:
        tree.fold({"kind": "message", "serial": 2, "id": "x"})
    assert info.value.code == VALIDATION_ERROR


def test_unstamped_entry_is_refused() -> None:
    tree = ConversationTree()
    with pytest.raises(RunwireError) as info:
        tree.fold(run(1, "r1", "active").model_copy(update={"serial": None}))
    assert info.value.code == VALIDATION_ERROR
    assert tree.newest_serial is None


def test_duplicates_are_ignored() -> None:
    tree = ConversationTree()
    fold_all(tree, [prompt(1, "m1", "r1"), open_(2, "r1", "m2"), text(3, "r1", "m2", "a")])
    before = tree.messages()
    assert tree.fold(text(3, "r1", "m2", "a")) == []
    assert tree.fold_older([prompt(1, "m1", "r1"), text(2, "r1", "m2", "zzz")]) == []
    assert tree.messages() == before


def test_serial_bounds() -> None:
    tree = ConversationTree()
    assert (tree.oldest_serial, tree.newest_serial) == (None, None)
    tree.fold(prompt(10, "m1", "r1"))
    tree.fold_older([run(3, "r0", "active")])
    assert (tree.oldest_serial, tree.newest_serial) == (3, 10)


def test_close_replaces_and_later_appends_are_ignored() -> None:
    tree = ConversationTree()
    fold_all(tree, [prompt(1, "m1", "r1"), open_(2, "r1", "m2"), text(3, "r1", "m2", "draft")])
    [closed] = tree.fold(close(4, "r1", "m2", "final"))
    assert isinstance(closed, MessageEvent) and closed.op == "updated"
    assert tree.fold(text(5, "r1", "m2", "late")) == []
    assert tree.messages()[-1].message.text() == "final"


def test_appends_never_touch_user_messages() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "m1", "r1", "mine"))
    assert tree.fold(text(2, "r1", "m1", "injected")) == []
    assert tree.fold(close(3, "r1", "m1", "replaced")) == []
    assert tree.messages()[0].message.text() == "mine"


# ------------------------------------------------------------- tail ---


def test_tail_moves_listed_messages_last_in_the_given_order() -> None:
    tree = ConversationTree()
    fold_all(
        tree,
        [
            prompt(1, "m1", "r1"),
            steer(2, "s1", "r1"),
            open_(3, "r1", "m2"),
            steer(4, "s2", "r1"),
        ],
    )
    assert ids(tree) == ["m1", "s1", "m2", "s2"]
    assert ids(tree, ("s2", "s1")) == ["m1", "m2", "s2", "s1"]
    assert ids(tree, ("s1", "absent", "s1")) == ["m1", "m2", "s2", "s1"]


# ------------------------------------------------------------ branches ---


def _forked() -> ConversationTree:
    tree = ConversationTree()
    fold_all(
        tree,
        [
            prompt(1, "m1", "r1"),
            open_(2, "r1", "m2"),
            prompt(3, "m3", "r2"),
            open_(4, "r2", "m4"),
            prompt(5, "m5", "r3", parent_id="m2"),
            open_(6, "r3", "m6"),
        ],
    )
    return tree


def test_branches_lists_siblings_in_serial_order() -> None:
    tree = _forked()
    assert ids(tree) == ["m1", "m2", "m5", "m6"]
    assert tree.branches("m3") == ["m3", "m5"]
    assert tree.branches("m5") == ["m3", "m5"]
    assert tree.branches("m1") == ["m1"]
    assert tree.branches("nope") == []


def test_select_branch_switches_the_active_path() -> None:
    tree = _forked()
    events = tree.select_branch("m3")
    assert ids(tree) == ["m1", "m2", "m3", "m4"]
    assert [(e.op, e.message.message.id) for e in events if isinstance(e, MessageEvent)] == [
        ("removed", "m5"),
        ("removed", "m6"),
        ("added", "m3"),
        ("added", "m4"),
    ]
    assert tree.select_branch("m3") == []
    assert tree.select_branch("nope") == []
    # selecting a deep message selects every step to it
    tree.select_branch("m6")
    assert ids(tree) == ["m1", "m2", "m5", "m6"]


def test_selection_does_not_change_parents_of_new_messages() -> None:
    tree = _forked()
    tree.select_branch("m4")
    [message_event] = [e for e in tree.fold(steer(7, "s1", "r3")) if isinstance(e, MessageEvent)]
    assert message_event.message.parent_id == "m6", "parents follow entries, not local choices"
    assert ids(tree) == ["m1", "m2", "m3", "m4"]


def test_a_new_fork_at_a_selected_node_becomes_active() -> None:
    tree = _forked()
    tree.select_branch("m3")
    tree.fold(prompt(7, "m7", "r4", parent_id="m2"))
    assert tree.branches("m7") == ["m3", "m5", "m7"]
    assert ids(tree) == ["m1", "m2", "m7"]


# ---------------------------------------------------------------- runs ---


def test_runs_status_steering_and_seen() -> None:
    tree = ConversationTree()
    fold_all(
        tree,
        [
            prompt(1, "m1", "r1", agent="planner"),
            run(2, "r1", "active"),
            steer(3, "s1", "r1"),
            steer(4, "f1", "r1", intent="follow_up"),
            steer(5, "s2", "r1"),
            open_(6, "r1", "m2", seen=["s1", "s2"]),
            open_(7, "r1", "m3", seen=["f1"]),
        ],
    )
    info = tree.run("r1")
    assert info is not None and info.agent == "planner" and info.status == "active"
    assert [vm.message.id for vm in tree.steering("r1")] == ["s1", "s2"]
    assert [vm.message.id for vm in tree.inputs("r1")] == ["s1", "f1", "s2"]
    assert tree.seen("r1") == {"s1", "s2", "f1"}
    assert tree.pending("r1") == ["s1", "f1", "s2"]
    assert tree.run("nope") is None and tree.steering("nope") == [] and tree.seen("nope") == set()

    error = {"code": "INTERNAL_ERROR", "message": "boom", "details": {}}
    events = tree.fold(RunEntry(serial=8, id="e8", run_id="r1", status="error", error=error))
    [run_event] = [e for e in events if isinstance(e, RunEvent)]
    assert run_event.run.status == "error" and run_event.run.end_reason == "error"
    assert run_event.run.error == error
    delivered = [e.outcome for e in events if isinstance(e, DeliveryEvent)]
    assert [(r.message_id, r.consumed, r.run_terminal_reason) for r in delivered] == [
        ("s1", True, "error"),
        ("f1", True, "error"),
        ("s2", True, "error"),
    ]
    assert tree.pending("r1") == []
    # a status change after the end changes nothing
    assert tree.fold(run(9, "r1", "active")) == []


def test_runs_are_listed_in_order_of_creation() -> None:
    tree = ConversationTree()
    fold_all(tree, [prompt(1, "m1", "b"), prompt(2, "m2", "a"), run(3, "c", "active")])
    assert [r.run_id for r in tree.runs()] == ["b", "a", "c"]
    assert tree.runs()[2] == RunInfo("c", "active", None, None, None, None, None)


# -------------------------------------------------------------- rebuild ---


def test_older_pages_report_only_differences() -> None:
    entries: list[Any] = [
        prompt(1, "m1", "r1"),
        run(2, "r1", "active"),
        steer(3, "s1", "r1"),
        open_(4, "r1", "m2", seen=["s1"]),
        text(5, "r1", "m2", "hi"),
        run(6, "r1", "complete"),
    ]
    tree = ConversationTree()
    newest = fold_all(tree, entries[3:])
    assert [vm.message.id for vm in tree.messages()] == ["m2"]
    assert _delivered(newest) == [], "s1 is not loaded yet"

    events = tree.fold_older(entries[:3])
    added = [
        e.message.message.id for e in events if isinstance(e, MessageEvent) and e.op == "added"
    ]
    updated = [
        e.message.message.id for e in events if isinstance(e, MessageEvent) and e.op == "updated"
    ]
    assert added == ["m1", "s1"]
    assert updated == ["m2"], "m2 gained a parent"
    [run_event] = [e for e in events if isinstance(e, RunEvent)]
    assert run_event.run.client_id == "c1", "the prompt filled in who started the Run"
    assert _delivered(events) == [OutcomeRecord("s1", "r1", True, "complete")]
    assert ids(tree) == ["m1", "s1", "m2"]

    # Rebuilding again reports nothing new, and never an outcome twice.
    assert tree.fold_older([]) == []
    again = tree.fold(CancelEntry(serial=0, id="e0", run_id="r0"))
    assert not _delivered(again)
    assert [r.run_id for r in tree.runs()] == ["r0", "r1"]


def test_single_older_entry_through_fold_rebuilds() -> None:
    tree = ConversationTree()
    fold_all(tree, [open_(5, "r1", "m2"), text(6, "r1", "m2", "x")])
    events = tree.fold(prompt(4, "m1", "r1"))
    assert ids(tree) == ["m1", "m2"]
    assert any(isinstance(e, MessageEvent) and e.op == "added" for e in events)


def test_outcome_reported_before_a_rebuild_is_not_reported_again() -> None:
    tree = ConversationTree()
    events = fold_all(tree, [steer(10, "s1", "r1"), run(11, "r1", "cancelled")])
    assert _delivered(events) == [OutcomeRecord("s1", "r1", False, "cancelled")]
    rebuilt = tree.fold_older([prompt(1, "m1", "r1"), run(2, "r1", "active")])
    assert _delivered(rebuilt) == []
    assert tree.outcome("s1") == OutcomeRecord("s1", "r1", False, "cancelled")


# ------------------------------------------------------------- exports ---


def test_exports() -> None:
    import transport._outcomes
    import transport._tree

    for module in (transport._tree, transport._outcomes):
        for name in module.__all__:
            assert hasattr(module, name), name
    for name in (
        "ConversationTree",
        "ViewMessage",
        "RunInfo",
        "OutcomeRecord",
        "MessageEvent",
        "RunEvent",
        "DeliveryEvent",
    ):
        assert name in transport.__all__
        assert getattr(transport, name) is getattr(transport._tree, name, None) or getattr(
            transport, name
        ) is getattr(transport._outcomes, name, None)


# ----------------------------------------------- refusals, steps, checkpoints ---


def test_a_refused_message_leaves_the_branch_but_stays_findable() -> None:
    tree = ConversationTree()
    fold_all(tree, [prompt(1, "m1", "r1"), run(2, "r1", "active"), steer(3, "m2", "r1")])
    events = tree.fold(
        RefusedEntry(
            serial=4,
            id="e4",
            run_id="r1",
            message_id="m2",
            error=ErrorBody(code="PII_DETECTED", message="personal data"),
            client_id="agent-1",
        )
    )
    assert ids(tree) == ["m1"]
    found = tree.message("m2")
    assert found is not None and found.refused
    # updated (refused), then removed: it left messages()
    assert [type(e).__name__ for e in events] == ["MessageEvent", "MessageEvent", "DeliveryEvent"]
    assert tree.inputs("r1") == [] and tree.steering("r1") == []
    (refusal,) = tree.refusals("r1")
    assert (refusal.message_id, refusal.serial, refusal.client_id) == ("m2", 4, "agent-1")
    assert refusal.error["code"] == "PII_DETECTED"
    outcome = tree.outcome("m2")
    assert outcome is not None and outcome.refused is not None and not outcome.consumed


def test_responses_checkpoints_and_prompt_of_a_run() -> None:
    tree = ConversationTree()
    fold_all(
        tree,
        [
            prompt(1, "m1", "r1"),
            run(2, "r1", "active"),
            steer(3, "m2", "r1"),
            open_(4, "r1", "a1", seen=["m2"]),
            close(5, "r1", "a1", "done"),
            open_(6, "r1", "a2"),
            CheckpointEntry(serial=7, id="e7", run_id="r1", step=1, seen=["m2"]),
        ],
    )
    prompt_vm = tree.prompt("r1")
    assert prompt_vm is not None and prompt_vm.message.id == "m1"
    states = tree.responses("r1")
    assert [(s.view.message.id, s.closed, s.seen) for s in states] == [
        ("a1", True, ("m2",)),
        ("a2", False, ()),
    ]
    checkpoint = tree.checkpoint("r1")
    assert checkpoint is not None and checkpoint.step == 1
    assert tree.checkpoint("nope") is None and tree.responses("nope") == []


def test_reopening_a_closed_response_changes_nothing() -> None:
    tree = ConversationTree()
    fold_all(
        tree,
        [prompt(1, "m1", "r1"), open_(2, "r1", "a1"), close(3, "r1", "a1", "final answer")],
    )
    assert tree.fold(open_(4, "r1", "a1")) == []
    assert [vm.message.text() for vm in tree.messages()] == ["q", "final answer"]


def test_a_refused_cancel_leaves_another_devices_cancel_standing() -> None:
    """Two devices cancel; the agent refuses one: the Run still has a cancel to answer."""
    tree = ConversationTree()
    fold_all(
        tree, [prompt(1, "m1", "r1"), RunEntry(serial=2, id="e2", run_id="r1", status="active")]
    )
    tree.fold(CancelEntry(serial=3, id="phone", run_id="r1"))
    tree.fold(CancelEntry(serial=4, id="laptop", run_id="r1"))
    tree.fold(CancelDenied(serial=5, id="d1", run_id="r1", cancel_id="phone"))
    assert tree.cancel_requested("r1"), "the laptop's cancel is unanswered"
    tree.fold(CancelDenied(serial=6, id="d2", run_id="r1", cancel_id="laptop"))
    assert not tree.cancel_requested("r1")
    tree.fold(CancelEntry(serial=7, id="again", run_id="r1"))
    tree.fold(CancelDenied(serial=8, id="d3", run_id="r1"))  # names none: refuses them all
    assert not tree.cancel_requested("r1")
    assert [d.cancel_id for d in tree.cancel_denials("r1")] == ["phone", "laptop", None]
