"""The multi-node tests of ``test_on_redis_cluster``, on a store of three shards
(``?shards=3``), so each master of the Cluster takes the writes of a third of the
sessions; and dispatch and AGENT_LOST across sessions of every shard. (The test of
a Run started before its prompt reached the node reads one shard's listener, so it
runs on the one-shard Cluster only.)

Each shard keeps its own Run index, dispatch streams and agent presence, and each
relay node runs a dispatcher per shard (``relay._cluster_shards``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest

import agent_side
import client_side
from agent_side import Run
from relay.store._redis_shards import shard_of

from .conftest import Cluster
from .test_cluster import (
    model_for,
    test_a_node_killed_mid_stream_the_client_resumes_on_another,
    test_an_agent_that_goes_away_has_its_run_ended_agent_lost,
    test_client_agent_and_second_device_on_three_nodes,
    test_simultaneous_sends_through_two_nodes_get_distinct_ordered_serials,
    wait_until,
)
from .test_on_redis_cluster import cluster, redis_prefix

__all__ = [  # the fixtures too: pytest finds them here
    "cluster",
    "redis_prefix",
    "test_a_node_killed_mid_stream_the_client_resumes_on_another",
    "test_an_agent_that_goes_away_has_its_run_ended_agent_lost",
    "test_client_agent_and_second_device_on_three_nodes",
    "test_simultaneous_sends_through_two_nodes_get_distinct_ordered_serials",
]

pytestmark = pytest.mark.anyio

SHARDS = 3
SESSIONS = [f"trip-{n}" for n in range(9)]


def test_the_sessions_used_here_fall_in_every_shard() -> None:
    assert {shard_of(s, SHARDS) for s in SESSIONS} == set(range(SHARDS))


@pytest.fixture
def store_options() -> str:
    """Three shards: the ``cluster`` fixture of ``test_on_redis_cluster`` adds this."""
    return f"&shards={SHARDS}"


async def test_runs_of_every_shard_are_dispatched_to_a_worker_on_another_node(
    cluster: Cluster,
) -> None:
    a, b = [await cluster.start_node() for _ in range(2)]
    worker = agent_side.Agent(b.url)

    @worker.on_run
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model_for(20))

    async with worker, AsyncExitStack() as stack:
        sessions = [
            await stack.enter_async_context(client_side.connect(a.url, s)) for s in SESSIONS
        ]
        runs = [await session.send("go") for session in sessions]
        with anyio.fail_after(30):
            results = [await run.result() for run in runs]
    assert [r.status for r in results] == ["complete"] * len(SESSIONS)


async def test_an_agent_whose_node_dies_has_its_runs_in_every_shard_ended_agent_lost(
    cluster: Cluster,
) -> None:
    a, b = [await cluster.start_node(grace=1.0) for _ in range(2)]
    worker = agent_side.Agent(b.url)

    @worker.on_run
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model_for(100_000, delay=0.05))

    async with worker, AsyncExitStack() as stack:
        sessions = [
            await stack.enter_async_context(client_side.connect(a.url, s)) for s in SESSIONS
        ]
        runs = [await session.send("go") for session in sessions]
        for session, run in zip(sessions, runs, strict=True):
            await wait_until(
                lambda s=session, r=run: (s.view.run(r.run_id) or r).status == "active"
            )
        b.kill()
        with anyio.fail_after(30):
            results = [await run.result() for run in runs]
    assert [r.status for r in results] == ["error"] * len(SESSIONS)
    assert all(r.error is not None and r.error.code == "AGENT_LOST" for r in results)
