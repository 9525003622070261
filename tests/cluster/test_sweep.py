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
