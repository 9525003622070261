"""The seed's steering and cancel flows end to end: ``client_side`` against an ``Agent``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

import client_side
from agent_side import AbortSignal, Agent, Run, steering_loop
from transport.messages import UIMessage

pytestmark = pytest.mark.anyio


async def planner(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    """Answers the last user message word by word, until its signal fires."""
    request = messages[-1].text()
    for word in f"Planning for: {request} Day 1. Day 2. Day 3. Day 4. Day 5.".split(" "):
        if signal.aborted:
            return
        yield word + " "
        with anyio.move_on_after(0.03):
            await signal.wait()


def worker(url: str) -> Agent:
    agent = Agent(url)

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, planner)

    return agent


async def wait_for_assistant_text(session: client_side.ClientSession, run_id: str) -> None:
    with anyio.fail_after(10):
        async for _event in session.view.events():
            if any(
                vm.run_id == run_id and vm.message.role == "assistant" and vm.message.text()
                for vm in session.view.messages()
            ):
                return


async def test_a_steer_mid_answer_is_consumed_and_answered(relay_url: str) -> None:
    async with worker(relay_url), client_side.connect(relay_url, "seed-steer") as session:
        run = await session.send("Plan a 3-day trip to Lisbon.")
        await wait_for_assistant_text(session, run.run_id)
        delivery = run.steer("Make it 5 days, and keep it under £800.")
        with anyio.fail_after(10):
            published = await delivery.published
            outcome = await delivery.outcome
            result = await run.result()
        assert published.serial > 0
        assert outcome.consumed and outcome.run_terminal_reason == "complete"
        assert result.status == "complete" and result.undelivered == []
        answers = [
            vm.message.text()
            for vm in session.view.messages()
            if vm.run_id == run.run_id and vm.message.role == "assistant"
        ]
    assert len(answers) == 2
    assert "5 days" not in answers[0]
    assert answers[1].startswith("Planning for: Make it 5 days, and keep it under £800.")


async def test_cancel_and_reprompt(relay_url: str) -> None:
    async with worker(relay_url), client_side.connect(relay_url, "seed-cancel") as session:
        first = await session.send("Plan a 3-day trip.")
        await wait_for_assistant_text(session, first.run_id)
        with anyio.fail_after(10):
            assert await first.cancel() == []
            assert (await first.result()).status == "cancelled"
            second = await session.send("Plan a weekend instead.")
            assert (await second.result()).status == "complete"


async def test_a_run_a_fork_left_off_the_active_branch_keeps_its_own_conversation(
    relay_url: str,
) -> None:
    """Another device forks the conversation above a Run that goes on (a prompt naming
    an earlier message): the Run still reads its own conversation, and its next
    response joins its own branch, not the tip of the new one."""
    agent = Agent(relay_url)
    forked = anyio.Event()
    read: list[list[str]] = []

    @agent.on_run
    async def handle(run: Run) -> None:
        prompt = run.messages[0].text()
        if prompt != "plan":
            await run.save_reply(f"re: {prompt}", interrupted=False)
            return
        await run.save_reply("step 1", interrupted=False)
        await forked.wait()
        read.append([m.text() for m in run.history()])
        await run.save_reply("step 2", interrupted=False)

    async with (
        agent,
        client_side.connect(relay_url, "fork-1") as phone,
        client_side.connect(relay_url, "fork-1") as laptop,
    ):
        hello = await phone.send("hello")
        with anyio.fail_after(10):
            await hello.result()
        plan = await phone.send("plan")
        with anyio.fail_after(10):
            while "step 1" not in [vm.message.text() for vm in laptop.view.messages()]:
                await laptop._wait_change()
        assert hello.prompt is not None and plan.prompt is not None
        other = await laptop.send("other", parent_id=hello.prompt.id)
        with anyio.fail_after(10):
            await other.result()
        forked.set()
        with anyio.fail_after(10):
            await plan.result()
            while (info := laptop.view.run(plan.run_id)) is None or info.status != "complete":
                await laptop._wait_change()
        assert read == [["hello", "re: hello", "plan", "step 1"]]
        for device in (phone, laptop):
            texts = [vm.message.text() for vm in device.view.messages()]
            assert texts == ["hello", "other", "re: other"]
            device.view.select_branch(plan.prompt.id)
            texts = [vm.message.text() for vm in device.view.messages()]
            assert texts == ["hello", "re: hello", "plan", "step 1", "step 2"]
