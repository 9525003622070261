"""Shared pytest configuration: anyio on asyncio for every async test."""

import os
from collections.abc import Iterator

import pytest

from tests.redis_cluster import RedisCluster, start_cluster
from tests.redis_cluster import available as redis_cluster_available


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A Redis Cluster (three masters, three replicas) shared by every test of the run."""
    if not redis_cluster_available():
        if os.environ.get("RUNWIRE_SKIP_REDIS") == "1":
            pytest.skip("no redis-server for a Redis Cluster (RUNWIRE_SKIP_REDIS=1)")
        pytest.fail("no redis-server/redis-cli to start a Redis Cluster with")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
