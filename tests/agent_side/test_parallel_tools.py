"""Parallel tool calls all start before a question pauses their step, and one pause asks all."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import client_side
from agent_side import Agent, Run, Tool, ToolContext, tool
from transport.messages import ToolResultPart, UIMessage

pytestmark = pytest.mark.anyio

ran: list[str] = []


class Target(BaseModel):
    name: str


class Pick(BaseModel):
    choice: str


@tool
async def ask_at_once(params: Target, ctx: ToolContext) -> str:
    """Asks before anything else, so before its first await."""
    question = f"Which {params.name}?"
    answer = await ctx.interrupt(reason="pick", message=question, response_schema=Pick)
    ran.append(f"ask_at_once:{params.name}")
    return f"{params.name}={answer.choice}"


@tool
async def act_then_ask(params: Target, ctx: ToolContext) -> str:
    """Does something, then asks."""
    ran.append(f"act:{params.name}")
    answer = await ctx.interrupt(reason="confirm", message=f"Keep {params.name}?")
    return f"{params.name} kept: {answer}"


@tool
async def just_act(params: Target) -> str:
    """Does something and asks nothing."""
    ran.append(f"just:{params.name}")
    return f"{params.name} done"


TOOLS: list[Tool] = [ask_at_once, act_then_ask, just_act]


def fake_model(calls: Sequence[tuple[str, str, dict[str, Any]]]) -> Any:
    async def stream(messages: list[UIMessage]) -> AsyncIterator[str | dict[str, Any]]:
        results = [p for m in messages for p in m.parts if isinstance(p, ToolResultPart)]
        if not results:
            for cid, name, args in calls:
                yield {
                    "type": "tool-input-available",
                    "toolCallId": cid,
                    "toolName": name,
                    "input": args,
                }
            return
        yield "; ".join(str(p.output) for p in results)

    return stream


def worker(url: str, calls: Sequence[tuple[str, str, dict[str, Any]]], **kw: Any) -> Agent:
    agent = Agent(url, durable=True)
    model = fake_model(calls)

    @agent.on_run
    async def handle(run: Run) -> None:
        await run.resume_tools(TOOLS)
        while run.has_input():
            result = await run.pipe(model(run.history()))
            await run.run_tools(result, TOOLS, **kw)

    return agent


async def finish(session: client_side.ClientSession, run: client_side.ClientRun) -> None:
    with anyio.fail_after(10):
        while run.status != "complete":
            await session._wait_change()


def final_text(session: client_side.ClientSession, run_id: str) -> str:
    texts = [
        vm.message.text()
        for vm in session.view.messages()
        if vm.run_id == run_id and vm.message.role == "assistant" and vm.message.text()
    ]
    return texts[-1]


async def test_every_parallel_call_starts_and_one_pause_carries_every_question(
    relay_url: str,
) -> None:
    ran.clear()
    calls = [
        ("p1", "ask_at_once", {"name": "region"}),
        ("p2", "act_then_ask", {"name": "cache"}),
        ("p3", "just_act", {"name": "logs"}),
    ]
    async with (
        worker(relay_url, calls, parallel=True),
        client_side.connect(relay_url, "par-1") as session,
    ):
        run = await session.send("go")
        with anyio.fail_after(10):
            paused = await run.result()
        assert paused.status == "suspended"
        assert sorted(q.id for q in paused.interrupts) == ["p1#0", "p2#0"]
        assert sorted(ran) == ["act:cache", "just:logs"]  # both started before the pause
        await session.resume(run.run_id, {"p1#0": {"choice": "eu"}, "p2#0": True})
        await finish(session, run)
        assert final_text(session, run.run_id) == "region=eu; cache kept: True; logs done"
        assert ran.count("just:logs") == 1  # a finished call keeps its result, never runs again


async def test_max_parallel_calls_waiting_for_a_slot_start_after_the_answers(
    relay_url: str,
) -> None:
    ran.clear()
    calls = [
        ("q1", "ask_at_once", {"name": "region"}),
        ("q2", "just_act", {"name": "logs"}),
        ("q3", "just_act", {"name": "late"}),
    ]
    agent = worker(relay_url, calls, parallel=True, max_parallel=2)
    async with agent, client_side.connect(relay_url, "par-2") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            paused = await run.result()
        assert [q.id for q in paused.interrupts] == ["q1#0"]
        assert ran == ["just:logs"]  # the two that run together started; the third waits
        await session.resume(run.run_id, {"q1#0": {"choice": "us"}})
        await finish(session, run)
        assert final_text(session, run.run_id) == "region=us; logs done; late done"


async def test_sequential_calls_still_stop_at_the_first_question(relay_url: str) -> None:
    ran.clear()
    calls = [("s1", "ask_at_once", {"name": "region"}), ("s2", "just_act", {"name": "logs"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "par-3") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            paused = await run.result()
        assert [q.id for q in paused.interrupts] == ["s1#0"]
        assert ran == []


@tool
async def hang(params: Target) -> str:
    """Waits for ever (only a timeout ends it)."""
    await anyio.Event().wait()
    return "never"


async def test_resume_options_override_what_the_checkpoint_kept(relay_url: str) -> None:
    ran.clear()
    calls = [(f"c{i}", "act_then_ask", {"name": f"n{i}"}) for i in range(1, 5)]
    overrides: dict[str, Any] = {}
    agent = Agent(relay_url, durable=True)
    model = fake_model(calls)

    @agent.on_run
    async def handle(run: Run) -> None:
        await run.resume_tools(TOOLS, **overrides)
        while run.has_input():
            result = await run.pipe(model(run.history()))
            await run.run_tools(result, TOOLS)  # one after another

    async with agent, client_side.connect(relay_url, "par-4") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            paused = await run.result()
        assert [q.id for q in paused.interrupts] == ["c1#0"]  # sequential: it stopped there
        # The resume sets parallel and max_parallel: c1 and c2 run together, c2 asks,
        # and c3 waits for a slot (it would have asked too with no max).
        overrides.update(parallel=True, max_parallel=2)
        await session.resume(run.run_id, {"c1#0": "yes"})
        with anyio.fail_after(10):
            while [q.id for q in (await run.result()).interrupts] in ([], ["c1#0"]):
                await session._wait_change()
        assert [q.id for q in (await run.result()).interrupts] == ["c2#0"]
        # This resume keeps parallel (now in the checkpoint) and lifts max_parallel.
        overrides.clear()
        overrides.update(max_parallel=4)
        await session.resume(run.run_id, {"c2#0": "yes"})
        with anyio.fail_after(10):
            while [q.id for q in (await run.result()).interrupts] in ([], ["c2#0"]):
                await session._wait_change()
        assert sorted(q.id for q in (await run.result()).interrupts) == ["c3#0", "c4#0"]
        overrides.clear()
        await session.resume(run.run_id, {"c3#0": "yes", "c4#0": "no"})
        await finish(session, run)
        assert final_text(session, run.run_id) == (
            "n1 kept: yes; n2 kept: yes; n3 kept: yes; n4 kept: no"
        )


async def test_a_resume_timeout_overrides_the_kept_one(relay_url: str) -> None:
    calls = [("t1", "ask_at_once", {"name": "region"}), ("t2", "hang", {"name": "x"})]
    overrides: dict[str, Any] = {}
    agent = Agent(relay_url, durable=True)
    model = fake_model(calls)
    tools = [*TOOLS, hang]

    @agent.on_run
    async def handle(run: Run) -> None:
        await run.resume_tools(tools, **overrides)
        while run.has_input():
            result = await run.pipe(model(run.history()))
            await run.run_tools(result, tools)  # no timeout: the checkpoint keeps none

    async with agent, client_side.connect(relay_url, "par-5") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            await run.result()
        overrides["timeout"] = 0.2
        await session.resume(run.run_id, {"t1#0": {"choice": "eu"}})
        await finish(session, run)
        assert final_text(session, run.run_id) == (
            "region=eu; {'code': 'TOOL_TIMEOUT', 'message': 'hang timed out after 0.2s'}"
        )


def only_prod(args: dict[str, Any]) -> str | bool:
    """An approval rule that says why it asks."""
    return f"{args['name']} is production" if args.get("name") == "prod" else False


def broken_rule(args: dict[str, Any]) -> bool:
    raise KeyError("oops")


@tool(requires_approval=only_prod)
async def wipe(params: Target) -> str:
    """Wipes a target."""
    return f"wiped {params.name}"


@tool(requires_approval=broken_rule)
async def purge(params: Target) -> str:
    """Purges a target."""
    return f"purged {params.name}"


@tool(requires_approval=True)
async def reboot(params: Target) -> str:
    """Reboots a target."""
    return f"rebooted {params.name}"


async def test_an_approval_carries_the_reason_the_rule_and_a_suggested_rule(
    relay_url: str,
) -> None:
    calls = [
        ("w1", "wipe", {"name": "prod"}),
        ("w2", "wipe", {"name": "dev"}),
        ("w3", "purge", {"name": "db"}),
        ("w4", "reboot", {"name": "box"}),
    ]
    agent = worker(relay_url, calls, parallel=True)
    tools = [wipe, purge, reboot]
    TOOLS.extend(tools)
    try:
        async with agent, client_side.connect(relay_url, "par-6") as session:
            run = await session.send("clean up")
            with anyio.fail_after(10):
                paused = await run.result()
            asked = {q.id: q for q in paused.interrupts}
            assert sorted(asked) == ["w1", "w3", "w4"]  # the dev wipe needs no approval
            assert all(q.kind == "approval" for q in asked.values())
            assert asked["w1"].details == {
                "arguments": {"name": "prod"},
                "reason": "prod is production",
                "rule": "only_prod",
                "suggested_rule": {"tool": "wipe", "decision": "approve", "scope": "run"},
            }
            details = asked["w3"].details or {}
            assert details["rule"] == "broken_rule"  # a rule that fails asks (fail closed)
            assert details["reason"] == "the approval rule of purge failed (KeyError)"
            details = asked["w4"].details or {}
            assert (details["rule"], details["reason"]) == (
                "always",
                "reboot always asks for approval",
            )
            answers = {
                "w1": {"approved": True},
                "w3": {"approved": False},
                "w4": {"approved": True},
            }
            await session.resume(run.run_id, answers)
            await finish(session, run)
            assert final_text(session, run.run_id).startswith("wiped prod; wiped dev; ")
    finally:
        del TOOLS[-len(tools) :]
