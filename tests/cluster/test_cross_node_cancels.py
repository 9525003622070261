"""Cancels of one Run from devices on different relay nodes, before its agent started it.

Two devices (each through its own node) may cancel a Run no agent has started yet;
the relay keeps both. When the agent starts the Run, each of them is a request of
its own (who asked, why): the agent's ``on_cancel`` hears every one, so it may
accept the owner's and refuse the other, and each asker learns the answer to its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import CancelRequest
from client_side import ClientRun
from relay import Server
from relay.store.redis import RedisStore
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


async def test_the_owners_cancel_is_heard_though_an_admin_cancelled_after_it_on_another_node(
    nodes: tuple[Server, Server],
) -> None:
    _, b = nodes
    async with owner_and_admin(nodes) as (alice, dan, run):
        await alice.cancel(run.run_id, reason="mine, stop it")
        await dan.cancel(run.run_id, reason="admin says stop")
        asked: list[str | None] = []

        def only_the_owner(request: CancelRequest) -> bool:
            asked.append(request.user_id)
            return request.user_id == "alice"

        async with agent_side.connect(b.url, "trip", token=token("svc", ["agent"])) as session:
            await wait_until(lambda: (session.last_serial or 0) >= 3)  # prompt, two cancels
            agent_run = session.create_run(run.run_id, on_cancel=only_the_owner)
            await agent_run.start()
            # The owner asked first: her cancel is the agent's to accept, whoever asked after.
            assert "alice" in asked, asked
            assert agent_run.abort_signal.aborted
            await agent_run.end("cancelled")
        assert (await run.result()).status == "cancelled"


async def test_every_asker_hears_its_cancel_refused_when_the_agent_starts(
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
            tg.start_soon(cancel, "alice", alice)
            await wait_until(lambda: (session.last_serial or 0) >= 2)
            tg.start_soon(cancel, "dan", dan)
            await wait_until(lambda: (session.last_serial or 0) >= 3)  # prompt, two cancels
            agent_run = session.create_run(run.run_id, on_cancel=lambda _request: False)
            await agent_run.start()
            await wait_until(lambda: len(answers) == 2)
            assert not agent_run.abort_signal.aborted
            await agent_run.end()
        # Each asker's cancel(wait=True) raised CANCEL_DENIED, not just the latest one's.
        assert answers == {"alice": "CANCEL_DENIED", "dan": "CANCEL_DENIED"}
