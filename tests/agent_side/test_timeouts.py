"""Closing an agent session or a worker inside the caller's timeout (``fail_after`` /
``move_on_after``) behaves like a timeout: the scope catches its own cancellation,
nothing escapes it, and the connection is closed. The task groups are entered and
left in their owner's task and scope nesting, so closing from inside another scope
does not unwind the caller's cancel scopes out of order ("Attempted to exit a cancel
scope that isn't the current task's current cancel scope", a stray CancelledError)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest

import agent_side
from agent_side import AbortSignal, Agent, Run, steering_loop
from transport.messages import UIMessage

from .helpers import client_end

pytestmark = pytest.mark.anyio

DEADLINES = [0, 0.0001, 5]  # already due, due during the close, not due


async def echo(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    yield f"echo: {messages[-1].text()}"


async def settle() -> None:
    """A few checkpoints: a stray cancellation left pending would surface here."""
    for _ in range(3):
        await anyio.sleep(0.01)


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_end_inside_move_on_after_closes_the_session(relay_url: str, deadline: float) -> None:
    with anyio.fail_after(10):
        async with client_end(relay_url, "t-end") as client:
            await client.prompt("hi")
        async with agent_side.connect(relay_url, "t-end") as session:
            await session.create_run(session.invocations()[0]).start()
            with anyio.move_on_after(deadline):
                await session.end()
            await settle()
            assert not session._link.conn.connected
        await settle()


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_aclose_inside_fail_after_closes_the_session(relay_url: str, deadline: float) -> None:
    with anyio.fail_after(10):
        async with agent_side.connect(relay_url, "t-close") as session:
            try:
                with anyio.fail_after(deadline):
                    await session.aclose()
            except TimeoutError:
                pass
            await settle()
            assert not session._link.conn.connected
        await settle()


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_the_connect_block_exits_inside_a_timeout(relay_url: str, deadline: float) -> None:
    with anyio.fail_after(10):
        async with client_end(relay_url, "t-block") as client:
            await client.prompt("hi")
            await client.prompt("again")
        with anyio.move_on_after(deadline):
            async with agent_side.connect(relay_url, "t-block") as session:
                await session.create_run(session.invocations()[0]).start()
                await session.end()
        await settle()
        with anyio.move_on_after(0.2) as scope:
            async with agent_side.connect(relay_url, "t-block") as session:
                await session.create_run(session.invocations()[-1]).start()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        await settle()


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_a_worker_closed_inside_a_timeout(relay_url: str, deadline: float) -> None:
    agent = Agent(relay_url, name="t-close")

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    with anyio.fail_after(10):
        async with agent:
            with anyio.move_on_after(deadline):
                await agent.aclose()
            await settle()
            assert not agent._link.conn.connected
        await settle()


@pytest.mark.parametrize("delay", [0, 0.05, 0.3])
async def test_a_worker_cancelled_by_an_outer_scope_with_a_run_in_progress(
    relay_url: str, delay: float
) -> None:
    started = anyio.Event()
    agent = Agent(relay_url, name="t-busy")

    @agent.on_run
    async def handle(run: Run) -> None:
        started.set()
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with client_end(relay_url, "t-busy") as client:
            with anyio.move_on_after(5) as outer:
                async with agent:
                    await client.prompt("hi", agent="t-busy")
                    await started.wait()
                    await anyio.sleep(delay)
                    outer.cancel()
                    await anyio.sleep_forever()
            assert outer.cancelled_caught
            await settle()
            assert not agent._link.conn.connected


@pytest.mark.parametrize("deadline", [0.0001, 0.01, 0.05])
async def test_a_worker_whose_outer_timeout_fires_while_it_connects_serves_or_closes(
    relay_url: str, deadline: float
) -> None:
    agent = Agent(relay_url, name="t-outer")

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    with anyio.fail_after(10):
        with anyio.move_on_after(deadline):
            async with agent:
                await anyio.sleep(0.01)
        await settle()
        assert not agent._link.conn.connected
