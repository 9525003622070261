"""The seed's "History Repair" and durable Runs: an agent process killed with SIGKILL.

The worker is a real process (``crash_worker.py``) on a real relay; the test
kills it at a known point (it prints a marker) and looks at what the next
Run, or the worker that adopts a durable Run, reads.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

import agent_side
import client_side
import relay
from agent_side import Run
from transport import (
    ABORTED_BEFORE_DISPATCH,
    OUTCOME_UNKNOWN,
    ToolResultPart,
    UIMessage,
    message_text,
)

from .harness import ScriptedModel, start_worker_process, status, stored_entries, wait_until

pytestmark = pytest.mark.anyio


def tool_results(messages: list[UIMessage]) -> dict[str, Any]:
    return {
        p.tool_call_id: p.output for m in messages for p in m.parts if isinstance(p, ToolResultPart)
    }


async def test_a_crash_leaves_calls_the_next_run_reads_as_outcome_unknown() -> None:
    """Seed: “every tool call without a result gets one ... (OUTCOME_UNKNOWN) ... not rewritten.”"""
    model = ScriptedModel(["I cannot tell if it charged; let me check."])
    async with (
        agent_side_relay(grace=0.3) as server,
        client_side.connect(server.url, "crash") as session,
    ):
        proc, wait_line = await start_worker_process(server.url, "tools")
        try:
            run = await session.send("Book and pay")
            await wait_line("CHARGING")
            os.kill(proc.pid, signal.SIGKILL)
            result = await run.result()
        finally:
            proc.kill()
            proc.wait()
        # "A crash also loses the run itself: nothing goes on until the user writes again."
        assert result.status == "error"
        info = session.view.run(run.run_id)
        assert info is not None and info.error is not None and info.error["code"] == "AGENT_LOST"
        before = await stored_entries(server, "crash")
        worker = agent_side.Agent(server.url)

        @worker.on_run
        async def handle(r: Run) -> None:
            await agent_side.steering_loop(r, model)

        async with worker:
            again = await session.send("Did it go through?")
            await again.result()
        after = await stored_entries(server, "crash")
    read = tool_results(model.calls[0])
    assert read["c1"] == "found c1"  # it finished: its result is there
    assert read["c2"]["code"] == OUTCOME_UNKNOWN  # it was running
    assert read["c3"]["code"] == OUTCOME_UNKNOWN  # the crash hid whether it started
    assert read["c2"]["message"] == (
        "The run stopped before this tool call returned: outcome unknown, verify before retrying"
    )
    # The log itself is not rewritten: what the crash left is still there as it was.
    assert after[: len(before)] == before
    stored_results = [
        c.get("toolCallId")
        for e in after
        if e["kind"] == "response_append"
        for c in e["chunks"]
        if c["type"].startswith("tool-output")
    ]
    assert stored_results == ["c1"]


async def test_a_durable_run_is_adopted_by_another_worker_that_reads_the_repaired_history() -> None:
    """Seed:
    “Durable runs keep a checkpoint after every step, so another process continues the run.”
    """
    model = ScriptedModel(["Checked: the charge did not go through; booked without paying."])
    adopted: list[bool] = []
    async with (
        agent_side_relay(grace=0.3) as server,
        client_side.connect(server.url, "durable") as session,
    ):
        proc, wait_line = await start_worker_process(server.url, "tools", "--durable")
        try:
            run = await session.send("Book and pay")
            await wait_line("CHARGING")  # it has the Run, and is in the second call
            worker = agent_side.Agent(server.url, durable=True)

            @worker.on_run
            async def handle(r: Run) -> None:
                adopted.append(r.adopted)
                await agent_side.steering_loop(r, model)

            async with worker:
                os.kill(proc.pid, signal.SIGKILL)
                result = await run.result()
        finally:
            proc.kill()
            proc.wait()
        assert result.status == "complete"
        assert adopted == [True]
        read = tool_results(model.calls[0])
        assert read["c1"] == "found c1"
        assert read["c2"]["code"] == OUTCOME_UNKNOWN  # it was running
        # The calls ran one after another: c3 was queued behind c2 and never started.
        assert read["c3"]["code"] == ABORTED_BEFORE_DISPATCH
        stored = await stored_entries(server, "durable")
        stored_results = [
            (c.get("toolCallId"), c.get("errorCode"))
            for e in stored
            if e["kind"] == "response_append"
            for c in e["chunks"]
            if c["type"].startswith("tool-output")
        ]
        assert stored_results == [("c1", None), ("c3", ABORTED_BEFORE_DISPATCH)]
        checkpoints = [e["step"] for e in stored if e["kind"] == "checkpoint"]
        assert checkpoints == [1, 2, 3]  # model call, tool step (closed by the adopter), answer
        pending = [e for e in stored if e["kind"] == "run" and e["status"] == "pending"]
        assert [e["client_id"] for e in pending] == ["relay"]
        replies = [message_text(vm.message) for vm in session.view.messages()]
        assert replies[-1] == "Checked: the charge did not go through; booked without paying."


async def test_a_step_retried_after_a_crash_replaces_its_half_published_output() -> None:
    """Stable step ids: the adopter's reply replaces the dead worker's partial one."""
    model = ScriptedModel(["a whole new answer"])
    async with (
        agent_side_relay(grace=0.3) as server,
        client_side.connect(server.url, "retry") as session,
    ):
        proc, wait_line = await start_worker_process(server.url, "stream", "--durable")
        try:
            run = await session.send("Tell me a story")
            await wait_line("STREAMING")
            await wait_until(lambda: any("old-" in t for t in replies(session)))
            worker = agent_side.Agent(server.url, durable=True)

            @worker.on_run
            async def handle(r: Run) -> None:
                await agent_side.steering_loop(r, model)

            async with worker:
                os.kill(proc.pid, signal.SIGKILL)
                result = await run.result()
        finally:
            proc.kill()
            proc.wait()
        assert result.status == "complete"
        assistant = [vm for vm in session.view.messages() if vm.message.role == "assistant"]
        assert [message_text(vm.message) for vm in assistant] == ["a whole new answer"]
        assert assistant[0].message.id == f"{run.run_id}.s1"
        # The model was not shown the half answer as if it were said.
        assert [m.role for m in model.calls[0]] == ["user"]
        async with client_side.connect(server.url, "retry") as late:  # a late joiner agrees
            assert [message_text(vm.message) for vm in late.view.messages()] == [
                "Tell me a story",
                "a whole new answer",
            ]
            assert status(late, run.run_id) == "complete"


def agent_side_relay(grace: float) -> Any:
    return relay.serve(port=0, store="memory://", agent_grace=grace)


def replies(session: client_side.ClientSession) -> list[str]:
    return [message_text(vm.message) for vm in session.view.messages()]
