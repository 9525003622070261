"""Relays on a Redis Cluster carry on by themselves when a master is SIGKILLed while 20
sessions stream and steer: its replica takes over, the stores follow it, and the steers
sent during the failover are accepted.

The store has three shards (``?shards=3``), so the sessions are spread over the three
masters and the one killed holds a third of them. The
failover of a one-shard store is tested at the store's level
(``tests/relay/test_redis_cluster_failover.py``).

With ``wait_replicas=1`` the stores acknowledge an append only once the replica has
it, so what the clients were told is stored survives the failover; the killed
node is started again (it rejoins as a replica, without which the new master has
none and appends wait for it).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import AbortSignal, Run
from relay.store import open_store
from relay.store._redis_cluster import cluster_prefix
from relay.store._redis_shards import shard_of
from tests.redis_cluster import RedisCluster
from transport import UIMessage, message_text

from ..relay.test_store_redis_shards import delete_everywhere
from .test_cluster import wait_until, words

pytestmark = pytest.mark.anyio

SESSIONS = 20


def story_then_short(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    """A story long enough (20 s) to outlast the failover; a steer cuts it to 20 words."""
    tag = message_text(messages[-1]).split()[0]
    return words(1000 if tag == "story" else 20, tag, signal, 0.02)


async def test_relays_carry_on_when_the_master_dies_while_20_sessions_stream_and_steer(
    redis_cluster: RedisCluster, redis_prefix: str
) -> None:
    url = f"{redis_cluster.url}?wait_replicas=1&shards=3&prefix={redis_prefix}"
    master = redis_cluster.master_of(cluster_prefix(redis_prefix))  # shard 0's
    assert {shard_of(f"s{n}", 3) for n in range(SESSIONS)} == {0, 1, 2}
    async with (
        relay.serve(port=0, store=open_store(url)) as a,
        relay.serve(port=0, store=open_store(url)) as b,
    ):
        worker = agent_side.Agent(b.url)

        @worker.on_run
        async def handle(run: Run) -> None:
            await agent_side.steering_loop(run, story_then_short)

        try:
            async with worker, AsyncExitStack() as stack:
                sessions = [
                    await stack.enter_async_context(client_side.connect(a.url, f"s{n}"))
                    for n in range(SESSIONS)
                ]
                watchers = [
                    await stack.enter_async_context(client_side.connect(b.url, f"s{n}"))
                    for n in range(SESSIONS)
                ]
                runs = [await s.send("story go") for s in sessions]
                await wait_until(
                    lambda: all(
                        any("story-5 " in message_text(vm.message) for vm in s.view.messages())
                        for s in sessions
                    ),
                    timeout=60,
                )
                redis_cluster.kill(master)  # SIGKILL, mid-stream
                # Steered during the failover: each publish is refused or unanswered until
                # the replica takes over, and the SDK sends it again with the same id. A
                # retry whose first try was stored is acknowledged as a duplicate, often
                # before that entry is delivered: it is still this steer, accepted.
                steers = [run.steer("steer shorter") for run in runs]
                with anyio.fail_after(30):
                    while redis_cluster.master_of(cluster_prefix(redis_prefix)) == master:
                        await anyio.sleep(0.1)
                await anyio.to_thread.run_sync(redis_cluster.start_node, master)
                with anyio.fail_after(120):
                    for run, steer in zip(runs, steers, strict=True):
                        assert (await run.result()).status == "complete"
                        published = await steer.published
                        assert published.serial > 0
                        outcome = await steer.outcome
                        assert outcome.refused is None
                        assert outcome.consumed
                for phone, laptop in zip(sessions, watchers, strict=True):
                    ids = [vm.message.id for vm in phone.view.messages()]
                    assert len(ids) == len(set(ids))
                    serials = [vm.serial for vm in phone.view.messages()]
                    assert serials == sorted(set(serials))
                    await wait_until(
                        lambda p=phone, w=laptop: (
                            [vm.message.id for vm in w.view.messages()]
                            == [vm.message.id for vm in p.view.messages()]
                        ),
                        timeout=30,
                    )
        finally:
            if redis_cluster.procs[master].poll() is not None:
                redis_cluster.start_node(master)
            redis_cluster.wait_healthy(60)


@pytest.fixture
def redis_prefix(redis_cluster: RedisCluster) -> Iterator[str]:
    prefix = f"rwf:{secrets.token_hex(6)}:"
    yield prefix
    redis_cluster.wait_healthy(60)
    delete_everywhere(redis_cluster, prefix)
