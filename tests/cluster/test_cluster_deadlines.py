"""Run deadlines on Redis nodes: every node that follows the session times the Run, so the
Run ends ``RUN_TIMEOUT`` whichever node its agent is on, and also when that node dies."""

from __future__ import annotations

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import Run
from relay import Server
from relay.store._redis import RedisStore
from transport.errors import RUN_TIMEOUT

from .conftest import REDIS_URL, Cluster
from .test_cluster import wait_until

pytestmark = pytest.mark.anyio


def stuck_worker(url: str, timeout: float) -> agent_side.Agent:
    """A worker whose Runs start and then hang, deaf to every signal."""
    never = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        await never.wait()

    worker = agent_side.Agent(url, timeout=timeout)
    worker.on_run(handle)
    return worker


async def test_a_deadline_set_through_one_node_ends_the_run_for_devices_on_another(
    nodes: tuple[Server, Server],
) -> None:
    a, b = nodes
    async with (
        stuck_worker(a.url, 0.3),
        client_side.connect(b.url, "deadline") as phone,
    ):
        run = await phone.send("hang")
        with anyio.fail_after(15):
            result = await run.result()
        assert result.status == "cancelled"
        info = phone.view.run(run.run_id)
        assert info is not None and info.error is not None
        assert info.error["code"] == RUN_TIMEOUT


async def test_the_run_ends_at_its_deadline_when_its_agents_node_dies(
    cluster: Cluster, redis_prefix: str
) -> None:
    """The agent is on a node that is killed; the node its device is on ends the Run at its
    deadline, long before the agent's grace would end it ``AGENT_LOST``."""
    doomed = await cluster.start_node(60.0)
    store = RedisStore(REDIS_URL, prefix=redis_prefix)
    async with (
        relay.serve(port=0, store=store, agent_grace=60.0) as survivor,
        client_side.connect(survivor.url, "orphan") as phone,
        stuck_worker(doomed.url, 1.5),
    ):
        run = await phone.send("hang")
        await wait_until(lambda: run.status == "active")
        doomed.kill()
        with anyio.fail_after(15):
            result = await run.result()
        assert result.status == "cancelled"
        info = phone.view.run(run.run_id)
        assert info is not None and info.error is not None
        assert info.error["code"] == RUN_TIMEOUT
