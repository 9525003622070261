"""The Redis store on a Redis Cluster (three masters, three replicas): the conformance
suite, the store URL's Cluster options, and ``wait_replicas``.

The Cluster is the session's ``redis_cluster`` fixture (``tests/redis_cluster.py``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import anyio
import pytest
from redis import Redis

from relay.store import Store, open_store
from relay.store._redis import RedisStore
from relay.store._redis_cluster import cluster_prefix, split_url
from tests.redis_cluster import RedisCluster
from transport.errors import STORE_UNAVAILABLE, VALIDATION_ERROR, RunwireError

from .store_conformance import StoreConformance, body

pytestmark = pytest.mark.anyio


def delete_prefix(cluster: RedisCluster, prefix: str) -> None:
    """Delete every key under ``prefix`` (Cluster mode: all on its slot's master)."""
    master = cluster.master_of(cluster_prefix(prefix))
    with Redis(host="127.0.0.1", port=master) as client:
        keys = list(client.scan_iter(match=f"{cluster_prefix(prefix)}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])


@pytest.fixture
def prefix(redis_cluster: RedisCluster) -> Iterator[str]:
    base = f"rwc:{secrets.token_hex(6)}:"
    yield base
    delete_prefix(redis_cluster, base)


class TestRedisClusterStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _prefix(self, prefix: str, redis_cluster: RedisCluster) -> Iterator[None]:
        self.prefix = prefix
        self.cluster = redis_cluster
        self.made = 0
        yield
        for n in range(1, self.made + 1):
            delete_prefix(redis_cluster, f"{prefix}{n}:")

    def make_store(self) -> Store:
        self.made += 1
        return RedisStore(self.cluster.url, prefix=f"{self.prefix}{self.made}:")


def test_cluster_urls_select_cluster_mode_and_wrap_the_prefix_in_a_hash_tag() -> None:
    assert split_url("redis+cluster://h:7000?prefix=a:") == ("redis://h:7000?prefix=a%3A", True)
    assert split_url("redis://h:7000/0?cluster=1&linger_ms=1")[1] is True
    assert split_url("redis://h:7000/0?cluster=0")[1] is False
    store = open_store("redis+cluster://127.0.0.1:7000?prefix=app:&wait_replicas=1")
    assert isinstance(store, RedisStore)
    assert store.cluster and store.prefix == "{app:}" and store.wait_replicas == 1
    plain = open_store("redis://127.0.0.1:6379/0?prefix=app:")
    assert isinstance(plain, RedisStore)
    assert not plain.cluster and plain.prefix == "app:" and plain.wait_replicas == 0
    for bad in (
        "redis+cluster://h:7000/2",
        "redis://h/0?wait_replicas=-1",
        "redis://h/0?wait_replicas=x",
    ):
        with pytest.raises(RunwireError) as caught:
            open_store(bad)
        assert caught.value.code == VALIDATION_ERROR


async def test_every_key_of_a_prefix_is_on_one_master(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    store = RedisStore(redis_cluster.url, prefix=prefix)
    await store.start()
    try:
        for n in range(20):
            await store.open_channel(f"s{n}")
            await store.append(f"s{n}", f"e{n}", body(f"e{n}"))
    finally:
        await store.aclose()
    master = redis_cluster.master_of(cluster_prefix(prefix))
    with Redis(host="127.0.0.1", port=master) as client:
        keys = list(client.scan_iter(match=f"{cluster_prefix(prefix)}*"))
    assert len(keys) >= 20 * 3


async def test_wait_replicas_acknowledges_an_append_a_replica_has(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    store = RedisStore(redis_cluster.url + "?wait_replicas=1", prefix=prefix)
    await store.start()
    try:
        await store.open_channel("s")
        with anyio.fail_after(10):
            stored = await store.append("s", "e1", body("e1"))
        assert stored.serial == 1
    finally:
        await store.aclose()


async def test_wait_replicas_more_than_there_are_fails_the_append_with_store_unavailable(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    store = RedisStore(redis_cluster.url + "?wait_replicas=2", prefix=prefix, socket_timeout=0.4)
    await store.start()
    try:
        await store.open_channel("s")
        with pytest.raises(RunwireError) as caught, anyio.fail_after(10):
            await store.append("s", "e1", body("e1"))
        assert caught.value.code == STORE_UNAVAILABLE
        assert caught.value.details == {"replicas": 1}
    finally:
        await store.aclose()
