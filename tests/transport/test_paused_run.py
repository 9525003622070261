"""``paused_run``: the oldest Run of a tree that waits on questions, as both SDKs report it."""

from __future__ import annotations

from typing import Any

from transport.interrupts import PausedRun, paused_run
from transport.tree import ConversationTree


def entry(serial: int, **fields: Any) -> dict[str, Any]:
    return {"serial": serial, "id": f"e{serial}", "client_id": "c", **fields}


def pause(tree: ConversationTree, serial: int, run_id: str, question: str) -> None:
    asked = [{"id": question, "kind": "approval", "message": "ok?"}]
    tree.fold(entry(serial, kind="interrupt", run_id=run_id, status="paused", interrupts=asked))
    tree.fold(entry(serial + 1, kind="run", run_id=run_id, status="suspended"))


def start(tree: ConversationTree, serial: int, run_id: str) -> None:
    tree.fold(entry(serial, kind="run", run_id=run_id, status="pending"))
    tree.fold(entry(serial + 1, kind="run", run_id=run_id, status="active"))


def test_no_run_waits_on_questions() -> None:
    tree = ConversationTree()
    assert paused_run(tree) is None
    start(tree, 1, "r1")
    assert paused_run(tree) is None


def test_the_oldest_paused_run_comes_with_its_open_questions() -> None:
    tree = ConversationTree()
    start(tree, 1, "r1")
    start(tree, 3, "r2")
    pause(tree, 5, "r2", "q2")
    pause(tree, 7, "r1", "q1")
    found = paused_run(tree)
    assert isinstance(found, PausedRun)
    assert found.run_id == "r1"
    assert [q.id for q in found.interrupts] == ["q1"]


def test_a_declined_pause_no_longer_counts() -> None:
    tree = ConversationTree()
    start(tree, 1, "r1")
    pause(tree, 3, "r1", "q1")
    tree.fold(entry(5, kind="interrupt", run_id="r1", status="declined"))
    assert paused_run(tree) is None
