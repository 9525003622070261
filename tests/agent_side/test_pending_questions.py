"""``pending_questions(result)``: the questions a paused Run waits on, from either side."""

from __future__ import annotations

import anyio
import pytest
from pydantic import BaseModel

import agent_side
import client_side
from agent_side import Agent, Run, RunPaused, ToolContext, tool
from transport.frames import Interrupt
from transport.messages import ToolCallPart

pytestmark = pytest.mark.anyio


class Target(BaseModel):
    name: str


@tool
async def ask(params: Target, ctx: ToolContext) -> str:
    """Asks which region."""
    return str(await ctx.interrupt(reason="pick", message=f"Where does {params.name} go?"))


@tool(requires_approval=True)
async def drop(params: Target) -> str:
    """Drops a table (asks first)."""
    return f"dropped {params.name}"


def test_it_leaves_approvals_out_unless_asked_and_takes_none() -> None:
    question = Interrupt(id="c1#0", kind="input", message="Where?")
    approval = Interrupt(id="c2", kind="approval", message="Run drop?")
    plan = Interrupt(id="r#0", kind="plan", message="This plan?")
    paused = RunPaused([question, approval, plan])
    assert agent_side.pending_questions(paused) == [question, plan]
    assert agent_side.pending_questions(paused, approvals=True) == [question, approval, plan]
    assert client_side.pending_questions([approval]) == []
    assert client_side.pending_questions(None) == []


async def test_both_sides_list_what_a_paused_run_waits_on(relay_url: str) -> None:
    agent = Agent(relay_url)
    on_the_agent: list[list[Interrupt]] = []
    agent_saw = anyio.Event()

    @agent.on_run
    async def handle(run: Run) -> None:
        calls = [
            ToolCallPart(tool_call_id="c1", tool_name="ask", input={"name": "api"}),
            ToolCallPart(tool_call_id="c2", tool_name="drop", input={"name": "users"}),
        ]
        try:
            await run.run_tools(calls, [ask, drop], parallel=True)
        except RunPaused as paused:
            on_the_agent.append(agent_side.pending_questions(paused))
            with anyio.fail_after(10):  # the agent's view folds its own pause
                while not run.interrupts:
                    await anyio.sleep(0.01)
            on_the_agent.append(agent_side.pending_questions(run, approvals=True))
            agent_saw.set()
            raise

    async with agent, client_side.connect(relay_url, "pq-1") as session:
        run = await session.send("deploy and clean up")
        with anyio.fail_after(10):
            result = await run.result()
            await agent_saw.wait()
        assert result.status == "suspended"
        assert [q.id for q in client_side.pending_questions(result)] == ["c1#0"]
        both = client_side.pending_questions(result, approvals=True)
        assert sorted(q.id for q in both) == ["c1#0", "c2"]
        assert [q.id for q in client_side.pending_questions(session.paused_run())] == ["c1#0"]
        assert [q.id for q in on_the_agent[0]] == ["c1#0"]
        assert sorted(q.id for q in on_the_agent[1]) == ["c1#0", "c2"]
        await session.resume(run.run_id, {"c1#0": "eu"})  # the approval is left out
        with anyio.fail_after(10):
            while [q.id for q in (await run.result()).interrupts] != ["c2"]:
                await session._wait_change()
        # The Run still waits, on an approval only: no question is pending.
        assert client_side.pending_questions(await run.result()) == []
