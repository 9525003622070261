"""Every change of ``messages()`` is reported: ``op="removed"`` for what leaves it, ``added`` for
what joins it (rebuilds, resets, live forks and rollbacks, refusals, ``select_branch``), and
``MessageEvent.shown`` for whether each event's message is in it."""

from __future__ import annotations

from transport._tree import ConversationTree, MessageEvent, RunEvent
from transport.frames import ErrorBody, RefusedEntry

from .test_tree import open_, prompt, run, steer, text


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


# -------------------------------------------- every change of the visible path --
#
# A UI that follows events keeps, by message id, what it shows: it upserts on "added" /
# "updated" of a message the event says is shown, and drops it otherwise ("removed", or an
# event about a message off the active branch). After each call it shows ``messages()``.


def _shown_ops(events: list[object]) -> list[tuple[str, str, bool]]:
    return [(e.op, e.message.message.id, e.shown) for e in events if isinstance(e, MessageEvent)]


def _forked() -> ConversationTree:
    tree = ConversationTree()
    for entry in [
        prompt(1, "m1", "r1"),
        open_(2, "r1", "m2"),
        prompt(3, "m3", "r2"),
        open_(4, "r2", "m4"),
        prompt(5, "m5", "r3", parent_id="m2"),
        open_(6, "r3", "m6"),
    ]:
        tree.fold(entry)
    assert [vm.message.id for vm in tree.messages()] == ["m1", "m2", "m5", "m6"]
    return tree


def test_select_branch_removes_what_leaves_the_path_then_adds_what_joins_it() -> None:
    tree = _forked()
    events = tree.select_branch("m3")
    assert [vm.message.id for vm in tree.messages()] == ["m1", "m2", "m3", "m4"]
    assert _shown_ops(events) == [
        ("removed", "m5", False),
        ("removed", "m6", False),
        ("added", "m3", True),
        ("added", "m4", True),
    ]
    added = [e for e in events if isinstance(e, MessageEvent) and e.op == "added"]
    assert [e.message for e in added] == tree.messages()[2:]
    assert tree.select_branch("m4") == []  # already shown: nothing changes
    assert _shown_ops(tree.select_branch("m6")) == [
        ("removed", "m3", False),
        ("removed", "m4", False),
        ("added", "m5", True),
        ("added", "m6", True),
    ]


def test_a_fork_above_the_tip_from_another_device_removes_the_turn_it_leaves() -> None:
    tree = _forked()
    events = tree.fold(prompt(7, "m7", "r4", parent_id="m1"))
    assert [vm.message.id for vm in tree.messages()] == ["m1", "m7"]
    assert [e.kind for e in events] == ["run", "message", "message", "message", "message"]
    assert _shown_ops(events) == [
        ("added", "m7", True),
        ("removed", "m2", False),
        ("removed", "m5", False),
        ("removed", "m6", False),
    ]
    # The Run left behind goes on streaming on its own branch: not shown, so a UI that
    # follows events does not bring its response back.
    assert _shown_ops(tree.fold(text(8, "r3", "m6", "more"))) == [("updated", "m6", False)]
    assert _shown_ops(tree.fold(steer(9, "s1", "r3"))) == [("added", "s1", False)]
    assert [vm.message.id for vm in tree.messages()] == ["m1", "m7"]


def test_a_new_fork_at_a_selected_node_removes_the_selected_branch() -> None:
    tree = _forked()
    tree.select_branch("m3")
    events = tree.fold(prompt(7, "m7", "r4", parent_id="m2"))
    assert _shown_ops(events) == [
        ("added", "m7", True),
        ("removed", "m3", False),
        ("removed", "m4", False),
    ]


def test_growth_of_a_branch_not_shown_is_reported_as_not_shown() -> None:
    tree = _forked()
    events = tree.fold(prompt(7, "m7", "r4", parent_id="m4"))  # continues m3's branch
    assert _shown_ops(events) == [("added", "m7", False)]
    assert [vm.message.id for vm in tree.messages()] == ["m1", "m2", "m5", "m6"]


def test_a_rollback_at_its_turn_removes_the_interrupted_turn() -> None:
    tree = ConversationTree()
    for entry in [
        prompt(1, "m1", "r1"),
        run(2, "r1", "active"),
        open_(3, "r1", "m2"),
        text(4, "r1", "m2", "Lisbon"),
        prompt(5, "m3", "r2", multitask="rollback", queued=True, interrupts=["r1"]),
        run(6, "r1", "cancelled"),
    ]:
        tree.fold(entry)
    assert [vm.message.id for vm in tree.messages()] == ["m1", "m2"]
    events = tree.fold(run(7, "r2", "pending"))
    assert [vm.message.id for vm in tree.messages()] == ["m3"]
    assert _shown_ops(events) == [
        ("added", "m3", True),
        ("removed", "m1", False),
        ("removed", "m2", False),
    ]


def test_a_refused_message_is_removed_after_its_update() -> None:
    tree = ConversationTree()
    tree.fold(prompt(1, "m1", "r1"))
    tree.fold(run(2, "r1", "active"))
    tree.fold(steer(3, "s1", "r1"))
    events = tree.fold(
        RefusedEntry(
            serial=4,
            id="e4",
            run_id="r1",
            message_id="s1",
            error=ErrorBody(code="PII_DETECTED", message="no"),
        )
    )
    assert [e.kind for e in events] == ["message", "message", "delivery"]
    assert _shown_ops(events) == [("updated", "s1", False), ("removed", "s1", False)]


def test_shown_says_whether_an_event_message_is_in_messages() -> None:
    tree = ConversationTree()
    events = tree.fold(prompt(1, "m1", "r1"))
    assert _shown_ops(events) == [("added", "m1", True)]
    assert MessageEvent(tree.messages()[0], "added").shown  # the default: shown


def test_a_rebuild_that_moves_the_selected_message_away_adds_the_sibling_now_shown() -> None:
    # C1 named a parent not loaded yet, so it went under A; the user selected it over C2.
    tree = ConversationTree()
    tree.fold(prompt(3, "A", "rA", parent_id="B"))
    tree.fold(prompt(4, "C1", "r1", parent_id="Y"))
    tree.fold(prompt(5, "C2", "r2", parent_id="A"))
    tree.select_branch("C1")
    assert [vm.message.id for vm in tree.messages()] == ["A", "C1"]
    # The older page: C1 belongs under Y, beside A's branch. C2 comes into view unchanged.
    events = tree.fold_older([prompt(1, "B", "rB"), prompt(2, "Y", "rY", parent_id="B")])
    assert [vm.message.id for vm in tree.messages()] == ["B", "A", "C2"]
    assert _shown_ops(events) == [
        ("added", "B", True),
        ("added", "Y", False),
        ("updated", "A", True),
        ("updated", "C1", False),
        ("removed", "C1", False),
        ("added", "C2", True),
    ]
