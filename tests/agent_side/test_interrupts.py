"""Interrupts end to end over loopback WebSockets: a tool asks, the Run pauses, a device answers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import anyio
import pytest
from pydantic import BaseModel, field_validator

import client_side
import relay
from agent_side import Agent, Run, Tool, ToolContext, tool
from transport.errors import RunwireError
from transport.messages import ToolResultPart, UIMessage

pytestmark = pytest.mark.anyio


class Service(BaseModel):
    service: str


class Region(BaseModel):
    region: Literal["eu", "us"]


ran: list[str] = []


@tool
async def deploy(params: Service, ctx: ToolContext) -> str:
    """Deploys a service."""
    ran.append(f"deploy:{params.service}")
    answer = await ctx.interrupt(
        reason="pick_region",
        message=f"Where should {params.service} go?",
        response_schema=Region,
    )
    return f"{params.service} deployed to {answer.region}"


@tool
async def notify(params: Service) -> str:
    """Tells the team."""
    ran.append(f"notify:{params.service}")
    return f"told the team about {params.service}"


@tool(requires_approval=lambda args: args.get("service") == "prod")
async def delete(params: Service) -> str:
    """Deletes a service (asks first for prod)."""
    return f"deleted {params.service}"


def model(calls: Sequence[tuple[str, str, dict[str, Any]]]) -> Any:
    """A fake model: the first call asks for ``calls``, the next one says what came back."""

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
    tools: list[Tool] = [deploy, notify, delete]
    fake = model(calls)

    @agent.on_run
    async def handle(run: Run) -> None:
        await run.resume_tools(tools)
        while run.has_input():
            result = await run.pipe(fake(run.history()))
            await run.run_tools(result, tools, **kw)

    return agent


def final_text(session: client_side.ClientSession, run_id: str) -> str:
    texts = [
        vm.message.text()
        for vm in session.view.messages()
        if vm.run_id == run_id and vm.message.role == "assistant" and vm.message.text()
    ]
    return texts[-1] if texts else ""


async def test_a_tool_asks_the_run_pauses_and_an_answer_finishes_it(relay_url: str) -> None:
    ran.clear()
    calls = [("call_1", "deploy", {"service": "api"}), ("call_2", "notify", {"service": "api"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-1") as session:
        run = await session.send("Deploy the api")
        with anyio.fail_after(10):
            paused = await run.result()
        assert paused.status == "suspended"
        [question] = paused.interrupts
        assert question.id == "call_1#0" and question.kind == "input"
        assert question.reason == "pick_region" and question.tool_name == "deploy"
        assert question.response_schema is not None
        assert ran == ["deploy:api"]  # the call after the question did not run
        waiting = session.paused_run()
        assert waiting is not None and waiting.run_id == run.run_id

        with pytest.raises(RunwireError) as info:
            await session.resume(run.run_id, {"call_1#0": {"region": "mars"}})
        assert info.value.code == "INTERRUPT_ANSWER_INVALID"
        assert info.value.details["interrupt_id"] == "call_1#0"
        with pytest.raises(RunwireError) as info:
            await session.resume(run.run_id, {"call_9#0": {"region": "eu"}})
        assert info.value.code == "VALIDATION_ERROR"
        assert run.status == "suspended"

        await session.resume(run.run_id, {"call_1#0": {"region": "eu"}})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "api deployed to eu; told the team about api"
        assert ran == ["deploy:api", "deploy:api", "notify:api"]
        assert session.paused_run() is None


async def test_parallel_calls_beside_the_question_finish_and_keep_their_results(
    relay_url: str,
) -> None:
    ran.clear()
    calls = [("c1", "notify", {"service": "a"}), ("c2", "deploy", {"service": "b"})]
    agent = worker(relay_url, calls, parallel=True)
    async with agent, client_side.connect(relay_url, "int-2") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            paused = await run.result()
        assert [q.id for q in paused.interrupts] == ["c2#0"]
        await session.resume(run.run_id, {"c2#0": {"region": "us"}})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "told the team about a; b deployed to us"
        assert ran.count("notify:a") == 1


async def test_approval_runs_with_updated_arguments(relay_url: str) -> None:
    calls = [("d1", "delete", {"service": "prod"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-3") as session:
        run = await session.send("clean up")
        with anyio.fail_after(10):
            paused = await run.result()
        [question] = paused.interrupts
        assert (question.id, question.kind) == ("d1", "approval")
        answer = {"approved": True, "updated_arguments": {"service": "staging"}}
        await session.resume(run.run_id, {"d1": answer})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "deleted staging"


async def test_a_new_message_moves_on_and_a_declined_pause_answers_the_call(
    relay_url: str,
) -> None:
    calls = [("m1", "deploy", {"service": "x"}), ("m2", "notify", {"service": "x"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-4") as session:
        run = await session.send("deploy x")
        with anyio.fail_after(10):
            await run.result()
        await session.send("never mind")
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        tools_message = next(
            vm.message for vm in session.view.messages() if vm.message.id.endswith(".tools")
        )
        outputs = [
            p.output["message"] for p in tools_message.parts if isinstance(p, ToolResultPart)
        ]
        assert outputs == ["The user moved on without answering", "Not started"]


async def test_cancel_pause_declines(relay_url: str) -> None:
    calls = [("k1", "deploy", {"service": "x"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-5") as session:
        run = await session.send("deploy x")
        with anyio.fail_after(10):
            await run.result()
        await session.cancel_pause(run.run_id, reason="not now")
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        tools_message = next(
            vm.message for vm in session.view.messages() if vm.message.id.endswith(".tools")
        )
        [part] = [p for p in tools_message.parts if isinstance(p, ToolResultPart)]
        assert part.output["message"] == 'The user declined to answer "Where should x go?": not now'


class Expiring(BaseModel):
    ok: bool


@tool
async def slow_question(params: Service, ctx: ToolContext) -> str:
    """Asks with a deadline."""
    soon = int(time.time() * 1000) + 300
    first = await ctx.interrupt(message="First?", response_schema=Expiring)
    await ctx.interrupt(message="Second?", response_schema=Expiring, expires_at=soon)
    return f"first {first.ok}"


async def test_questions_answered_one_at_a_time_and_an_expired_one(relay_url: str) -> None:
    agent = Agent(relay_url, durable=True)
    fake = model([("e1", "slow_question", {"service": "x"})])

    @agent.on_run
    async def handle(run: Run) -> None:
        await run.resume_tools([slow_question])
        while run.has_input():
            result = await run.pipe(fake(run.history()))
            await run.run_tools(result, [slow_question])

    async with agent, client_side.connect(relay_url, "int-6") as session:
        run = await session.send("ask")
        with anyio.fail_after(10):
            first = await run.result()
        assert [q.id for q in first.interrupts] == ["e1#0"]
        await session.resume(run.run_id, {"e1#0": {"ok": True}})
        with anyio.fail_after(10):
            while not (session.paused_run() and session.paused_run().interrupts[0].id == "e1#1"):  # type: ignore[union-attr]
                await session._wait_change()
        await anyio.sleep(0.5)
        with pytest.raises(RunwireError) as info:
            await session.resume(run.run_id, {"e1#1": {"ok": False}})
        assert info.value.code == "INTERRUPT_EXPIRED"
        await session.resume(run.run_id, {})  # the expired question is answered for the tool
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert 'Nobody answered "Second?" before it expired at ' in final_text(session, run.run_id)


async def test_answers_over_http() -> None:
    from tests.relay.test_http_api import call

    calls = [("h1", "deploy", {"service": "web"})]
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        url = server.url
        async with worker(url, calls), client_side.connect(url, "int-7") as session:
            run = await session.send("deploy web")
            with anyio.fail_after(10):
                await run.result()
            path = f"/v1/sessions/int-7/runs/{run.run_id}/resume"
            bad = await call(server, "POST", path, {"responses": {"h1#0": {"region": "moon"}}})
            assert (bad.status, bad.code) == (400, "INTERRUPT_ANSWER_INVALID")
            assert bad.json()["error"]["details"]["interrupt_id"] == "h1#0"
            good = await call(server, "POST", path, {"responses": {"h1#0": {"region": "us"}}})
            assert good.status == 202, good.body
            with anyio.fail_after(10):
                while run.status != "complete":
                    await session._wait_change()
            assert final_text(session, run.run_id) == "web deployed to us"


async def test_steering_during_a_pause_waits_for_the_resume(relay_url: str) -> None:
    calls = [("s1", "deploy", {"service": "db"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-8") as session:
        run = await session.send("deploy db")
        with anyio.fail_after(10):
            await run.result()
        delivery = run.steer("and be quick")
        with anyio.fail_after(10):
            await delivery.published
        await anyio.sleep(0.2)
        assert not delivery.outcome.done()  # pending while the Run waits on a person
        assert run.status == "suspended"
        await session.resume(run.run_id, {"s1#0": {"region": "eu"}})
        with anyio.fail_after(10):
            outcome = await delivery.outcome
            while run.status != "complete":
                await session._wait_change()
        assert outcome.consumed
        assert final_text(session, run.run_id) == "db deployed to eu"


async def test_run_interrupt_outside_a_tool_and_the_agent_sees_the_pause(relay_url: str) -> None:
    agent = Agent(relay_url)
    seen: list[Any] = []

    @agent.on_run
    async def handle(run: Run) -> None:
        seen.append(run.session.paused_run())
        ok = await run.interrupt(message="Go ahead?", response_schema={"type": "boolean"})
        await run.save_reply(f"answer: {ok}", interrupted=False)

    async with agent, client_side.connect(relay_url, "int-9") as session:
        run = await session.send("start")
        with anyio.fail_after(10):
            paused = await run.result()
        [question] = paused.interrupts
        assert question.id.endswith("#0") and question.tool_call_id is None
        await session.resume(run.run_id, {question.id: True})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "answer: True"
    assert seen[0] is None


class Even(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("must be even")
        return value


@tool
async def pick_even(params: Service, ctx: ToolContext) -> str:
    """Asks for an even number (the JSON Schema cannot say so)."""
    got = await ctx.interrupt(message="An even number?", response_schema=Even)
    return f"got {got.n}"


async def test_an_answer_the_model_refuses_asks_the_same_question_again(relay_url: str) -> None:
    agent = Agent(relay_url)
    fake = model([("v1", "pick_even", {"service": "x"})])

    @agent.on_run
    async def handle(run: Run) -> None:
        await run.resume_tools([pick_even])
        while run.has_input():
            result = await run.pipe(fake(run.history()))
            await run.run_tools(result, [pick_even])

    async with agent, client_side.connect(relay_url, "int-10") as session:
        run = await session.send("ask")
        with anyio.fail_after(10):
            first = await run.result()
        assert [q.id for q in first.interrupts] == ["v1#0"]
        await session.resume(run.run_id, {"v1#0": {"n": 3}})  # the JSON Schema takes it
        with anyio.fail_after(10):
            while not (session.paused_run() and session.paused_run().interrupts[0].id == "v1#1"):  # type: ignore[union-attr]
                await session._wait_change()
        again = session.paused_run()
        assert again is not None and again.interrupts[0].message == "An even number?"
        await session.resume(run.run_id, {"v1#1": {"n": 4}})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "got 4"


async def test_a_cancel_of_a_paused_run_ends_it_cancelled(relay_url: str) -> None:
    calls = [("x1", "deploy", {"service": "z"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-11") as session:
        run = await session.send("deploy z")
        with anyio.fail_after(10):
            await run.result()
        await session.cancel(run.run_id, reason="stop")
        with anyio.fail_after(10):
            while run.status != "cancelled":
                await session._wait_change()
        assert session.paused_run() is None


async def test_a_rule_decides_which_calls_need_approval(relay_url: str) -> None:
    calls = [("d2", "delete", {"service": "dev"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-12") as session:
        run = await session.send("clean up dev")
        with anyio.fail_after(10):
            result = await run.result()
        assert result.status == "complete" and result.interrupts == []
        assert final_text(session, run.run_id) == "deleted dev"


async def test_a_refused_approval_answers_the_call(relay_url: str) -> None:
    calls = [("d3", "delete", {"service": "prod"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-13") as session:
        run = await session.send("clean up prod")
        with anyio.fail_after(10):
            paused = await run.result()
        assert paused.interrupts[0].details == {
            "arguments": {"service": "prod"},
            "reason": "the approval rule of delete matched these arguments",
            "rule": "rule",
            "suggested_rule": {"tool": "delete", "decision": "approve", "scope": "run"},
        }
        await session.resume(run.run_id, {"d3": {"approved": False, "reason": "not prod"}})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        tools_message = next(
            vm.message for vm in session.view.messages() if vm.message.id.endswith(".tools")
        )
        [part] = [p for p in tools_message.parts if isinstance(p, ToolResultPart)]
        assert part.output["message"] == "The user did not approve delete: not prod"


async def test_a_remembered_approval_is_not_asked_again(relay_url: str) -> None:
    calls = [("r1", "delete", {"service": "prod"}), ("r2", "delete", {"service": "prod"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-14") as session:
        run = await session.send("clean up prod twice")
        with anyio.fail_after(10):
            paused = await run.result()
        assert [q.id for q in paused.interrupts] == ["r1"]
        await session.resume(run.run_id, {"r1": {"approved": True, "remember": True}})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "deleted prod; deleted prod"


async def test_a_plan_to_approve_carries_its_details(relay_url: str) -> None:
    agent = Agent(relay_url)

    @agent.on_run
    async def handle(run: Run) -> None:
        plan = ["build", "test", "ship"]
        answer = await run.interrupt(
            kind="plan", reason="approve_plan", message="Go with this plan?", details={"plan": plan}
        )
        await run.save_reply(f"plan approved: {answer['approved']}", interrupted=False)

    async with agent, client_side.connect(relay_url, "int-15") as session:
        run = await session.send("plan it")
        with anyio.fail_after(10):
            paused = await run.result()
        [question] = paused.interrupts
        assert (question.kind, question.reason) == ("plan", "approve_plan")
        assert question.details == {"plan": ["build", "test", "ship"]}
        assert question.response_schema is None
        await session.resume(run.run_id, {question.id: {"approved": True}})
        with anyio.fail_after(10):
            while run.status != "complete":
                await session._wait_change()
        assert final_text(session, run.run_id) == "plan approved: True"


async def test_a_run_paused_when_a_waiting_rollback_branched_above_it_resumes_with_its_turn(
    relay_url: str,
) -> None:
    """A prompt sent alongside while a rollback waits its turn pauses on a question;
    the rollback's turn comes then and starts a branch above it. Answered, the Run
    still reads its own prompt (it asks and gets the answer, not skip the question),
    and its reply joins its own branch."""
    agent = Agent(relay_url)
    release = anyio.Event()
    own: list[list[str]] = []

    @agent.on_run
    async def handle(run: Run) -> None:
        texts = [m.text() for m in run.messages]
        if texts[:1] == ["work"]:
            await run.start()
            await run.abort_signal.wait()
            await release.wait()  # the rollback stays queued until this Run ends
        elif texts[:1] == ["again"]:
            await run.save_reply("rolled back", interrupted=False)
        else:
            own.append(texts)
            if texts[:1] == ["ask"]:
                ok = await run.interrupt(message="Go on?", response_schema={"type": "boolean"})
                await run.save_reply(f"asked and got {ok}", interrupted=False)

    async with agent, client_side.connect(relay_url, "int-rollback") as session:
        work = await session.send("work")
        with anyio.fail_after(10):
            while work.status != "active":
                await session._wait_change()
        again = await session.send("again", multitask="rollback")
        assert again.status == "queued"
        ask = await session.send("ask", multitask="alongside")
        with anyio.fail_after(10):
            paused = await ask.result()
        [question] = paused.interrupts
        release.set()
        with anyio.fail_after(10):
            assert (await again.result()).status == "complete"
        assert [vm.message.text() for vm in session.view.messages()] == ["again", "rolled back"]
        await session.resume(ask.run_id, {question.id: True})
        with anyio.fail_after(10):
            while ask.status != "complete":  # result() would return at once: still suspended
                await session._wait_change()
        assert own == [["ask"], ["ask"]]
        assert [vm.message.text() for vm in session.view.messages()] == ["again", "rolled back"]
        assert ask.prompt is not None
        session.view.select_branch(ask.prompt.id)
        texts = [vm.message.text() for vm in session.view.messages()]
        assert texts[-2:] == ["ask", "asked and got True"]


async def test_a_paused_run_a_new_prompt_moves_on_goes_on_for_reject_and_interrupt(
    relay_url: str,
) -> None:
    """A prompt moves on a paused Run, which then resumes: a reject send is refused
    (nothing moved on), an interrupt cancels the Run (its worker applies the cancel
    when it takes it) before the new Run's turn."""
    calls = [("i1", "deploy", {"service": "q"})]
    async with worker(relay_url, calls), client_side.connect(relay_url, "int-12") as session:
        run = await session.send("deploy q")
        with anyio.fail_after(10):
            assert (await run.result()).status == "suspended"
        with pytest.raises(RunwireError) as info:
            await session.send("and r", multitask="reject")
        assert info.value.code == "THREAD_BUSY" and info.value.details["run_ids"] == [run.run_id]
        assert session.paused_run() is not None  # the refused send moved nothing on
        again = await session.send("stop, deploy r", multitask="interrupt")
        assert again.status == "queued"
        with anyio.fail_after(10):
            while run.status != "cancelled":
                await session._wait_change()
            while again.status == "queued":
                await session._wait_change()
