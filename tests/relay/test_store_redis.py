"""The Redis store: the conformance suite, and what several relay nodes on one Redis rely on.

Runs against ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) under a
random key prefix per test, deleting its keys afterwards. If that Redis is
not reachable these tests fail, unless ``RUNWIRE_SKIP_REDIS=1`` is set.
The restart tests start their own throwaway ``redis-server`` on a free port.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
import trustme
from redis import Redis
from redis.exceptions import BusyLoadingError, ReadOnlyError, RedisError

from relay.store import Store, StoredEntry, open_store
from relay.store import _redis_live as redis_live
from relay.store._redis import LINGER_FULL, LINGER_MS, RedisStore
from transport._codec import dumps, splice_serial
from transport._runs import RunRecord
from transport.errors import (
    CONFLICT,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import RunStatus

from .store_conformance import Collector, StoreConformance, body, run, settled, write_runs

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def _reachable(url: str) -> bool:
    try:
        with Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2) as client:
            return bool(client.ping())
    except RedisError:
        return False


@pytest.fixture(scope="module", autouse=True)
def _redis_is_there() -> None:
    if _reachable(REDIS_URL):
        return
    if os.environ.get("RUNWIRE_SKIP_REDIS") == "1":
        pytest.skip(f"no Redis at {REDIS_URL} (RUNWIRE_SKIP_REDIS=1)")
    pytest.fail(f"no Redis at {REDIS_URL}; start one or set RUNWIRE_SKIP_REDIS=1")


def _delete(url: str, prefix: str) -> None:
    with Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    base = f"rwtest:{secrets.token_hex(6)}:"
    yield base
    _delete(REDIS_URL, base)


class TestRedisStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _prefix(self, prefix: str) -> None:
        self.prefix = prefix
        self.made = 0

    def make_store(self) -> Store:
        self.made += 1  # every store of the model test starts empty
        return RedisStore(REDIS_URL, prefix=f"{self.prefix}{self.made}:")


@asynccontextmanager
async def node(url: str, prefix: str, **options: Any) -> AsyncIterator[RedisStore]:
    """A started ``RedisStore``: one relay node."""
    store = RedisStore(url, prefix=prefix, **options)
    await store.start()
    try:
        yield store
    finally:
        await store.aclose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- several nodes on one Redis -------------------------------------------------


@pytest.mark.anyio
async def test_concurrent_appends_through_two_nodes_get_distinct_gap_free_serials(
    prefix: str,
) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        assert (await a.open_channel("s")).epoch == (await b.open_channel("s")).epoch
        serials: dict[str, list[int]] = {"a": [], "b": []}

        async def append(name: str, store: RedisStore, i: int) -> None:
            serials[name].append((await store.append("s", f"e{i}", body(f"e{i}"))).serial)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(400):
                    tg.start_soon(append, *(("a", a) if i % 2 else ("b", b)), i)
        assert sorted(serials["a"] + serials["b"]) == list(range(1, 401))
        for mine in serials.values():
            assert mine == sorted(mine)  # each node's appends keep its call order
        stored = await b.read("s", after=0, limit=1000)
        assert [e.serial for e in stored] == list(range(1, 401))


@pytest.mark.anyio
@pytest.mark.parametrize("sharded", [True, False], ids=["SPUBLISH", "PUBLISH"])
async def test_a_subscriber_on_one_node_sees_the_other_nodes_appends_in_order(
    prefix: str, sharded: bool
) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        a.sharded = b.sharded = sharded  # what a Redis before 7 gets
        await a.open_channel("s")
        await b.open_channel("s")
        await a.append("s", "old", body("old"))
        on_b, on_a = Collector(), Collector()
        await b.subscribe("s", on_b)
        await a.subscribe("s", on_a)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon((a, b)[i % 3 == 0].append, "s", f"e{i}", body(f"e{i}"))
        stored = await a.read("s", after=1, limit=1000)
        assert await on_b.until(100) == stored
        assert await on_a.until(100) == stored
        last = await settled(a, "s", on_a, on_b)
        assert on_a.entries == on_b.entries == [*stored, last]


@pytest.mark.anyio
async def test_dedup_and_expect_last_hold_across_nodes(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        await a.open_channel("s")
        await b.open_channel("s")
        original = await a.append("s", "e1", body("e1"), [run("s", "r1")])
        again = await b.append("s", "e1", body("e1", 2), [run("s", "r1", "active")])
        assert (again.serial, again.data, again.duplicate) == (1, original.data, True)
        assert await b.find("s", "e1") == again
        assert await b.runs("s") == [run("s", "r1")]
        with pytest.raises(RunwireError) as caught:
            await b.append("s", "e2", body("e2"), expect_last=0)
        assert (caught.value.code, caught.value.details) == (CONFLICT, {"last": 1})
        assert (await b.append("s", "e2", body("e2"), expect_last=1)).serial == 2
        assert (await a.append("s", "e1", body("e1"), expect_last=0)).duplicate


@pytest.mark.anyio
async def test_an_append_is_one_round_trip_and_concurrent_ones_share_them(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as store:
        await store.open_channel("s")
        before = store.round_trips
        for i in range(10):
            await store.append("s", f"e{i}", body(f"e{i}"), [run("s", f"r{i}")])
        assert store.round_trips - before == 10
        before = store.round_trips
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(10, 210):
                    tg.start_soon(store.append, "s", f"e{i}", body(f"e{i}"))
        assert 1 <= store.round_trips - before <= 20
        assert (await store.open_channel("s")).last == 210


@pytest.mark.anyio
@pytest.mark.parametrize("linger_ms", [0.0, 200.0])
async def test_appends_of_other_sessions_that_come_within_the_linger_share_a_round_trip(
    prefix: str, linger_ms: float
) -> None:
    async with node(REDIS_URL, prefix, linger_ms=linger_ms) as store:
        for session_id in ("a", "b", "c"):
            await store.open_channel(session_id)
        before = store.round_trips
        async with anyio.create_task_group() as tg:
            for session_id in ("a", "b", "c"):
                tg.start_soon(store.append, session_id, "e", body("e"))
                await anyio.sleep(0.02)  # each comes a little later than the one before
        if linger_ms:
            assert store.round_trips - before == 1
        else:  # each is sent at once (unless a round trip took over 20 ms)
            assert store.round_trips - before >= 2


@pytest.mark.anyio
async def test_a_full_queue_ends_the_linger_at_once(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as store:
        await store.open_channel("s")
        store.linger_ms = 1000
        with anyio.fail_after(0.5):  # far less than the linger
            async with anyio.create_task_group() as tg:
                tg.start_soon(store.append, "s", "first", body("first"))
                await anyio.sleep(0.01)  # the writer lingers now
                for i in range(LINGER_FULL):
                    tg.start_soon(store.append, "s", f"e{i}", body(f"e{i}"))
        store.linger_ms = 0
        assert (await store.open_channel("s")).last == LINGER_FULL + 1


@pytest.mark.anyio
async def test_reads_and_health_checks_do_not_linger(prefix: str) -> None:
    """What an attach, a catch-up or a health check waits for is sent at once."""
    async with node(REDIS_URL, prefix) as store:
        await store.open_channel("s")
        await store.append("s", "e1", body("e1"))
        store.linger_ms = 1000
        with anyio.fail_after(0.5):  # far less than the linger
            assert (await store.open_channel("new")).last == 0
            assert (await store.open_channel("s")).last == 1
            assert [e.serial for e in await store.read("s", after=0)] == [1]
            assert [e.serial for e in await store.read("s")] == [1]
            found = await store.find("s", "e1")
            assert found is not None and found.serial == 1
            assert await store.runs("s") == []
            assert (await store.head("s"))[1] == 1
            assert [e.serial for e in (await store.since("s", 0, 10))[1]] == [1]
            assert await store.healthy()
        with anyio.move_on_after(0.5) as lingering:  # appends still linger
            await store.append("s", "e2", body("e2"))
        assert lingering.cancelled_caught
        store.linger_ms = 0


@pytest.mark.anyio
async def test_after_losing_a_race_a_session_does_not_linger(prefix: str) -> None:
    """The node that lost a race catches up and retries at once; the others still linger."""
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        for session_id in ("s", "quiet"):
            await a.open_channel(session_id)
            await b.open_channel(session_id)
        await a.append("s", "e1", body("e1"))
        b.linger_ms = 1000
        with pytest.raises(RunwireError) as caught:
            await b.append("s", "e2", body("e2"), expect_last=0)  # lingers, then loses
        assert caught.value.code == CONFLICT
        with anyio.fail_after(0.5):  # far less than the linger
            assert [e.serial for e in await b.read("s", after=0)] == [1]
            assert (await b.append("s", "e2", body("e2"), expect_last=1)).serial == 2
        for session_id in ("quiet", "s"):  # other sessions, and "s" once it won, linger
            assert session_id not in b._contended
            # An urgent command of the node's own (a health PING) ends a linger early, so a
            # loaded machine may cut one short; one that never lingers fails all three tries.
            for attempt in range(3):
                with anyio.move_on_after(0.5) as lingering:
                    await b.append(session_id, f"later-{attempt}", body("later"))
                if lingering.cancelled_caught:
                    break
            assert lingering.cancelled_caught, session_id
        b.linger_ms = 0


# -- pub/sub delivery -------------------------------------------------------------


@pytest.mark.anyio
async def test_an_entry_pubsub_lost_is_filled_from_the_stream(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        await a.open_channel("s")
        await b.open_channel("s")
        got = Collector()
        await a.subscribe("s", got)
        with monkeypatch.context() as patch:  # b publishes this one where nobody listens
            patch.setattr(b, "live_channel", lambda session_id: b"nowhere")
            lost = await b.append("s", "lost", body("lost"))
        after = await b.append("s", "after", body("after"))
        assert await got.until(2) == [
            StoredEntry(lost.serial, lost.data),
            StoredEntry(after.serial, after.data),
        ]
        assert a.filled >= 1
        await settled(b, "s", got)
        assert got.serials == [1, 2, 3]


@pytest.mark.anyio
async def test_entries_trimmed_before_a_lagging_node_could_fill_them_reset_it_not_skip(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A node that falls further behind than max_history cannot fill the gap from the
    # stream: its subscribers are reset (they rebuild) instead of silently missing entries.
    small = {"max_history": 100, "dedup_window": 50}
    async with node(REDIS_URL, prefix, **small) as a, node(REDIS_URL, prefix, **small) as b:
        await a.open_channel("s")
        await b.open_channel("s")
        got = Collector()
        reset = anyio.Event()
        await a.subscribe("s", got, on_reset=reset.set)
        await b.append("s", "e0", body("e0"))
        await got.until(1)
        with monkeypatch.context() as patch:  # b publishes these where nobody listens
            patch.setattr(b, "live_channel", lambda session_id: b"nowhere")
            for i in range(1, 400):
                await b.append("s", f"e{i}", body(f"e{i}"))
        assert (await b.open_channel("s")).first > 2  # trimmed
        await b.append("s", "after", body("after"))
        with anyio.fail_after(5):
            await reset.wait()
        assert got.serials == [1]


@pytest.mark.anyio
async def test_a_message_published_twice_is_delivered_once(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        info = await a.open_channel("s")
        await b.open_channel("s")
        got = Collector()
        await a.subscribe("s", got)
        first = await b.append("s", "e1", body("e1"))
        await got.until(1)
        with Redis.from_url(REDIS_URL) as raw:
            payload = info.epoch.encode() + b" " + first.data
            raw.execute_command("SPUBLISH", a.live_channel("s"), payload)
        await settled(b, "s", got)
        assert got.serials == [1, 2]


@pytest.mark.anyio
async def test_a_node_listens_only_to_channels_someone_there_watches(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as store, node(REDIS_URL, prefix) as other:
        name = store.live_channel("s")

        def listeners() -> int:
            with Redis.from_url(REDIS_URL) as raw:
                return int(raw.execute_command("PUBSUB", "SHARDNUMSUB", name)[1])

        first = await store.subscribe("s", Collector())
        second = await store.subscribe("s", Collector())
        assert listeners() == 1  # one pub/sub subscription per node
        first()
        assert listeners() == 1
        second()
        with anyio.fail_after(10):
            while listeners():
                await anyio.sleep(0.01)  # the node unsubscribes in the background
        got = Collector()
        await store.subscribe("s", got)  # and subscribes again when asked
        assert listeners() == 1
        await other.open_channel("s")
        appended = await other.append("s", "e1", body("e1"))
        assert await got.until(1) == [StoredEntry(1, appended.data)]


@pytest.mark.anyio
async def test_subscribing_again_right_after_the_last_unsubscribe_works(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        await b.open_channel("s")
        for i in range(5):
            got = Collector()
            unsubscribe = await a.subscribe("s", got)
            appended = await b.append("s", f"e{i}", body(f"e{i}"))
            assert await got.until(1) == [StoredEntry(appended.serial, appended.data)]
            unsubscribe()  # and at once subscribe again, before the node unsubscribed on Redis


@pytest.mark.anyio
async def test_subscribing_before_the_channel_exists_delivers_its_first_entries(
    prefix: str,
) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        got = Collector()
        await a.subscribe("new", got)
        await b.open_channel("new")
        appended = [await b.append("new", f"e{i}", body(f"e{i}")) for i in range(3)]
        assert await got.until(3) == [StoredEntry(x.serial, x.data) for x in appended]


# -- dispatch streams ----------------------------------------------------------


def _waiting(store: RedisStore, agent: str) -> list[tuple[str, str]]:
    """(session, run) of each entry on the agent's dispatch stream, oldest first."""
    with Redis.from_url(REDIS_URL) as raw:
        entries = raw.xrange(store.dispatch_stream(agent))
    return [(f[b"s"].decode(), f[b"r"].decode()) for _, f in entries]


@pytest.mark.anyio
async def test_a_pending_run_is_on_its_agents_stream_exactly_while_it_is_pending(
    prefix: str,
) -> None:
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        await a.open_channel("s")
        await b.open_channel("s")
        # The prompt and the Run's dispatch are stored in one step: a node that dies
        # right after the append cannot leave a pending Run that no worker is offered.
        await a.append("s", "p1", body("p1"), [run("s", "r1", agent="writer")])
        await a.append("s", "p2", body("p2"), [run("s", "r2", agent="writer")])
        assert _waiting(a, "writer") == [("s", "r1"), ("s", "r2")]
        # A repeat of the prompt (a retry through another node) adds nothing, nor does a
        # rewrite of a record that is still pending.
        assert (await b.append("s", "p1", body("p1"), [run("s", "r1", agent="writer")])).duplicate
        await write_runs(b, [run("s", "r1", agent="writer")])
        assert _waiting(a, "writer") == [("s", "r1"), ("s", "r2")]
        # Leaving pending takes it off the stream, whoever starts it and on whichever
        # node: an agent that starts a prompted Run itself leaves no entry behind.
        await b.append("s", "go", body("go"), [run("s", "r1", "active", agent="writer")])
        await write_runs(a, [run("s", "r2", "cancelled", agent="writer")])
        assert _waiting(a, "writer") == []
        # Back to pending (a durable Run handed on): on the stream again, once.
        await a.append("s", "again", body("again"), [run("s", "r1", agent="writer")])
        await b.append("s", "again2", body("again2"), [run("s", "r1", agent="writer")])
        assert _waiting(a, "writer") == [("s", "r1")]
        assert _waiting(a, "default") == []


@pytest.mark.anyio
async def test_runs_that_ended_leave_the_status_index(prefix: str) -> None:
    # The index holds what is under way: a Run that ended is in no status set, so the
    # sets do not grow with every Run that ever ran. Ended Runs are still found (a scan
    # of this prefix's sessions, globbing characters in the prefix matched literally).
    with Redis.from_url(REDIS_URL) as raw:  # as an earlier version left it
        raw.sadd(f"{prefix}a*b:status:complete", '["old","r0"]')
    async with node(REDIS_URL, prefix + "a*b:") as store, node(REDIS_URL, prefix + "aXb:") as other:
        for s in ("s", "t"):
            await store.open_channel(s)
            await other.open_channel(s)
        await store.append("s", "p1", body("p1"), [run("s", "r1")])
        await store.append("t", "p2", body("p2"), [run("t", "r2")])
        await write_runs(other, [run("s", "elsewhere", "complete")])
        await store.append("s", "go", body("go"), [run("s", "r1", "active")])
        await store.append("s", "end", body("end"), [run("s", "r1", "complete")])
        await write_runs(store, [run("t", "r2", "cancelled")])
        with Redis.from_url(REDIS_URL) as raw:
            index = [k for k in raw.scan_iter(match=f"{prefix}*status:*") if raw.scard(k)]
        assert index == []
        ended = await store.runs_with_status(["complete", "cancelled", "active"])
        assert sorted((r.run_id, r.status) for r in ended) == [
            ("r1", "complete"),
            ("r2", "cancelled"),
        ]
        await store.append("s", "p3", body("p3"), [run("s", "r3")])
        assert [r.run_id for r in await store.runs_with_status(["pending", "error"])] == ["r3"]


@pytest.mark.anyio
async def test_a_node_forgets_the_channels_it_put_down(prefix: str) -> None:
    async with node(REDIS_URL, prefix) as store:
        for i in range(20):
            await store.open_channel(f"s{i}")
            await store.append(f"s{i}", "e1", body("e1"))
            store.close_channel(f"s{i}")
        assert store._epochs == {}  # a node's memory follows the sessions in use
        with pytest.raises(RunwireError) as caught:
            await store.append("s1", "e2", body("e2"))
        assert caught.value.code == INTERNAL_ERROR  # open it again first


# -- options --------------------------------------------------------------------


def test_redis_urls_give_a_redis_store_with_the_options_they_carry() -> None:
    store = open_store(
        "redis://127.0.0.1:6379/3?prefix=app:&max_history=50000&history_ttl=60&linger_ms=2.5"
    )
    assert isinstance(store, RedisStore)
    assert (store.prefix, store.max_history, store.history_ttl) == ("app:", 50_000, 60.0)
    assert store.linger_ms == 2.5
    default = open_store("rediss://example:6380/0")
    assert isinstance(default, RedisStore) and default.linger_ms == LINGER_MS
    for bad in (
        "redis://h/0?max_history=lots",
        "redis://h/0?prefix=a{b",
        "redis://h/0?dedup_window=0",
        "redis://h/0?linger_ms=soon",
        "redis://h/0?linger_ms=-1",
    ):
        with pytest.raises(RunwireError) as caught:
            open_store(bad)
        assert caught.value.code == VALIDATION_ERROR


def test_a_redis_py_without_the_connection_internals_the_store_takes_over_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The store takes the transports of the connections redis-py opens: a redis-py that
    # no longer keeps them where 5 to 8 do is named when the store is made, not when a
    # connection first fails.
    from redis.asyncio.connection import AbstractConnection

    made = AbstractConnection.__init__

    def without_writer(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        del self._writer

    monkeypatch.setattr(AbstractConnection, "__init__", without_writer)
    with pytest.raises(RunwireError) as caught:
        open_store("redis://127.0.0.1:6379/0")
    assert caught.value.code == VALIDATION_ERROR
    assert "is not supported" in caught.value.message and "_writer" in caught.value.message


@pytest.mark.parametrize("missing", ["redis", "hiredis"])
def test_without_the_redis_packages_open_store_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    for name in list(sys.modules):
        if name == missing or name.startswith(f"{missing}."):
            monkeypatch.setitem(sys.modules, name, None)
        elif name.startswith("relay.store._redis"):
            monkeypatch.delitem(sys.modules, name)  # imported again, without the package
    with pytest.raises(RunwireError) as caught:
        open_store("redis://127.0.0.1:6379/0")
    assert caught.value.code == VALIDATION_ERROR
    assert "pip install 'runwire[redis]'" in caught.value.message
    assert missing in caught.value.message


@pytest.mark.anyio
async def test_history_is_trimmed_by_length_and_the_dedup_window_by_count(prefix: str) -> None:
    async with node(REDIS_URL, prefix, max_history=100, dedup_window=50) as store:
        await store.open_channel("s")
        for i in range(600):
            await store.append("s", f"e{i}", b"{}")
        info = await store.open_channel("s")
        assert info.last == 600
        assert 1 < info.first <= 501  # MAXLEN ~ keeps at least max_history
        oldest = await store.read("s", after=0, limit=1000)
        assert [e.serial for e in oldest] == list(range(info.first, 601))
        assert (await store.append("s", "e599", b"{}")).duplicate
        assert (await store.append("s", "e550", b"{}")).duplicate
        assert not (await store.append("s", "e549", b"{}")).duplicate  # 51 ids ago


@pytest.mark.anyio
async def test_history_ttl_drops_an_idle_session_and_its_runs(prefix: str) -> None:
    async with node(REDIS_URL, prefix, history_ttl=0.3) as store:
        first = await store.open_channel("s")
        await store.append("s", "e1", body("e1"), [run("s", "r1")])
        assert [r.run_id for r in await store.runs_with_status(["pending"])] == ["r1"]
        with Redis.from_url(REDIS_URL) as raw, anyio.fail_after(10):
            while raw.exists(f"{prefix}{{s}}:meta", f"{prefix}{{s}}:runs"):
                await anyio.sleep(0.05)  # Redis' own expiry: nothing to wait on but the clock
        assert await store.runs_with_status(["pending"]) == []
        with Redis.from_url(REDIS_URL) as raw:
            assert raw.scard(f"{prefix}status:pending") == 0  # the stale index entry went too
        with pytest.raises(RunwireError) as caught:
            await store.append("s", "e2", body("e2"))
        assert caught.value.code == EPOCH_MISMATCH
        again = await store.open_channel("s")
        assert again.epoch != first.epoch and again.last == 0


def made(session_id: str, run_id: str, seq: int, status: RunStatus = "pending") -> RunRecord:
    """A Run record as the relay makes it: ``seq`` is its place in its session's creation."""
    return replace(run(session_id, run_id, status), seq=seq, created_ts=1000 + seq)


def _order_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Run order" in r.getMessage()]


@pytest.mark.anyio
async def test_runs_redis_lost_the_order_of_are_still_listed_in_creation_order(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Under an evicting maxmemory-policy Redis may drop a session's ``order`` list on its own
    # (or a partial restore, or a DEL, lose it) while its ``runs`` hash survives: listing the
    # session's Runs must not skip the records the list no longer names.
    async with node(REDIS_URL, prefix) as a, node(REDIS_URL, prefix) as b:
        await a.open_channel("s")
        three = [made("s", "r-c", 1), made("s", "r-a", 2, "active"), made("s", "r-b", 3)]
        for record in three:
            await a.append("s", f"p-{record.run_id}", body(record.run_id), [record])
        with Redis.from_url(REDIS_URL) as raw, caplog.at_level("WARNING", "runwire.relay.store"):
            raw.delete(f"{prefix}{{s}}:order")
            assert await a.runs("s") == three
            # Mended: in creation order again.
            assert raw.lrange(f"{prefix}{{s}}:order", 0, -1) == [b"r-c", b"r-a", b"r-b"]
            assert await a.runs("s") == three
            raw.delete(f"{prefix}{{s}}:order")
            assert await a.runs("s") == three
            warned = _order_warnings(caplog)
            assert len(warned) == 1 and "'s'" in warned[0] and "maxmemory-policy" in warned[0]
            raw.delete(f"{prefix}{{s}}:order")
            assert await b.runs("s") == three  # a fresh node
            assert len(_order_warnings(caplog)) == 2  # once per session on each node


@pytest.mark.anyio
async def test_runs_missing_from_a_trimmed_order_take_their_place_by_creation(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The list lost its head and a Run was made after it was lost: the listed ones keep
    # the list's order, the others go where their creation puts them.
    async with node(REDIS_URL, prefix) as store:
        await store.open_channel("s")
        runs = [made("s", f"r{i}", i) for i in range(1, 5)]
        await write_runs(store, runs[:3])
        with Redis.from_url(REDIS_URL) as raw:
            raw.ltrim(f"{prefix}{{s}}:order", 1, -1)  # [r2, r3]
        await write_runs(store, runs[3:])
        with caplog.at_level("WARNING", logger="runwire.relay.store"):
            assert await store.runs("s") == runs
        assert len(_order_warnings(caplog)) == 1
        with Redis.from_url(REDIS_URL) as raw:
            assert raw.lrange(f"{prefix}{{s}}:order", 0, -1) == [b"r1", b"r2", b"r3", b"r4"]
            # Restored in another order with no list at all: by creation, then run id.
            raw.delete(f"{prefix}{{s}}:order", f"{prefix}{{s}}:runs")
            later = [made("s", "z", 0), made("s", "y", 0), *runs[::-1]]
            for record in later:
                raw.hset(f"{prefix}{{s}}:runs", record.run_id, dumps(record.to_dict()))
        assert [r.run_id for r in await store.runs("s")] == ["y", "z", "r1", "r2", "r3", "r4"]


@pytest.mark.anyio
async def test_a_run_written_again_after_redis_lost_the_records_is_listed_once(
    prefix: str,
) -> None:
    # The ``runs`` hash lost and the ``order`` list kept: a record written again is new to
    # the hash, so it is pushed on the list a second time.
    async with node(REDIS_URL, prefix) as store:
        await store.open_channel("s")
        await write_runs(store, [made("s", "r1", 1), made("s", "r2", 2)])
        with Redis.from_url(REDIS_URL) as raw:
            raw.delete(f"{prefix}{{s}}:runs")
        await write_runs(store, [made("s", "r1", 1, "active")])
        assert await store.runs("s") == [made("s", "r1", 1, "active")]


@pytest.mark.anyio
async def test_an_order_list_that_grew_since_it_was_read_is_not_mended_over(prefix: str) -> None:
    # A Run made between the read and the mend was pushed on the list: writing the list
    # read then would lose it, so the mend leaves it to a later read.
    async with node(REDIS_URL, prefix) as store:
        await store.open_channel("s")
        await write_runs(store, [made("s", "r1", 1), made("s", "r2", 2)])
        with Redis.from_url(REDIS_URL) as raw:
            raw.delete(f"{prefix}{{s}}:order")
            await write_runs(store, [made("s", "r3", 3)])  # the list now [r3], read as []
            assert not await store.index.mend_order("s", 0, ["r1", "r2"])
            assert raw.lrange(f"{prefix}{{s}}:order", 0, -1) == [b"r3"]
            assert [r.run_id for r in await store.runs("s")] == ["r1", "r2", "r3"]
            assert raw.lrange(f"{prefix}{{s}}:order", 0, -1) == [b"r1", b"r2", b"r3"]


@pytest.mark.anyio
async def test_listing_runs_is_one_round_trip_and_writes_only_to_mend_an_order(
    prefix: str,
) -> None:
    async with node(REDIS_URL, prefix, history_ttl=60) as store:
        await store.open_channel("s")
        await write_runs(store, [made("s", f"r{i}", i) for i in range(1, 4)])
        with Redis.from_url(REDIS_URL) as raw:
            trips = store.round_trips
            assert len(await store.runs("s")) == 3
            assert store.round_trips - trips == 1  # nothing lost: one round trip, no script
            raw.delete(f"{prefix}{{s}}:order")
            assert len(await store.runs("s")) == 3
            assert raw.llen(f"{prefix}{{s}}:order") == 3
            assert 0 < raw.pttl(f"{prefix}{{s}}:order") <= 60_000  # expires with its session


# -- Redis going away -------------------------------------------------------------


@pytest.mark.anyio
async def test_a_closed_port_is_reported_quickly() -> None:
    store = RedisStore(f"redis://127.0.0.1:{_free_port()}/0", connect_timeout=1)
    with anyio.fail_after(3), pytest.raises(RunwireError) as caught:
        await store.start()
    assert caught.value.code == STORE_UNAVAILABLE
    assert not await store.healthy()


class _Server:
    """A throwaway ``redis-server`` on a free port, in a folder of its own."""

    def __init__(
        self, folder: Path, password: str | None = None, tls: tuple[Path, Path, Path] | None = None
    ) -> None:
        """``tls``: (certificate chain, key, CA) to listen with TLS only."""
        self.folder = folder
        self.port = _free_port()
        auth = f":{password}@" if password else ""
        self.options: tuple[str, ...] = ("--port", str(self.port))
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        if password:
            self.options += ("--requirepass", password)
        if tls:
            cert, key, ca = (str(f) for f in tls)
            self.options = ("--port", "0", "--tls-port", str(self.port), "--tls-cert-file", cert,
                            "--tls-key-file", key, "--tls-ca-cert-file", ca,
                            "--tls-auth-clients", "no")  # fmt: skip
            self.url = f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={ca}"
        self.process: anyio.abc.Process | None = None

    async def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.process = await anyio.open_process(
            [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), *self.options],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        with anyio.fail_after(10):
            while not _reachable(self.url):
                if self.process.returncode is not None:  # say, a build without TLS
                    pytest.fail(f"{binary} {' '.join(self.options)} exited at start")
                await anyio.sleep(0.02)

    def pause(self) -> None:
        """SIGSTOP the server: its connections stay open and nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    async def kill(self, *, save: bool) -> None:
        """SIGKILL the server, first writing a snapshot it will load again if ``save``."""
        if save:
            with Redis.from_url(self.url) as raw:
                raw.save()
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            await self.process.wait()
        await self.process.aclose()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[_Server]:
    server = _Server(tmp_path)
    await server.start()
    yield server
    if server.process is not None and server.process.returncode is None:
        await server.kill(save=False)


@asynccontextmanager
async def watched_from_another_node(
    url: str, timeout: float
) -> AsyncIterator[tuple[RedisStore, RedisStore, Collector]]:
    """Nodes ``a`` and ``b`` with short timeouts; ``a`` collects what is appended to ``s``."""
    timeouts = {"socket_timeout": timeout, "connect_timeout": timeout}
    async with node(url, "rw:", **timeouts) as a, node(url, "rw:", **timeouts) as b:
        await a.open_channel("s")
        await b.open_channel("s")
        got = Collector()
        await a.subscribe("s", got)
        yield a, b, got


@pytest.mark.anyio
async def test_after_a_restart_the_store_works_again_and_subscriptions_resume_without_a_gap(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with watched_from_another_node(server.url, timeout=1.0) as (a, b, got):
        before = [await b.append("s", f"e{i}", body(f"e{i}")) for i in range(3)]
        await got.until(3)

        await server.kill(save=True)
        with anyio.fail_after(3):
            for store in (a, b):
                with pytest.raises(RunwireError) as caught:
                    await store.append("s", "down", body("down"))
                assert caught.value.code == STORE_UNAVAILABLE
                assert not await store.healthy()
            with pytest.raises(RunwireError) as caught:
                await a.subscribe("t", Collector())
            assert caught.value.code == STORE_UNAVAILABLE

        # Keep a's pub/sub away after the restart, so what b appends meanwhile can
        # only reach a's subscriber through the stream.
        dead = RedisStore(f"redis://127.0.0.1:{_free_port()}/0", connect_timeout=0.2)
        monkeypatch.setattr(a, "new_connection", dead.new_connection)
        await server.start()
        with anyio.fail_after(5):
            meanwhile = [await b.append("s", f"m{i}", body(f"m{i}")) for i in range(3)]
        assert [m.serial for m in meanwhile] == [4, 5, 6]
        assert len(got.entries) == 3
        monkeypatch.undo()

        expected = [StoredEntry(x.serial, x.data) for x in before + meanwhile]
        assert await got.until(6) == expected
        assert a.filled >= 3
        assert await a.healthy()
        last = await settled(a, "s", got)
        assert got.entries == [*expected, last]


@pytest.mark.anyio
async def test_when_redis_loses_everything_subscriptions_reset_and_appends_say_so(
    server: _Server,
) -> None:
    async with node(server.url, "rw:", socket_timeout=1.0, connect_timeout=1.0) as store:
        info = await store.open_channel("s")
        reset = anyio.Event()
        got = Collector()
        await store.subscribe("s", got, on_reset=reset.set)
        await store.append("s", "e1", body("e1"))
        await got.until(1)

        await server.kill(save=False)
        await server.start()
        with anyio.fail_after(10):
            await reset.wait()  # the listener reconnected and found the channel gone
        assert got.serials == [1]
        with pytest.raises(RunwireError) as caught:
            await store.append("s", "e2", body("e2"))
        assert (caught.value.code, caught.value.details) == (EPOCH_MISMATCH, {"epoch": None})
        again = await store.open_channel("s")
        assert again.epoch != info.epoch and again.last == 0
        fresh = Collector()
        await store.subscribe("s", fresh)
        appended = await store.append("s", "e2", body("e2"))
        assert appended.data == splice_serial(body("e2"), 1)
        assert await fresh.until(1) == [StoredEntry(1, appended.data)]


@pytest.mark.anyio
async def test_a_node_whose_pubsub_redis_drops_for_falling_behind_misses_nothing(
    server: _Server,
) -> None:
    # Redis closes a pub/sub connection whose output buffer passes
    # client-output-buffer-limit (a node too busy to read): the node connects again
    # and fills from the stream.
    async with watched_from_another_node(server.url, timeout=5.0) as (a, b, got):
        wire = a._listener._conn
        assert wire is not None and wire._transport is not None
        with Redis.from_url(server.url) as raw:
            raw.config_set("client-output-buffer-limit", "pubsub 64kb 32kb 1")
            wire._transport.pause_reading()  # a stands for a node too busy to read
            pad = b"x" * 20_000
            with anyio.fail_after(20):
                stored = [
                    await b.append("s", f"e{i}", body(f"e{i}")[:-1] + b',"pad":"%s"}' % pad)
                    for i in range(300)
                ]  # 6 MB: more than the kernel's socket buffers and Redis's limit
                wire._transport.resume_reading()
                entries = list(await got.until(300))
        assert [(e.serial, e.data) for e in entries] == [(x.serial, x.data) for x in stored]
        assert a.filled > 0  # the connection was dropped: the rest came from the stream
        last = await settled(b, "s", got)
        assert got.entries == [*entries, last]


@pytest.mark.anyio
async def test_a_redis_that_stops_answering_fails_round_trips_in_time_and_is_used_again(
    server: _Server,
) -> None:
    async with node(server.url, "rw:", socket_timeout=0.5, connect_timeout=0.5) as store:
        await store.open_channel("s")
        await store.append("s", "e1", body("e1"))
        server.pause()
        try:
            with anyio.fail_after(2):
                for call in (store.append("s", "e2", body("e2")), store.head("s")):
                    with pytest.raises(RunwireError) as caught:
                        await call
                    assert caught.value.code == STORE_UNAVAILABLE
                assert not await store.healthy()
        finally:
            server.resume()
        with anyio.fail_after(5):
            appended = await store.append("s", "e3", body("e3"))
        # e2 reached Redis's socket before it stopped, so it ran when it went on.
        _, stored = await store.since("s", 0, 10)
        assert [e.serial for e in stored] == [1, 2, 3]
        assert stored[-1] == StoredEntry(appended.serial, appended.data)


@pytest.mark.anyio
async def test_a_silent_pubsub_connection_is_pinged_dropped_and_made_again_without_a_gap(
    server: _Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(redis_live, "IDLE_PING", 0.2)
    async with watched_from_another_node(server.url, timeout=0.5) as (_, b, got):
        await b.append("s", "e1", body("e1"))
        await got.until(1)
        pings = server_pings(server.url)
        await anyio.sleep(0.5)  # idle, not silent: Redis answers the watchdog's pings
        assert server_pings(server.url) > pings
        assert "no reply to PING" not in caplog.text

        listening = subscribed_connections(server.url)
        assert len(listening) == 1

        server.pause()
        try:
            with anyio.fail_after(3):  # both nodes' listeners (b's has no subscription)
                while caplog.text.count("no reply to PING") < 2:
                    await anyio.sleep(0.05)
        finally:
            server.resume()
        with anyio.fail_after(5):
            later = [await b.append("s", f"m{i}", body(f"m{i}")) for i in range(3)]
            entries = await got.until(4)
        assert [e.serial for e in entries] == [1, 2, 3, 4]
        assert entries[1:] == [StoredEntry(m.serial, m.data) for m in later]
        again = subscribed_connections(server.url)
        assert len(again) == 1 and again != listening  # a new connection listens now


def subscribed_connections(url: str) -> set[int]:
    """Ids of the server's connections that hold a subscription (sharded on Redis 7)."""
    with Redis.from_url(url) as raw:
        clients = raw.client_list()
    return {int(c["id"]) for c in clients if int(c.get("ssub", 0)) + int(c.get("sub", 0)) > 0}


def server_pings(url: str) -> int:
    """PINGs the server has answered so far."""
    with Redis.from_url(url) as raw:
        stats = raw.info("commandstats")
    return int(stats.get("cmdstat_ping", {}).get("calls", 0))


@pytest.mark.anyio
async def test_a_redis_over_tls_serves_appends_reads_and_pubsub(tmp_path: Path) -> None:
    # rediss://: redis-py does the TLS handshake; the store then reads the TLS transport
    # itself (the wire takes the SSL transport over, as it does a plain socket's).
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    files = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(files[0]))
    issued.private_key_pem.write_to_path(str(files[1]))
    ca.cert_pem.write_to_path(str(files[2]))
    server = _Server(tmp_path, tls=files)
    await server.start()
    try:
        async with node(server.url, "rw:") as a, node(server.url, "rw:") as b:
            await a.open_channel("s")
            await b.open_channel("s")
            got = Collector()
            await b.subscribe("s", got)
            big = b'{"type":"message","id":"big","pad":"%s"}' % (b"x" * 300_000)
            stored = [await a.append("s", f"e{i}", body(f"e{i}")) for i in range(3)]
            stored.append(await a.append("s", "big", big))  # many TLS records in one reply
            assert [e.serial for e in await got.until(4)] == [x.serial for x in stored]
            assert [e.data for e in await b.read("s", after=0)] == [x.data for x in stored]
            assert await b.healthy()
        # Without the CA the handshake fails: the store says Redis is unavailable.
        plain = server.url.split("?", 1)[0]
        with anyio.fail_after(5), pytest.raises(RunwireError) as caught:
            async with node(plain, "rw:"):
                pass
        assert caught.value.code == STORE_UNAVAILABLE
    finally:
        await server.kill(save=False)


@pytest.mark.anyio
async def test_a_redis_with_a_password_and_another_db_serves_both_connections(
    tmp_path: Path,
) -> None:
    # redis-py does the handshake (AUTH, SELECT) before the store reads its connections itself.
    server = _Server(tmp_path, password="s3cret")
    await server.start()
    try:
        url = f"redis://:s3cret@127.0.0.1:{server.port}/3"
        async with node(url, "rw:") as a, node(url, "rw:") as b:
            await a.open_channel("s")
            got = Collector()
            await b.subscribe("s", got)
            stored = [await a.append("s", f"e{i}", body(f"e{i}")) for i in range(3)]
            assert [e.serial for e in await got.until(3)] == [x.serial for x in stored]
        with Redis.from_url(url) as raw:
            assert raw.exists("rw:{s}:log")
        with Redis.from_url(f"redis://:s3cret@127.0.0.1:{server.port}/0") as raw:
            assert not raw.exists("rw:{s}:log")
        with anyio.fail_after(3), pytest.raises(RunwireError) as caught:
            async with node(f"redis://:wrong@127.0.0.1:{server.port}/3", "rw:"):
                pass
        assert caught.value.code == STORE_UNAVAILABLE
    finally:
        await server.kill(save=False)


# -- a Redis short of memory -----------------------------------------------------


@pytest.mark.anyio
async def test_a_redis_that_may_evict_keys_is_named_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Under an eviction policy Redis may drop any key when memory runs short: a
    # session's serial counter, its de-dup window or its Run records, on their own.
    server = _Server(tmp_path)
    server.options += ("--maxmemory-policy", "allkeys-lru")
    await server.start()
    try:
        with caplog.at_level("WARNING", logger="runwire.relay.store"):
            async with node(server.url, "rw:") as store:
                assert store.maxmemory_policy == "allkeys-lru"
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("allkeys-lru" in m and "noeviction" in m for m in warned), warned

        caplog.clear()
        with Redis.from_url(server.url) as raw:
            raw.config_set("maxmemory-policy", "noeviction")
        with caplog.at_level("WARNING", logger="runwire.relay.store"):
            async with node(server.url, "rw:") as store:
                assert store.maxmemory_policy == "noeviction"
        assert not [r for r in caplog.records if "maxmemory" in r.getMessage()]
    finally:
        await server.kill(save=False)


@pytest.mark.anyio
async def test_a_redis_out_of_memory_refuses_appends_whole_and_takes_them_once_it_has_room(
    server: _Server,
) -> None:
    async with watched_from_another_node(server.url, timeout=5.0) as (b, a, got):
        first = await a.append("s", "p1", body("p1"), [run("s", "r1")])
        await got.until(1)
        with Redis.from_url(server.url) as raw:
            raw.config_set("maxmemory", 1)  # every write is now over the limit
            keys_before = {k: raw.dump(k) for k in raw.keys("rw:*")}

            with anyio.fail_after(3):
                with pytest.raises(RunwireError) as caught:
                    await a.append("s", "p2", body("p2"), [run("s", "r2")])
                assert caught.value.code == STORE_UNAVAILABLE
                assert caught.value.details == {"redis": "OOM"}
                assert "out of memory" in caught.value.message
                # Nothing of it was written: not the entry, nor its id, nor its Run.
                assert {k: raw.dump(k) for k in raw.keys("rw:*")} == keys_before
                # Reading goes on: history, Runs and the health check.
                assert [e.serial for e in (await b.since("s", 0, 10))[1]] == [1]
                assert [r.run_id for r in await b.runs("s")] == ["r1"]
                assert await a.healthy()

            raw.config_set("maxmemory", 0)
        with anyio.fail_after(3):
            again = await a.append("s", "p2", body("p2"), [run("s", "r2")])
            repeat = await b.append("s", "p2", body("p2"), [run("s", "r2")])
        assert again.serial == first.serial + 1 and not again.duplicate
        assert repeat.duplicate and repeat.serial == again.serial
        assert [e.serial for e in await got.until(2)] == [1, 2]
        assert [r.run_id for r in await a.runs("s")] == ["r1", "r2"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BusyLoadingError("Redis is loading the dataset in memory"), "LOADING"),
        (ReadOnlyError("You can't write against a read only replica."), "READONLY"),
        (RedisError("some reply redis-py has no class for"), None),
    ],
)
async def test_every_error_reply_is_store_unavailable_with_redis_s_reason(
    prefix: str, monkeypatch: pytest.MonkeyPatch, error: RedisError, code: str | None
) -> None:
    # A replica resyncing answers LOADING on connections it already has; redis-py
    # makes that a ConnectionError, not a ResponseError, and it is a reply all the same.
    async with node(REDIS_URL, prefix) as store:
        info = await store.open_channel("s")
        wire = store.pipeline.wire
        assert wire is not None

        async def refusing(commands: list[tuple[Any, ...]]) -> list[Any]:
            return [error for _ in commands]

        monkeypatch.setattr(wire, "request", refusing)
        for call in (store.head("s"), store.append("s", "e1", body("e1"))):
            with anyio.fail_after(3), pytest.raises(RunwireError) as caught:
                await call
            assert caught.value.code == STORE_UNAVAILABLE
            assert caught.value.details == ({"redis": code} if code else {})
            assert str(error) in caught.value.message
        monkeypatch.undo()
        assert await store.head("s") == (info.epoch, 0)
