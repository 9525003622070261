"""A Redis outage and a hung Redis under streaming sessions, on a Redis of the test's own.

Each test starts its own ``redis-server`` (``ThrowawayRedis`` of
tests/cluster/test_redis_outage.py), never the shared one at 6379, and a relay
process on it. While the sessions stream and steer:

* outage: Redis is stopped with ``SHUTDOWN SAVE`` (its data kept) for longer
  than the relay's grace, then started again on its file. The relay refuses
  publishes ``STORE_UNAVAILABLE`` meanwhile; the SDKs publish them again, in
  order, with the same entry ids, until Redis is back.
* hung: Redis is stopped with SIGSTOP, so it holds every connection but answers
  nothing, then SIGCONT. ``short`` hangs for less than the relay's Redis socket
  timeout (``SOCKET_TIMEOUT``): its calls wait. ``long`` hangs past it: its calls fail, and an
  append that failed so may still be written once Redis runs again, which the
  SDKs' repeat of the same entry id must not store twice.
"""

from __future__ import annotations

import inspect
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from relay.store._redis import RedisStore
from tests.cluster.conftest import Cluster
from tests.cluster.test_redis_outage import ThrowawayRedis

from .checker import Ledger
from .rig import GRACE, SOAK, Fleet, wait_acks, workers

pytestmark = pytest.mark.anyio

SESSIONS = 30 if SOAK else 8
WORDS = (40, 80)
OUTAGE = 20.0 if SOAK else GRACE * 3 / 2
"""How long Redis is away: longer than the grace, so presence lapses meanwhile."""
SOCKET_TIMEOUT = float(inspect.signature(RedisStore).parameters["socket_timeout"].default)
"""The relay's Redis socket timeout (``RedisStore``'s default, 5 s when this was written)."""
HANGS = {"short": 1.0, "long": SOCKET_TIMEOUT + (10.0 if SOAK else 1.0)}


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is needed (CI installs Debian's redis-server)")
    server = ThrowawayRedis(tmp_path)
    server.start()
    yield server
    if server.proc is not None:
        server.proc.send_signal(signal.SIGCONT)
        server.proc.kill()
        server.proc.wait()


def shutdown_save(server: ThrowawayRedis) -> None:
    """Stop Redis with every write saved (``save_and_kill`` would lose what came between)."""
    subprocess.run(["redis-cli", "-p", str(server.port), "shutdown", "save"], check=False)
    assert server.proc is not None
    server.proc.wait()


async def test_a_redis_outage_loses_nothing_and_hangs_no_run(own_redis: ThrowawayRedis) -> None:
    cluster = Cluster(store=f"redis://127.0.0.1:{own_redis.port}/0")
    node = await cluster.start_node(GRACE)
    ledger = Ledger()
    try:
        async with (
            workers(node.url, ledger),
            Fleet(node.url, ledger, "outage", SESSIONS) as fleet,
        ):
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.traffic, 1, WORDS)
                await wait_acks(ledger, 15 * SESSIONS)
                await anyio.to_thread.run_sync(shutdown_save, own_redis)
                steers = fleet.steer_all("during-the-outage")
                await anyio.sleep(OUTAGE)  # the outage's length, not a wait for something
                await anyio.to_thread.run_sync(own_redis.start)
                await fleet.published(steers)
            await fleet.settle()
            counts = await fleet.counts()
    finally:
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    assert set(fleet.runs.values()) == {"complete"}


@pytest.mark.parametrize("hang", list(HANGS))
async def test_a_hung_redis_loses_nothing_and_hangs_no_run(
    own_redis: ThrowawayRedis, hang: str
) -> None:
    cluster = Cluster(store=f"redis://127.0.0.1:{own_redis.port}/0")
    node = await cluster.start_node(GRACE)
    ledger = Ledger()
    assert own_redis.proc is not None
    try:
        async with (
            workers(node.url, ledger),
            Fleet(node.url, ledger, f"hung-{hang}", SESSIONS) as fleet,
        ):
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.traffic, 1, WORDS)
                await wait_acks(ledger, 15 * SESSIONS)
                own_redis.proc.send_signal(signal.SIGSTOP)
                try:
                    steers = fleet.steer_all("during-the-hang")
                    await anyio.sleep(HANGS[hang])  # the hang's length, not a wait
                finally:
                    own_redis.proc.send_signal(signal.SIGCONT)
                await fleet.published(steers)
            await fleet.settle()
            counts = await fleet.counts()
    finally:
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    assert set(fleet.runs.values()) == {"complete"}
