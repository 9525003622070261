"""ConversationTree and multitasking: queued prompts join at their turn, rollback branches,
refused cancels."""

from __future__ import annotations

from typing import Any

from transport._tree import ConversationTree, MessageEvent, RunEvent
from transport.frames import (
    CancelDenied,
    CancelEntry,
    MessageEntry,
    ResponseAppend,
    ResponseOpen,
    RunEntry,
)
from transport.messages import user_message


def prompt(serial: int, mid: str, run_id: str, **kw: Any) -> MessageEntry:
    return MessageEntry(
        serial=serial,
        id=f"e{serial}",
        run_id=run_id,
        intent="prompt",
        message=user_message(mid, id=mid),
        client_id="c1",
        user_id="u1",
        **kw,
    )


def run(serial: int, run_id: str, status: str) -> RunEntry:
    return RunEntry(serial=serial, id=f"e{serial}", run_id=run_id, status=status)  # type: ignore[arg-type]


def answer(serial: int, run_id: str, mid: str, text: str) -> list[Any]:
    return [
        ResponseOpen(serial=serial, id=f"e{serial}", run_id=run_id, message_id=mid),
        ResponseAppend(
            serial=serial + 1,
            id=f"e{serial + 1}",
            run_id=run_id,
            message_id=mid,
            chunks=[{"type": "text-delta", "delta": text}],
        ),
    ]


def path(tree: ConversationTree) -> list[tuple[str, str | None]]:
    return [(vm.message.id, vm.parent_id) for vm in tree.messages()]


def test_a_queued_prompt_waits_outside_the_conversation_and_joins_at_its_turn() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p1", "r1"))
    tree.fold(run(2, "r1", "active"))
    tree.fold_older(answer(3, "r1", "a1", "first "))
    events = tree.fold(prompt(5, "p2", "r2", multitask="enqueue", queued=True, parent_id="p1"))
    assert [type(e) for e in events] == [RunEvent]
    assert tree.run("r2").status == "queued"  # type: ignore[union-attr]
    assert [vm.message.id for vm in tree.waiting()] == ["p2"]
    assert tree.message("p2") is not None  # a sender retrying can still find it
    tree.fold_older(answer(6, "r1", "a1b", "answer"))  # r1 keeps streaming below a1
    tree.fold(run(8, "r1", "complete"))
    assert path(tree) == [("p1", None), ("a1", "p1"), ("a1b", "a1")]
    events = tree.fold(run(9, "r2", "pending"))
    assert [type(e) for e in events] == [RunEvent, MessageEvent, MessageEvent, MessageEvent]
    # It joins beside r1's answer, which leaves the view.
    assert [(e.op, e.message.message.id) for e in events if isinstance(e, MessageEvent)] == [
        ("added", "p2"),
        ("removed", "a1"),
        ("removed", "a1b"),
    ]
    # Its explicit parent is honoured when the tree holds it; here: p1 (a branch of its own).
    assert tree.message("p2").parent_id == "p1"  # type: ignore[union-attr]
    assert tree.waiting() == []


def test_a_queued_prompt_without_a_parent_goes_after_what_came_before_its_turn() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p1", "r1"))
    tree.fold(prompt(2, "p2", "r2", multitask="interrupt", queued=True, interrupts=["r1"]))
    tree.fold(CancelEntry(serial=3, id="e3", run_id="r1", interrupted_by="r2"))
    tree.fold_older(answer(4, "r1", "a1", "partial"))
    tree.fold(run(6, "r1", "cancelled"))
    tree.fold(run(7, "r2", "pending"))
    tree.fold_older(answer(8, "r2", "a2", "fresh"))
    assert path(tree) == [("p1", None), ("a1", "p1"), ("p2", "a1"), ("a2", "p2")]
    assert [vm.serial for vm in tree.messages()] == [1, 4, 2, 8]


def test_a_queued_run_that_ends_never_adds_its_prompt() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p1", "r1"))
    tree.fold(prompt(2, "p2", "r2", multitask="enqueue", queued=True))
    tree.fold(CancelEntry(serial=3, id="e3", run_id="r2"))
    tree.fold(run(4, "r2", "cancelled"))
    assert path(tree) == [("p1", None)]
    assert tree.waiting() == []
    assert tree.run("r2").end_reason == "cancelled"  # type: ignore[union-attr]


def test_rollback_puts_the_interrupted_turn_on_its_own_branch() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p0", "r0"))
    tree.fold_older(answer(2, "r0", "a0", "hello"))
    tree.fold(run(4, "r0", "complete"))
    tree.fold(prompt(5, "p1", "r1", parent_id="a0"))
    tree.fold_older(answer(6, "r1", "a1", "Lisbon is"))
    tree.fold(prompt(8, "p2", "r2", multitask="rollback", queued=True, interrupts=["r1"]))
    tree.fold(run(9, "r1", "cancelled"))
    tree.fold(run(10, "r2", "pending"))
    assert path(tree) == [("p0", None), ("a0", "p0"), ("p2", "a0")]
    assert tree.branches("p2") == ["p1", "p2"]
    tree.select_branch("a1")
    assert [vm.message.id for vm in tree.messages()] == ["p0", "a0", "p1", "a1"]


def test_rollback_of_the_first_turn_starts_a_new_root() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p1", "r1"))
    tree.fold(prompt(2, "p2", "r2", multitask="rollback", queued=True, interrupts=["r1"]))
    tree.fold(run(3, "r1", "cancelled"))
    tree.fold(run(4, "r2", "pending"))
    assert path(tree) == [("p2", None)]
    assert tree.branches("p1") == ["p1", "p2"]


def test_a_rollback_that_names_its_own_branch_keeps_it() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p1", "r1"))
    tree.fold_older(answer(2, "r1", "a1", "x"))
    tree.fold(
        prompt(4, "p2", "r2", multitask="rollback", queued=True, interrupts=["r1"], parent_id="a1")
    )
    tree.fold(run(5, "r1", "cancelled"))
    tree.fold(run(6, "r2", "pending"))
    assert path(tree) == [("p1", None), ("a1", "p1"), ("p2", "a1")]


def test_a_refused_cancel_clears_the_request_and_is_kept() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "p1", "r1"))
    tree.fold(run(2, "r1", "active"))
    tree.fold(CancelEntry(serial=3, id="c1", run_id="r1", user_id="u2", client_id="d2"))
    assert tree.cancel_requested("r1")
    tree.fold(CancelDenied(serial=4, id="e4", run_id="r1", cancel_id="c1", client_id="agent"))
    assert not tree.cancel_requested("r1")
    denial = tree.cancel_denial("c1")
    assert denial is not None and (denial.run_id, denial.client_id) == ("r1", "agent")
    assert tree.cancel_denials("r1") == [denial]
    assert tree.cancel_denial("other") is None
    assert tree.run("r1").status == "active"  # type: ignore[union-attr]


def test_history_in_any_order_gives_the_same_branches() -> None:
    entries = [
        prompt(1, "p1", "r1"),
        *answer(2, "r1", "a1", "one"),
        prompt(4, "p2", "r2", multitask="rollback", queued=True, interrupts=["r1"]),
        run(5, "r1", "cancelled"),
        run(6, "r2", "pending"),
        *answer(7, "r2", "a2", "two"),
    ]
    live = ConversationTree()
    for entry in entries:
        live.fold(entry)
    paged = ConversationTree()
    paged.fold_older(entries[4:])
    paged.fold_older(entries[:4])
    assert path(paged) == path(live) == [("p2", None), ("a2", "p2")]
