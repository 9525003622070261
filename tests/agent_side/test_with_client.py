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
