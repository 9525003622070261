"""A master of the Redis Cluster SIGKILLed while 20 sessions append: its replica takes
over and the store follows it by itself; with ``wait_replicas=1`` nothing acknowledged
is lost.

The killed node is started again afterwards (it rejoins as a replica), so the
session's Cluster is whole for the tests that follow.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import anyio
import pytest

from relay.store._redis import RedisStore
from relay.store._redis_cluster import cluster_prefix
from tests.redis_cluster import RedisCluster
from transport.errors import STORE_UNAVAILABLE, RunwireError

from .store_conformance import body
from .test_store_redis_cluster import delete_prefix

pytestmark = pytest.mark.anyio

SESSIONS = 20


@pytest.fixture
def prefix(redis_cluster: RedisCluster) -> Iterator[str]:
    base = f"rwf:{secrets.token_hex(6)}:"
    yield base
    redis_cluster.wait_healthy(60)  # the killed master back, as a replica
    delete_prefix(redis_cluster, base)


async def test_a_master_killed_mid_stream_loses_nothing_acknowledged_with_wait_replicas(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    store = RedisStore(f"{redis_cluster.url}?wait_replicas=1", prefix=prefix, socket_timeout=2)
    await store.start()
    master = redis_cluster.master_of(cluster_prefix(prefix))
    acked: dict[str, list[tuple[int, str]]] = {f"s{n}": [] for n in range(SESSIONS)}
    failed = 0
    after_kill: dict[str, int] = dict.fromkeys(acked, 0)
    killed = anyio.Event()

    async def stream(session_id: str) -> None:
        nonlocal failed
        await store.open_channel(session_id)
        n = 0
        while not killed.is_set() or after_kill[session_id] < 20:
            n += 1
            entry_id = f"{session_id}-{n}"
            try:
                stored = await store.append(session_id, entry_id, body(entry_id, n))
            except RunwireError as exc:
                assert exc.code == STORE_UNAVAILABLE
                failed += 1
                await anyio.sleep(0.05)
                continue
            acked[session_id].append((stored.serial, entry_id))
            if killed.is_set():
                after_kill[session_id] += 1
            await anyio.sleep(0.005)

    try:
        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for session_id in acked:
                    tg.start_soon(stream, session_id)
                while min(len(a) for a in acked.values()) < 20:
                    await anyio.sleep(0.01)
                redis_cluster.kill(master)  # SIGKILL, mid-stream
                killed.set()
                # Its replica takes over. That new master has no replica until the killed
                # node is back (as one): no append can reach a replica meanwhile, so every
                # append fails (STORE_UNAVAILABLE) rather than be acknowledged unreplicated.
                while redis_cluster.master_of(cluster_prefix(prefix)) == master:
                    await anyio.sleep(0.1)
                await anyio.to_thread.run_sync(redis_cluster.start_node, master)
        # The replica took over, and the store follows it: every session went on.
        assert redis_cluster.master_of(cluster_prefix(prefix)) != master
        assert failed > 0  # the appends in flight when the master died did fail
        for session_id, entries in acked.items():
            stored = await store.read(session_id, after=0, limit=10_000)
            by_serial = {entry.serial: entry.data for entry in stored}
            for serial, entry_id in entries:
                assert serial in by_serial, f"{session_id}: acknowledged {entry_id} lost"
                assert f'"{entry_id}"'.encode() in by_serial[serial]
    finally:
        await store.aclose()
        if redis_cluster.procs[master].poll() is not None:
            redis_cluster.start_node(master)
