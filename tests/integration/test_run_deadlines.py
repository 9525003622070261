"""Run deadlines: the agent's ``timeout`` and the relay's ``max_run_seconds``, enforced by
the relay (the Run ends ``cancelled`` with ``RUN_TIMEOUT``), over loopback WebSockets."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import Run
from client_side import ClientSession
from transport.errors import RUN_TIMEOUT, RunwireError

from .harness import stored_entries, wait_until

pytestmark = pytest.mark.anyio


def end_error(session: ClientSession, run_id: str) -> dict[str, Any] | None:
    info = session.view.run(run_id)
    return None if info is None else info.error


async def test_an_agents_timeout_ends_its_run_and_fires_its_abort_signal() -> None:
    reasons: list[object] = []

    async def handle(run: Run) -> None:
        await run.start()
        await run.pipe(_until_aborted(run))
        reasons.append(run.abort_signal.reason)

    async with relay.serve(port=0, store="memory://") as server:
        worker = agent_side.Agent(server.url, timeout=0.3)
        worker.on_run(handle)
        async with worker, client_side.connect(server.url, "s") as session:
            run = await session.send("take your time")
            await wait_until(lambda: run.status == "active")
            delivery = run.steer("still there?")
            with anyio.fail_after(10):
                result = await run.result()
                outcome = await delivery.outcome
            await wait_until(lambda: bool(reasons))
        assert (result.status, result.end_reason) == ("cancelled", "cancelled")
        error = end_error(session, run.run_id)
        assert error is not None and error["code"] == RUN_TIMEOUT
        assert error["details"] == {"timeout_seconds": 0.3}
        assert not outcome.consumed and outcome.run_terminal_reason == "cancelled"
        [reason] = reasons
        assert isinstance(reason, RunwireError) and reason.code == RUN_TIMEOUT
        stored = await stored_entries(server, "s")
        [start] = [e for e in stored if e["kind"] == "run" and e["status"] == "active"]
        assert start["timeout"] == 0.3


async def test_the_relays_max_run_seconds_ends_a_stuck_agents_run() -> None:
    """The agent asks for no deadline and never looks at its abort signal: the relay's
    limit ends the Run anyway; the agent's later publishes are refused."""
    release = anyio.Event()
    refused: list[str] = []

    async def stuck(run: Run) -> None:
        await run.start()
        await release.wait()  # ignores every signal, as a hung model call would
        try:
            await run.end()
        except RunwireError as exc:
            refused.append(exc.code)

    async with relay.serve(port=0, store="memory://", max_run_seconds=0.3) as server:
        worker = agent_side.Agent(server.url)
        worker.on_run(stuck)
        async with worker, client_side.connect(server.url, "s") as session:
            run = await session.send("hello")
            with anyio.fail_after(10):
                result = await run.result()
            assert result.status == "cancelled"
            error = end_error(session, run.run_id)
            assert error is not None and error["code"] == RUN_TIMEOUT
            release.set()
            await wait_until(lambda: run.status == "cancelled")
        assert refused == []  # end() after the relay ended it is a no-op, not an error


async def test_the_shorter_of_the_agents_timeout_and_the_relays_limit_wins() -> None:
    async with (
        relay.serve(port=0, store="memory://", max_run_seconds=0.3) as server,
        client_side.connect(server.url, "s") as client,
        agent_side.connect(server.url, "s") as session,
    ):
        sent = await client.send("go")
        run = session.create_run(sent.run_id, timeout=3600)
        await run.start()
        with anyio.fail_after(10):
            await run.abort_signal.wait()
        assert run.ended and run.status == "cancelled"
        assert isinstance(run.abort_signal.reason, RunwireError)
        assert run.abort_signal.reason.details == {"timeout_seconds": 0.3}


async def test_a_resumed_run_gets_its_deadline_anew_and_time_suspended_does_not_count() -> None:
    async with (
        relay.serve(port=0, store="memory://") as server,
        client_side.connect(server.url, "s") as client,
        agent_side.connect(server.url, "s") as session,
    ):
        sent = await client.send("go")
        run = session.create_run(sent.run_id, timeout=0.4)
        await run.start()
        await run.suspend()
        await anyio.sleep(0.6)  # longer than the timeout, all of it suspended
        await run.start()
        assert run.status == "active" and not run.abort_signal.aborted
        with anyio.fail_after(10):
            await run.abort_signal.wait()
        assert (await sent.result()).status == "cancelled"


async def test_a_bad_timeout_is_refused() -> None:
    with pytest.raises(ValueError):
        agent_side.Agent("ws://127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError):
        async with relay.serve(port=0, store="memory://", max_run_seconds=-1):
            pass


async def _until_aborted(run: Run) -> Any:
    yield "thinking"
    await run.abort_signal.wait()
