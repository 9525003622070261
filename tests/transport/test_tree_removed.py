"""A rebuild reports the messages it takes out of the conversation (``op="removed"``)."""

from __future__ import annotations

from transport.tree import ConversationTree, MessageEvent, RunEvent

from .test_tree import prompt, run, steer


def _ops(events: list[object]) -> list[tuple[str, str]]:
    return [(e.op, e.message.message.id) for e in events if isinstance(e, MessageEvent)]


def test_a_steer_shown_before_its_queued_prompt_loaded_is_removed_when_it_becomes_held() -> None:
    # Only the newest entry is loaded: a steer of a Run whose (queued) prompt is older.
    tree2 = ConversationTree()
    assert ("added", "s1") in _ops(tree2.fold(steer(3, "s1", "r1")))
    assert [vm.message.id for vm in tree2.messages()] == ["s1"]
    queued = prompt(2, "p1", "r1", multitask="enqueue", queued=True)
    events = tree2.fold_older([queued, prompt(1, "p0", "r0")])
    assert [vm.message.id for vm in tree2.messages()] == ["p0"]
    assert [vm.message.id for vm in tree2.waiting()] == ["p1"]
    ops = _ops(events)
    assert ("removed", "s1") in ops
    # added / updated first (serial order), then the removals, then the Runs.
    assert ops == [("added", "p0"), ("removed", "s1")]
    removed = next(e for e in events if isinstance(e, MessageEvent) and e.op == "removed")
    assert tree2.message("s1") == removed.message  # the held message, as the tree holds it now
    kinds = [e.kind for e in events]
    assert kinds.index("run") > max(i for i, k in enumerate(kinds) if k == "message")
    assert [e.run.run_id for e in events if isinstance(e, RunEvent)] == ["r0", "r1"]
    assert all(e.op == "changed" for e in events if isinstance(e, RunEvent))


def test_a_message_that_moves_off_the_active_branch_in_a_rebuild_is_removed() -> None:
    # s2 of r2 (its prompt not loaded) goes at the tip; the older page brings r2's prompt on
    # a branch a newer prompt forked beside: s2 follows its Run there and leaves messages().
    tree = ConversationTree()
    tree.fold(prompt(1, "p0", "r0"))
    tree.fold(prompt(4, "p3", "r3", parent_id="p0"))
    tree.fold(steer(5, "s2", "r2"))
    assert [vm.message.id for vm in tree.messages()] == ["p0", "p3", "s2"]
    events = tree.fold_older([prompt(2, "p2", "r2", parent_id="p0")])
    assert [vm.message.id for vm in tree.messages()] == ["p0", "p3"]
    assert tree.message("s2") is not None and tree.message("s2").parent_id == "p2"
    ops = _ops(events)
    assert ops[-1] == ("removed", "s2")
    assert ("updated", "s2") in ops  # its parent changed: reported as before
    assert ops.index(("updated", "s2")) < ops.index(("removed", "s2"))


def test_a_rebuild_that_changes_nothing_visible_removes_nothing() -> None:
    tree = ConversationTree()
    tree.fold(prompt(5, "p5", "r5"))
    events = tree.fold_older([prompt(1, "p1", "r1"), run(2, "r1", "complete")])
    assert not [op for op, _ in _ops(events) if op == "removed"]


def test_removed_since_lists_what_a_reset_takes_away_messages_then_runs() -> None:
    before = ConversationTree()
    before.fold(prompt(1, "p0", "r0"))
    before.fold(prompt(2, "p1", "r1", parent_id="p0"))
    after = ConversationTree()
    after.fold(prompt(7, "p7", "r7"))
    got = [
        ("message", e.op, e.message.message.id)
        if isinstance(e, MessageEvent)
        else ("run", e.op, e.run.run_id)
        for e in after.removed_since(before)
        if isinstance(e, MessageEvent | RunEvent)
    ]
    assert got == [
        ("message", "removed", "p0"),
        ("message", "removed", "p1"),
        ("run", "removed", "r0"),
        ("run", "removed", "r1"),
    ]
