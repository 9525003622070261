"""A cancelled Run's result carries the abort's reason; an outside signal cancels a Run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import agent_side
import client_side
from agent_side import Agent, Run
from transport.asyncio._abort import AbortController, AbortSignal
from transport.errors import RUN_CANCELLED, RunwireError
from transport.messages import UIMessage

from .helpers import client_end

pytestmark = pytest.mark.anyio


def held_model(started: anyio.Event) -> Any:
    """Writes one word, then waits for its signal."""

    async def stream(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        yield "Working"
        started.set()
        await signal.wait()

    return stream


async def seed_loop(run: Run, model: Any) -> None:
    """The seed's loop, ending as the seed's second example does."""
    await run.start()
    while run.has_input():
        await run.pipe(model(run.history(), run.abort_signal))
    await run.end("cancelled" if run.abort_signal.aborted else "complete")


async def test_a_cancel_with_a_reason_reaches_every_result(relay_url: str) -> None:
    started = anyio.Event()
    agent = Agent(relay_url)
    seen: list[Any] = []

    collected = anyio.Event()

    @agent.on_run
    async def handle(run: Run) -> None:
        await seed_loop(run, held_model(started))
        seen.append(run.cancel_reason)
        with anyio.fail_after(10):  # the agent's view folds the end it published
            while (info := run.session.tree.run(run.run_id)) is None or not info.error:
                await anyio.sleep(0.01)
        seen.append(info.error)
        collected.set()

    async with agent, client_side.connect(relay_url, "ar-1") as session:
        run = await session.send("Plan a trip")
        with anyio.fail_after(10):
            await started.wait()
        await session.cancel(run.run_id, reason="the user pressed stop")
        with anyio.fail_after(10):
            result = await run.result()
            await collected.wait()
        assert result.status == "cancelled" and result.reason == "the user pressed stop"
        assert result.error is not None and result.error.code == RUN_CANCELLED
        assert result.error.details["client_id"] == session.client_id
        # The agent's view of the result says the same.
        assert seen[0].reason == "the user pressed stop"
        assert seen[1]["code"] == RUN_CANCELLED
        assert seen[1]["message"] == "the user pressed stop"


async def test_a_cancel_without_a_reason_gives_none(relay_url: str) -> None:
    started = anyio.Event()
    agent = Agent(relay_url)

    @agent.on_run
    async def handle(run: Run) -> None:
        await seed_loop(run, held_model(started))

    async with agent, client_side.connect(relay_url, "ar-2") as session:
        run = await session.send("Plan a trip")
        with anyio.fail_after(10):
            await started.wait()
        await session.cancel(run.run_id)
        with anyio.fail_after(10):
            result = await run.result()
        assert (result.status, result.reason, result.error) == ("cancelled", None, None)


async def test_an_outside_signal_cancels_the_run_with_its_reason(relay_url: str) -> None:
    request = AbortController()  # a web request's signal, say
    started = anyio.Event()
    async with client_end(relay_url, "ar-3") as client:
        run_id = await client.prompt("Plan a trip")
        async with agent_side.connect(relay_url, "ar-3") as session:
            run = session.create_run(run_id, signal=request.signal)

            async def disconnect() -> None:
                await started.wait()
                request.abort("the request was closed")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(disconnect)
                    await seed_loop(run, held_model(started))
            assert run.abort_signal.reason == "the request was closed"
            assert run.linked_signals == 0  # the link to the outside signal is dropped
        await client.wait_status(run_id, "cancelled")
        [end] = [e for e in client.of(run_id, "run") if e["status"] == "cancelled"]
        assert end["error"]["code"] == RUN_CANCELLED
        assert end["error"]["message"] == "the request was closed"
        assert client.response_texts(run_id) == ["Working"]


async def test_a_signal_that_fired_already_cancels_before_any_model_call(relay_url: str) -> None:
    gone = AbortController()
    gone.abort(RunwireError("CLIENT_GONE", "the browser tab closed"))
    async with client_end(relay_url, "ar-4") as client:
        run_id = await client.prompt("Plan a trip")
        async with agent_side.connect(relay_url, "ar-4") as session:
            run = session.create_run(run_id, signal=gone.signal)
            assert run.abort_signal.aborted and not run.has_input()
            calls = 0

            def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
                nonlocal calls
                calls += 1
                raise AssertionError("no model call after the signal fired")

            await seed_loop(run, model)
            assert calls == 0
        await client.wait_status(run_id, "cancelled")
        [end] = [e for e in client.of(run_id, "run") if e["status"] == "cancelled"]
        assert (end["error"]["code"], end["error"]["message"]) == (
            "CLIENT_GONE",
            "the browser tab closed",
        )


async def test_a_worker_links_an_outside_signal_in_its_handler(relay_url: str) -> None:
    shutdown = AbortController()
    started = anyio.Event()
    agent = Agent(relay_url)

    @agent.on_run
    async def handle(run: Run) -> None:
        run.link_signal(shutdown.signal)
        model = held_model(started)
        await run.start()
        while run.has_input():
            await run.pipe(model(run.history(), run.abort_signal))
        # Returning leaves the end to the worker: cancelled, as the signal fired.

    async with agent, client_side.connect(relay_url, "ar-5") as session:
        run = await session.send("Plan a trip")
        with anyio.fail_after(10):
            await started.wait()
        shutdown.abort("the worker is shutting down")
        with anyio.fail_after(10):
            result = await run.result()
        assert result.status == "cancelled"
        assert result.reason == "the worker is shutting down"
