"""The AGENT_LOST sweep of ``RedisDispatcher``, in process against a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest

from relay.cluster import RedisDispatcher
from relay.metrics import Metrics
from relay.store.redis import RedisStore
from transport.runs import RunRecord

from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(redis_prefix: str) -> AsyncIterator[RedisStore]:
    store = RedisStore(REDIS_URL, prefix=redis_prefix)
    await store.start()
    try:
        yield store
    finally:
        await store.aclose()


def active(session_id: str, owner: str) -> RunRecord:
    return RunRecord(
        session_id=session_id, run_id=f"r-{session_id}", agent="a", status="active", owner=owner
    )


async def test_the_sweep_ends_only_runs_whose_owner_stayed_away_for_the_grace(
    store: RedisStore,
) -> None:
    expired: list[tuple[str, str]] = []

    async def expire(session_id: str, run_id: str) -> None:
        expired.append((session_id, run_id))

    node = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics())
    runs = [active(f"s{i}", "here" if i % 2 else f"gone{i}") for i in range(6)]
    runs.append(active("back", "returns"))
    await store.put_runs(runs)
    node.client_back("here")
    await node._touch(["here"])
    await node._sweep()
    assert expired == []  # the absent are marked, not yet ended
    node.client_back("returns")
    await node._touch(["returns"])
    await anyio.sleep(0.35)  # past the grace (the marks hold the time they were set)
    await node._sweep()
    assert sorted(expired) == [("s0", "r-s0"), ("s2", "r-s2"), ("s4", "r-s4")]
    client = store.client()
    try:
        # The owner that came back had its absence mark cleared.
        assert not await client.exists(store.key("absent", "back", "r-back"))
    finally:
        await client.aclose()


async def test_one_node_at_a_time_sweeps_and_another_takes_over_when_it_stops(
    store: RedisStore,
) -> None:
    expired: list[tuple[str, str]] = []

    async def expire(session_id: str, run_id: str) -> None:  # as the hub: the Run ends
        expired.append((session_id, run_id))
        await store.put_runs([replace(active(session_id, "gone"), status="error")])

    a = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics())
    b = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics())
    assert await a._lead()
    assert not await b._lead()
    await anyio.sleep(a.heartbeat * 2)
    assert await a._lead()  # renewed: still a's after more than half its lease
    assert not await b._lead()

    await store.put_runs([active("s", "gone")])
    a.start()
    b.start()
    try:
        with anyio.fail_after(5):
            while not expired:
                await anyio.sleep(0.05)
        a.close()  # a's node ends: b takes the sweep over once a's lease runs out
        with anyio.fail_after(a.heartbeat * 3 + 2):
            while not await b._lead():
                await anyio.sleep(0.05)
        assert not await a._lead()
    finally:
        a.close()
        b.close()
    assert expired == [("s", "r-s")]  # ended once, by the node that held the lease


async def test_the_sweeper_drops_stream_consumers_of_gone_nodes_that_hold_nothing(
    store: RedisStore,
) -> None:
    async def expire(session_id: str, run_id: str) -> None:
        raise AssertionError("nothing to expire")

    node = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics(), consumer_idle=0.2)
    client = store.client()
    try:
        stream = store.dispatch_stream("a")
        await client.xgroup_create(stream, "relay", id="0", mkstream=True)

        async def take(consumer: str, *, ack: bool) -> None:
            entry_id = await client.xadd(stream, {"s": "s", "r": consumer})
            assert await client.xreadgroup("relay", consumer, {stream: ">"}, count=1)
            if ack:
                await client.xack(stream, "relay", entry_id)

        await take("node-gone", ack=True)  # dispatched a Run once, holds nothing now
        await take("node-holding", ack=False)  # holds an entry (its node may be gone)
        other = store.dispatch_stream("b")  # a stream with no group yet is passed over
        await client.xadd(other, {"s": "s", "r": "r2"})

        async def names() -> list[str]:
            return sorted(c["name"].decode() for c in await client.xinfo_consumers(stream, "relay"))

        assert await node._prune_consumers() == 0  # not idle long enough yet
        await anyio.sleep(0.25)
        await take("node-live", ack=True)  # a live reader: idle 0
        assert await node._prune_consumers() == 1
        assert await names() == ["node-holding", "node-live"]
        # An entry held by a consumer is never lost: it stays pending for XAUTOCLAIM.
        assert (await client.xpending(stream, "relay"))["pending"] == 1
        # The sweeper does it by itself, as it sweeps.
        node.start()
        with anyio.fail_after(10):
            while await names() != ["node-holding"]:
                await anyio.sleep(0.05)
    finally:
        node.close()
        await client.aclose()
