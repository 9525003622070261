"""RunRegistry: a Run on a branch that leaves the active leaf (``activate: false``) counts for
no multitask strategy."""

from __future__ import annotations

from typing import Any

import pytest

from transport._runs import RunRegistry
from transport.errors import RunwireError

from .test_runs import AGENT, ALICE, BOB, drain, prompt, publish, refused, session, state, status


def off(run_id: str, multitask: str | None = None, **kw: Any) -> Any:
    return prompt(run_id, multitask, parent_id="m-x", activate=False, **kw)


def test_an_off_thread_run_goes_alongside_whatever_its_strategy() -> None:
    reg = session(("a", ALICE))
    [record] = publish(reg, off("b", "enqueue"), ALICE)
    assert record.status == "pending" and record.multitask == "alongside" and record.off_thread
    publish(reg, off("c", "interrupt"), ALICE)
    assert state(reg) == {"a": "active", "b": "pending", "c": "pending"}
    assert drain(reg) == []  # nothing is cancelled for it


def test_later_prompts_do_not_count_an_off_thread_run() -> None:
    reg = RunRegistry("s")
    publish(reg, off("b"), ALICE)
    publish(reg, status("b", "active"), AGENT)
    publish(reg, prompt("r", "reject"), ALICE)  # not THREAD_BUSY: b does not count
    assert refused(reg, prompt("r2", "reject"), ALICE) == "THREAD_BUSY"  # r does
    publish(reg, status("r", "active"), AGENT)
    publish(reg, status("r", "complete"), AGENT)
    [queued] = publish(reg, prompt("q", "enqueue"), ALICE)
    assert queued.status == "pending"  # does not wait behind b
    [interrupting] = publish(reg, prompt("i", "interrupt"), ALICE)
    assert interrupting.interrupts == ["q"]  # b is not interrupted
    # Another user's off-thread Run is not the session's either: no THREAD_ACCESS_DENIED.
    publish(reg, off("bob", "alongside"), BOB)
    with pytest.raises(RunwireError) as info:
        reg.plan(prompt("x", "reject"), ALICE, 1)
    assert info.value.code == "THREAD_BUSY" and info.value.details["run_ids"] == ["q"]


def test_every_node_replays_an_off_thread_prompt_alike() -> None:
    reg = session(("a", ALICE))
    other = RunRegistry("s")
    for record in reg.runs.values():
        other.runs[record.run_id] = record
    entry = off("b", "reject")
    changes = reg.plan(entry, ALICE, 5)
    stored = reg.stamp(entry, ALICE, 5, changes)
    reg.apply(changes)
    other.replay(stored)
    assert other.get("b") is not None and other.get("b").off_thread  # type: ignore[union-attr]
    assert other.get("b").status == "pending"  # type: ignore[union-attr]
