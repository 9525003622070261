"""A representative part of the multi-node tests, run again on a Redis Cluster.

The fixtures ``redis_prefix``, ``cluster`` and ``nodes`` are overridden here to
use the session's Redis Cluster (``tests/redis_cluster.py``, three masters and
three replicas) in Cluster mode (``redis+cluster://``); the tests are the ones
of the modules they are imported from, unchanged. The whole multi-node suite
runs on the standalone Redis; this part covers relay processes on the Cluster
(dispatch, AGENT_LOST, a node killed mid-stream, concurrent sends) and two
nodes in one process (pub/sub catch-up, a start that beat its prompt).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import suppress

import pytest

import relay
from relay import Server
from relay.store._redis import RedisStore
from tests.redis_cluster import RedisCluster

from ..relay.test_store_redis_shards import delete_everywhere
from .conftest import Cluster
from .test_cluster import (
    test_a_node_killed_mid_stream_the_client_resumes_on_another,
    test_an_agent_that_goes_away_has_its_run_ended_agent_lost,
    test_client_agent_and_second_device_on_three_nodes,
    test_simultaneous_sends_through_two_nodes_get_distinct_ordered_serials,
)
from .test_cross_node_start import test_a_run_started_before_its_prompt_reached_the_node_is_accepted

__all__ = [
    "test_a_node_killed_mid_stream_the_client_resumes_on_another",
    "test_a_run_started_before_its_prompt_reached_the_node_is_accepted",
    "test_an_agent_that_goes_away_has_its_run_ended_agent_lost",
    "test_client_agent_and_second_device_on_three_nodes",
    "test_simultaneous_sends_through_two_nodes_get_distinct_ordered_serials",
]

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_options() -> str:
    """More options of the relays' store URL (``test_on_redis_cluster_shards`` adds shards)."""
    return ""


@pytest.fixture
def redis_prefix(redis_cluster: RedisCluster) -> Iterator[str]:
    prefix = f"rwc:{secrets.token_hex(6)}:"
    yield prefix
    delete_everywhere(redis_cluster, prefix)


@pytest.fixture
async def cluster(
    redis_cluster: RedisCluster, redis_prefix: str, store_options: str
) -> AsyncIterator[Cluster]:
    c = Cluster(store=f"{redis_cluster.url}?prefix={redis_prefix}{store_options}")
    try:
        yield c
    finally:
        for node in c.nodes:
            with suppress(Exception):
                node.kill()


@pytest.fixture
async def nodes(
    redis_cluster: RedisCluster, redis_prefix: str
) -> AsyncIterator[tuple[Server, Server]]:
    async with (
        relay.serve(port=0, store=RedisStore(redis_cluster.url, prefix=redis_prefix)) as a,
        relay.serve(port=0, store=RedisStore(redis_cluster.url, prefix=redis_prefix)) as b,
    ):
        yield a, b
