"""The seed's basic loop never spins after a cancel: ``has_input()`` turns false, ``pipe()`` yields.

Each test runs the loop a user writes by hand (``while run.has_input(): await
run.pipe(...)``) beside a watchdog task. Before every ``pipe()`` the loop asks the
watchdog to run once; after it, the watchdog must have run: a ``pipe()`` that never
yields would leave it waiting (and a loop that spins would starve the whole process).
A guard stops a loop that goes round too often, so old code fails instead of hanging.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import pytest

import agent_side
import client_side
from agent_side import Agent, Run
from transport.asyncio._abort import AbortSignal
from transport.messages import UIMessage

from .helpers import client_end

pytestmark = pytest.mark.anyio

MAX_ROUNDS = 20
"""More rounds than any of these Runs needs: a loop past it is spinning."""


class Watchdog:
    """A task beside the loop: it runs once each time the loop asks, and counts."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.ran = 0
        self.asked = 0

    def ask(self) -> None:
        self.asked += 1
        self._tg.start_soon(self._tick)

    async def _tick(self) -> None:
        self.ran += 1


async def seed_loop(run: Run, model: Any, watchdog: Watchdog) -> int:
    """The Ably seed's loop, as a user writes it; returns the rounds it made."""
    rounds = 0
    while run.has_input():
        rounds += 1
        assert rounds <= MAX_ROUNDS, "the loop spins: has_input() stays true after the cancel"
        watchdog.ask()
        await run.pipe(model(run.history(), run.abort_signal))
        assert watchdog.ran == watchdog.asked, "pipe() returned without yielding once"
    return rounds


async def until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` until it holds (the agent's session has no change event to wait on)."""
    with anyio.fail_after(10):
        while not predicate():
            await anyio.sleep(0.01)


def held_model(started: anyio.Event | None = None) -> Any:
    """A model that writes one word, then waits until its signal fires (and stops)."""

    async def stream(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        yield "Thinking"
        if started is not None:
            started.set()
        await signal.wait()

    return stream


async def test_pipe_yields_once_even_when_the_run_was_cancelled_already(relay_url: str) -> None:
    async with client_end(relay_url, "ls-yield") as client:
        run_id = await client.prompt("Hello")
        async with agent_side.connect(relay_url, "ls-yield") as session:
            run = session.create_run(run_id)
            await run.start()
            await client.cancel(run_id, reason="stop")
            with anyio.fail_after(10):
                await run.abort_signal.wait()
            assert not run.has_input()  # the prompt is unanswered, but the Run was cancelled
            async with anyio.create_task_group() as tg:
                watchdog = Watchdog(tg)
                watchdog.ask()
                result = await run.pipe(held_model()([], run.abort_signal))
                assert watchdog.ran == 1
            assert result.reason == "cancelled" and result.message_id is None
            assert run.undelivered() == []  # the prompt is not a queued message
            await run.end("cancelled")
        await client.wait_status(run_id, "cancelled")


async def test_a_cancel_before_the_worker_started_the_run(relay_url: str) -> None:
    agent = Agent(relay_url)
    handed = anyio.Event()
    cancel_seen = anyio.Event()
    finished = anyio.Event()
    rounds: list[int] = []

    @agent.on_run
    async def handle(run: Run) -> None:
        handed.set()
        # The worker holds the Run without starting it until the cancel folded in: the relay
        # ends a Run no agent started at once, so the Run has ended by then.
        await until(lambda: bool(run.session._cancels_of(run.run_id)) or run.ended)
        cancel_seen.set()
        async with anyio.create_task_group() as tg:
            rounds.append(await seed_loop(run, held_model(), Watchdog(tg)))
        finished.set()

    async with agent, client_end(relay_url, "ls-before") as client:
        run_id = await client.prompt("Plan a trip")
        with anyio.fail_after(10):  # the worker has the Run before the cancel is sent
            await handed.wait()
        await client.cancel(run_id, reason="changed my mind")
        with anyio.fail_after(10):
            await cancel_seen.wait()
            await finished.wait()
        await client.wait_status(run_id, "cancelled")
        assert rounds[0] <= 1
        assert client.response_texts(run_id) == []


async def test_a_cancel_mid_reply_while_a_steer_waits(relay_url: str) -> None:
    async with client_end(relay_url, "ls-mid") as client:
        run_id = await client.prompt("Plan a trip")
        steered = anyio.Event()
        async with agent_side.connect(relay_url, "ls-mid") as session:
            run = session.create_run(run_id, on_steer=steered.set)
            started = anyio.Event()

            async def cancel_mid_reply() -> None:
                await started.wait()
                await client.steer(run_id, "Make it 5 days")
                await steered.wait()
                await client.cancel(run_id, reason="stop")

            with anyio.fail_after(15):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_mid_reply)
                    rounds = await seed_loop(run, held_model(started), Watchdog(tg))
            assert rounds == 1
            assert run.abort_signal.aborted and not run.has_input()
            assert len(run.unanswered()) == 1  # the steer waits, never taken in
            await run.end("cancelled")
        await client.wait_status(run_id, "cancelled")
        assert client.response_texts(run_id) == ["Thinking"]


async def test_a_cancel_of_a_paused_run_with_waiting_steering(relay_url: str) -> None:
    agent = Agent(relay_url)
    rounds: list[int] = []
    done = anyio.Event()

    @agent.on_run
    async def handle(run: Run) -> None:
        if not run.adopted:
            await run.interrupt(reason="pick", message="Which region?")
        await run.start()  # as the seed does before its loop: the standing cancel is taken
        async with anyio.create_task_group() as tg:
            rounds.append(await seed_loop(run, held_model(), Watchdog(tg)))
        done.set()

    async with agent, client_side.connect(relay_url, "ls-paused") as session:
        run = await session.send("Deploy it")
        with anyio.fail_after(10):
            paused = await run.result()
        assert paused.status == "suspended"
        delivery = run.steer("and be quick")
        with anyio.fail_after(10):
            await delivery.published
        await session.cancel(run.run_id, reason="never mind")
        with anyio.fail_after(10):
            await done.wait()
            while run.status != "cancelled":
                await session._wait_change()
            outcome = await delivery.outcome
        assert rounds == [0]  # the cancel was taken at start(): nothing owed a model call
        assert not outcome.consumed
