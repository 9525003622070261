"""Cancels of one Run from devices on different relay nodes.

A cancel of a Run no agent has started yet ends it at once (no agent could refuse it),
whichever node took it, and no worker gets it afterwards. Once an agent started the
Run, each device's cancel is a request of its own (who asked, why): the agent's
``on_cancel`` hears every one, and each asker learns the answer to its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

import agent_side
import client_side
import relay
from client_side import ClientRun
from relay import Server
from relay.store._redis import RedisStore
from tests.integration.conductor import CLIENT_CAPS, SECRET, token
from transport import RunwireError

from .conftest import REDIS_URL
from .test_cluster import wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nodes(redis_prefix: str) -> AsyncIterator[tuple[Server, Server]]:
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix), secret=SECRET) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix), secret=SECRET) as b,
    ):
        yield a, b


@asynccontextmanager
async def owner_and_admin(
    nodes: tuple[Server, Server],
) -> AsyncIterator[tuple[client_side.ClientSession, client_side.ClientSession, ClientRun]]:
    """Alice on node A sends a prompt no worker takes yet (the Run stays pending);
    Dan, an admin with ``cancel-any``, watches the session on node B."""
    a, b = nodes
    async with (
        client_side.connect(a.url, "trip", token=token("alice")) as alice,
        client_side.connect(b.url, "trip", token=token("dan", [*CLIENT_CAPS, "cancel-any"])) as dan,
    ):
        run = await alice.send("long answer")
        await wait_until(lambda: dan.view.run(run.run_id) is not None)
        yield alice, dan, run


async def test_a_cancel_on_one_node_ends_a_run_no_agent_started_everywhere(
    nodes: tuple[Server, Server],
) -> None:
    """No agent could refuse it: the relay ends the Run at once, every node's devices see
    it end, and a worker that registers afterwards, on the other node, never gets it."""
    _, b = nodes
    seen: list[str] = []

    async def handle(run: agent_side.Run) -> None:
        seen.append(run.run_id)
        await run.end()

    async with owner_and_admin(nodes) as (alice, dan, run):
        with anyio.fail_after(5):  # far less than cancel()'s own 30 s wait
            await run.cancel("mine, stop it")
        assert run.status == "cancelled"
        await wait_until(lambda: _status(dan, run.run_id) == "cancelled")
        await dan.cancel(run.run_id, reason="admin says stop")  # ended: nothing to do
        worker = agent_side.Agent(b.url, token=token("svc", ["agent"]))
        worker.on_run(handle)
        async with worker:
            later = await alice.send("and this one")
            await later.result()
        assert seen == [later.run_id]


async def test_every_asker_hears_its_cancel_refused_by_the_agent_that_started_the_run(
    nodes: tuple[Server, Server],
) -> None:
    _, b = nodes
    async with owner_and_admin(nodes) as (alice, dan, run):
        answers: dict[str, str] = {}

        async def cancel(name: str, session: client_side.ClientSession) -> None:
            try:
                await session.cancel(run.run_id, wait=True, timeout=3)
                answers[name] = "returned"  # the Run ended, or nobody answered in time
            except RunwireError as exc:
                answers[name] = exc.code

        async with (
            agent_side.connect(b.url, "trip", token=token("svc", ["agent"])) as session,
            anyio.create_task_group() as tg,
        ):
            await wait_until(lambda: (session.last_serial or 0) >= 1)
            agent_run = session.create_run(run.run_id, on_cancel=lambda _request: False)
            await agent_run.start()
            await wait_until(lambda: _status(alice, run.run_id) == "active")
            await wait_until(lambda: _status(dan, run.run_id) == "active")
            tg.start_soon(cancel, "alice", alice)
            await wait_until(lambda: (session.last_serial or 0) >= 3)
            tg.start_soon(cancel, "dan", dan)
            await wait_until(lambda: len(answers) == 2)
            assert not agent_run.abort_signal.aborted
            await agent_run.end()
        # Each asker's cancel(wait=True) raised CANCEL_DENIED, not just the latest one's.
        assert answers == {"alice": "CANCEL_DENIED", "dan": "CANCEL_DENIED"}


def _status(session: client_side.ClientSession, run_id: str) -> str | None:
    info = session.view.run(run_id)
    return info.status if info else None
