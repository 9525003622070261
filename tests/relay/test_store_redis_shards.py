"""The Redis store spread over several hash slots (``?shards=N``), on a standalone Redis
and on the Redis Cluster: the conformance suite, how sessions and slots are spread, and
the refusal of a prefix written with another shard count.

The Cluster is the session's ``redis_cluster`` fixture (``tests/redis_cluster.py``:
three masters, three replicas, slots laid out by ``redis-cli --cluster create``).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from relay.store import Store, open_store
from relay.store._redis import RedisStore
from relay.store._redis_cluster import SLOTS, shard_prefix
from relay.store._redis_shards import ShardedRedisStore, shard_of
from tests.redis_cluster import RedisCluster
from transport.errors import VALIDATION_ERROR, RunwireError

from .store_conformance import StoreConformance, body, run
from .test_store_redis import REDIS_URL, _delete

pytestmark = pytest.mark.anyio


def delete_everywhere(cluster: RedisCluster, prefix: str) -> None:
    """Delete the keys of every shard of ``prefix`` from every master of the Cluster."""
    for port in cluster.masters():
        keys = cluster.keys_on(port, "{" + prefix + "*")
        with cluster.client(port) as client:
            for key in keys:
                client.delete(key)


@pytest.fixture
def prefix() -> Iterator[str]:
    base = f"rwtest:{secrets.token_hex(6)}:"
    yield base
    _delete(REDIS_URL, base)


@pytest.fixture
def cluster_prefix(redis_cluster: RedisCluster) -> Iterator[str]:
    base = f"rwc:{secrets.token_hex(6)}:"
    yield base
    delete_everywhere(redis_cluster, base)


class TestShardedRedisStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _prefix(self, prefix: str) -> None:
        self.prefix = prefix
        self.made = 0

    def make_store(self) -> Store:
        self.made += 1
        return open_store(f"{REDIS_URL}?shards=3&prefix={self.prefix}{self.made}:")


class TestShardedRedisClusterStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _prefix(self, cluster_prefix: str, redis_cluster: RedisCluster) -> None:
        self.prefix = cluster_prefix
        self.url = redis_cluster.url
        self.made = 0

    def make_store(self) -> Store:
        self.made += 1
        return open_store(f"{self.url}?shards=3&prefix={self.prefix}{self.made}:")


@given(st.text(min_size=1, max_size=12), st.integers(min_value=2, max_value=64))
def test_shard_slots_are_spread_evenly_round_the_slots(prefix: str, shards: int) -> None:
    slots = sorted(key_slot(shard_prefix(prefix, i, shards).encode()) for i in range(shards))
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    gaps.append(slots[0] + SLOTS - slots[-1])
    # Each shard is within an eighth of a share of its place: no two share a master
    # whose run of slots is a share wide.
    assert min(gaps) >= SLOTS // shards * 3 // 4
    assert shard_prefix(prefix, 0, shards) == prefix


def test_a_session_always_goes_to_the_same_shard_and_shards_share_the_sessions() -> None:
    sessions = [f"session-{n}" for n in range(3000)]
    counts = [0, 0, 0]
    for session in sessions:
        assert shard_of(session, 3) == shard_of(session, 3)
        counts[shard_of(session, 3)] += 1
    assert min(counts) > 900


def test_the_shards_option_is_read_and_checked() -> None:
    store = open_store("redis+cluster://127.0.0.1:7000?prefix=app:&shards=3")
    assert isinstance(store, ShardedRedisStore)
    assert [s.prefix for s in store.shards] == [
        "{app:}",
        "{" + shard_prefix("app:", 1, 3) + "}",
        "{" + shard_prefix("app:", 2, 3) + "}",
    ]
    assert isinstance(open_store("redis://127.0.0.1:6379/0?shards=1"), RedisStore)
    for bad in ("0", "65", "x", "-2"):
        with pytest.raises(RunwireError) as caught:
            open_store(f"redis://127.0.0.1:6379/0?shards={bad}")
        assert caught.value.code == VALIDATION_ERROR


async def test_each_session_is_stored_in_its_own_shard(prefix: str) -> None:
    store = open_store(f"{REDIS_URL}?shards=3&prefix={prefix}")
    assert isinstance(store, ShardedRedisStore)
    await store.start()
    try:
        for n in range(30):
            session = f"s{n}"
            await store.open_channel(session)
            await store.append(session, "e1", body("e1"), [run(session, "r1")])
        for n in range(30):
            session = f"s{n}"
            home = store.shard(session)
            for shard in store.shards:
                (runs,) = await shard.pipeline.call(("HGET", shard.keys.session(session)[3], "r1"))
                assert (runs is not None) == (shard is home)
        used = {store.shard(f"s{n}").shard for n in range(30)}
        assert used == {0, 1, 2}
        pending = await store.runs_with_status(["pending"])
        assert sorted(r.session_id for r in pending) == sorted(f"s{n}" for n in range(30))
    finally:
        await store.aclose()


async def test_a_prefix_written_with_another_shard_count_is_refused(prefix: str) -> None:
    first = open_store(f"{REDIS_URL}?shards=3&prefix={prefix}")
    await first.start()
    await first.aclose()
    for other in (f"{REDIS_URL}?prefix={prefix}", f"{REDIS_URL}?shards=2&prefix={prefix}"):
        store = open_store(other)
        with pytest.raises(RunwireError) as caught:
            await store.start()
        assert caught.value.code == VALIDATION_ERROR
        assert caught.value.details == {"shards": 3}
    again = open_store(f"{REDIS_URL}?shards=3&prefix={prefix}")
    await again.start()
    assert await again.healthy()
    await again.aclose()


async def test_on_the_cluster_each_master_takes_a_third_of_the_sessions(
    redis_cluster: RedisCluster, cluster_prefix: str
) -> None:
    store = open_store(f"{redis_cluster.url}?shards=3&prefix={cluster_prefix}")
    await store.start()
    try:
        for n in range(60):
            await store.open_channel(f"s{n}")
            await store.append(f"s{n}", f"e{n}", body(f"e{n}"))
    finally:
        await store.aclose()
    masters = redis_cluster.masters()
    assert len(masters) == 3
    logs = {port: redis_cluster.keys_on(port, "{" + cluster_prefix + "*:log") for port in masters}
    # Every master holds the logs of some sessions, and only of its own shard.
    assert all(len(found) >= 10 for found in logs.values()), logs
    assert sum(len(found) for found in logs.values()) == 60
    for found in logs.values():
        assert len({key.split(b"}")[0] for key in found}) == 1


def test_a_redis_store_made_directly_from_a_sharded_url_is_refused() -> None:
    with pytest.raises(RunwireError) as caught:
        RedisStore(f"{REDIS_URL}?shards=3")
    assert caught.value.code == VALIDATION_ERROR
    assert "open_store" in caught.value.message
