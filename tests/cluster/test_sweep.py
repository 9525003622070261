"""The AGENT_LOST sweep of ``RedisDispatcher``, in process against a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

import relay
from relay._cluster import RedisDispatcher
from relay._dispatch import Expire
from relay._hub import Hub
from relay._metrics import Metrics
from relay._options import RelayOptions
from relay.store._base import Appended, Gone
from relay.store._redis import RedisStore
from transport._runs import RunRecord
from transport.errors import AGENT_LOST, CONFLICT, STORE_UNAVAILABLE, RunwireError
from transport.messages import new_id

from ..relay.store_conformance import write_runs
from ..relay.wire import RawPeer, prompt, run_status
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


def ending(store: RedisStore, expired: list[tuple[str, str]]) -> Expire:
    """An ``expire`` that ends the Run, as the hub does, and notes it in ``expired``."""

    async def expire(session_id: str, run_id: str) -> None:
        expired.append((session_id, run_id))
        await write_runs(store, [replace(active(session_id, "x"), status="error", owner=None)])

    return expire


async def test_the_sweep_ends_only_runs_whose_owner_stayed_away_for_the_grace(
    store: RedisStore,
) -> None:
    expired: list[tuple[str, str]] = []

    async def expire(session_id: str, run_id: str) -> None:
        expired.append((session_id, run_id))

    node = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics())
    runs = [active(f"s{i}", "here" if i % 2 else f"gone{i}") for i in range(6)]
    runs.append(active("back", "returns"))
    await write_runs(store, runs)
    node.client_back("here")
    await node.sweeper.touch([("here", None)])
    await node.sweeper.sweep()
    assert expired == []  # the others absent since their Runs started: not past the grace
    node.client_back("returns")
    await node.sweeper.touch([("returns", None)])
    await anyio.sleep(0.35)  # past the grace for those never marked present
    await node.sweeper.sweep()
    assert sorted(expired) == [("s0", "r-s0"), ("s2", "r-s2"), ("s4", "r-s4")]


async def test_the_sweep_reads_only_what_the_agents_that_left_owned(store: RedisStore) -> None:
    # 300 Runs under way, their owners present: a sweep is one round trip and touches no
    # Run. The work follows the agents that leave, not the Runs under way.
    expired: list[tuple[str, str]] = []
    expire = ending(store, expired)

    node = RedisDispatcher(store, grace=0.2, expire=expire, metrics=Metrics())
    here = [active(f"s{i}", f"agent-{i % 30}") for i in range(300)]
    await write_runs(store, here)
    await node.sweeper.touch([(f"agent-{i}", None) for i in range(30)])
    client = store.client()
    try:
        before = await client.info("commandstats")
        trips = store.round_trips
        await node.sweeper.sweep()
        assert store.round_trips - trips == 1
        after = await client.info("commandstats")
        assert after["cmdstat_hget"]["calls"] == before.get("cmdstat_hget", {"calls": 0})["calls"]
        assert expired == []

        # One agent leaves (its node stops marking it), one that owns nothing leaves too.
        await write_runs(store, [active("t", "leaver"), active("u", "leaver")])
        await store.mark_present(["idle"], 0.01)
        await anyio.sleep(0.25)
        await node.sweeper.touch([(f"agent-{i}", None) for i in range(30)])
        await node.sweeper.sweep()
        assert sorted(expired) == [("t", "r-t"), ("u", "r-u")]
        # Ended, its Runs left its set; the next sweep forgets it; "idle" owned nothing.
        assert await client.zscore(store.keys.presence, "idle") is None
        assert await client.scard(store.keys.owner("leaver")) == 0
        await node.sweeper.sweep()
        assert await client.zscore(store.keys.presence, "leaver") is None
        assert await client.zcard(store.keys.presence) == 30
        assert len(expired) == 2
    finally:
        await client.aclose()


async def test_a_run_is_in_its_current_owners_set_only(store: RedisStore) -> None:
    client = store.client()
    try:
        await write_runs(store, [active("s", "first")])
        assert await client.smembers(store.keys.owner("first")) == {b'["s","r-s"]'}
        # Adopted: pending with no owner, then active under another agent.
        await write_runs(store, [replace(active("s", "first"), status="pending", owner=None)])
        assert await client.scard(store.keys.owner("first")) == 0
        await write_runs(store, [active("s", "second")])
        assert await client.smembers(store.keys.owner("second")) == {b'["s","r-s"]'}
        # An owner no node has marked yet counts from the moment its Run became active.
        assert await client.zscore(store.keys.presence, "second") is not None
        # Ended through an append (as the agent publishes it), it leaves the set.
        await store.open_channel("s")
        await store.append("s", "e1", b"{}", [replace(active("s", "second"), status="complete")])
        assert await client.scard(store.keys.owner("second")) == 0
    finally:
        await client.aclose()


async def test_runs_an_earlier_version_left_unindexed_are_swept_after_a_start(
    store: RedisStore,
) -> None:
    expired: list[tuple[str, str]] = []
    expire = ending(store, expired)

    await write_runs(store, [active("old", "gone"), active("kept", "here")])
    client = store.client()
    try:
        # What an earlier version stored: the Runs, no owner sets, no presence.
        meta = f"{store.prefix}{{old}}:meta"
        await client.hdel(meta, "o:r-old")
        await client.delete(store.keys.owner("gone"), store.keys.presence)
        node = RedisDispatcher(store, grace=0.1, expire=expire, metrics=Metrics())
        node.client_back("here")
        node.start()
        try:
            with anyio.fail_after(5):
                while not expired:
                    await anyio.sleep(0.05)
        finally:
            node.close()
        assert expired == [("old", "r-old")]
        assert await store.index_owners() == 0  # nothing left to add
        # A session that expired under an owner's Run (history_ttl) is dropped quietly.
        await write_runs(store, [active("lapsed", "away")])
        await client.delete(f"{store.prefix}{{lapsed}}:meta", f"{store.prefix}{{lapsed}}:runs")
        await anyio.sleep(0.15)
        assert await store.gone_owners(0.1) == {}
        assert await client.scard(store.keys.owner("away")) == 0
        assert await client.zscore(store.keys.presence, "away") is None
    finally:
        await client.aclose()


async def test_after_redis_was_away_absence_counts_from_its_return(store: RedisStore) -> None:
    # While Redis is away no node can mark its agents; the deadlines that lapsed then
    # must not end Runs the moment it returns, before the nodes mark them again: the
    # sweeper restarts the absence of lapsed owners when it (re)takes the sweep.
    expired: list[tuple[str, str]] = []
    node = RedisDispatcher(store, grace=1.0, expire=ending(store, expired), metrics=Metrics())
    await write_runs(store, [active("kept", "elsewhere"), active("lost", "for-good")])
    await store.mark_present(["elsewhere", "for-good"], 0.05)  # the last marks before
    await anyio.sleep(1.3)  # Redis away for longer than the grace
    client = store.client()
    try:
        lapsed = await client.zscore(store.keys.presence, "elsewhere")
        node.start()
        with anyio.fail_after(5):  # the sweeper's first round restarts their absence
            while await client.zscore(store.keys.presence, "elsewhere") == lapsed:
                await anyio.sleep(0.02)
        assert expired == []
        await store.mark_present(["elsewhere"], 30)  # its node marks it again
        with anyio.fail_after(5):
            while not expired:
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)
    finally:
        node.close()
        await client.aclose()
    assert expired == [("lost", "r-lost")]  # only the one whose agent did not come back


async def test_one_node_at_a_time_sweeps_and_another_takes_over_when_it_stops(
    store: RedisStore,
) -> None:
    expired: list[tuple[str, str]] = []
    expire = ending(store, expired)

    a = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics())
    b = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics())
    assert await a.sweeper.lead()
    assert not await b.sweeper.lead()
    await anyio.sleep(a.heartbeat * 2)
    assert await a.sweeper.lead()  # renewed: still a's after more than half its lease
    assert not await b.sweeper.lead()

    await write_runs(store, [active("s", "gone")])
    a.start()
    b.start()
    try:
        with anyio.fail_after(5):
            while not expired:
                await anyio.sleep(0.05)
        a.close()  # a's node ends: b takes the sweep over once a's lease runs out
        with anyio.fail_after(a.heartbeat * 3 + 2):
            while not await b.sweeper.lead():
                await anyio.sleep(0.05)
        assert not await a.sweeper.lead()
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

        assert await node.sweeper.prune() == (0, 0)  # not idle long enough yet
        await anyio.sleep(0.25)
        await take("node-live", ack=True)  # a live reader: idle 0
        assert await node.sweeper.prune() == (1, 0)  # both streams hold entries: kept
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


async def test_the_sweeper_deletes_the_empty_dispatch_streams_of_names_no_worker_serves(
    store: RedisStore,
) -> None:
    """Every agent name ever used (by a worker, or named by a prompt) left a stream and a
    consumer group for ever; the sweeper deletes those with no entry, none held, and no
    reader left, and keeps every other."""

    async def expire(session_id: str, run_id: str) -> None:
        raise AssertionError("nothing to expire")

    node = RedisDispatcher(store, grace=0.3, expire=expire, metrics=Metrics(), consumer_idle=0.2)
    client = store.client()
    streams = {name: store.dispatch_stream(name) for name in ("done", "waiting", "held", "read")}
    streams["named"] = store.dispatch_stream("named")
    try:
        for name in ("done", "waiting", "held", "read"):
            await client.xgroup_create(streams[name], "relay", id="0", mkstream=True)

        async def dispatched(name: str, *, ack: bool) -> None:
            entry_id = await client.xadd(streams[name], {"s": "s", "r": name})
            assert await client.xreadgroup("relay", f"node-{name}", {streams[name]: ">"})
            if ack:
                await client.xack(streams[name], "relay", entry_id)
            await client.xdel(streams[name], entry_id)  # its Run left pending

        await dispatched("done", ack=True)  # a worker started it: nothing left
        await client.xadd(streams["waiting"], {"s": "s", "r": "w"})  # a Run waits for a worker
        await dispatched("held", ack=False)  # a node holds an entry (its Run ended meanwhile)
        entry_id = await client.xadd(streams["named"], {"s": "s", "r": "n"})  # no group yet
        await client.xdel(streams["named"], entry_id)  # the Run was cancelled, never dispatched
        await anyio.sleep(0.25)
        await dispatched("read", ack=True)  # a node reads this one now: a worker serves it
        assert await node.sweeper.prune() == (1, 2)  # node-done; the streams "done" and "named"
        left = {name for name, key in streams.items() if await client.exists(key)}
        assert left == {"waiting", "held", "read"}
        assert [c["name"] for c in await client.xinfo_consumers(streams["read"], "relay")] == [
            b"node-read"
        ]
        assert (await client.xpending(streams["held"], "relay"))["pending"] == 1
        # A name is pruned again as soon as it is unused again, by the sweep itself.
        await client.xadd(streams["done"], {"s": "s", "r": "again"})
        await client.xdel(streams["done"], (await client.xrange(streams["done"]))[0][0])
        node.start()
        with anyio.fail_after(10):
            while await client.exists(streams["done"], streams["read"]):
                await anyio.sleep(0.05)
        assert await client.exists(streams["waiting"], streams["held"]) == 2
    finally:
        node.close()
        await client.aclose()


async def test_a_run_of_an_agent_name_whose_stream_was_pruned_reaches_its_next_worker(
    redis_prefix: str,
) -> None:
    """A Run stored after its agent's stream and group were deleted (the check that they
    are unused and the deletion are one script, so a Run stored meanwhile comes after)
    makes the stream again, and the next worker of that name gets it; so does a worker
    whose stream is deleted while it waits."""
    store = RedisStore(REDIS_URL, prefix=redis_prefix)
    raw = Redis.from_url(REDIS_URL)
    stream = store.dispatch_stream("x")

    async def settled() -> None:  # the started Runs' entries acknowledged and deleted
        with anyio.fail_after(10):
            while raw.xlen(stream) or raw.xpending(stream, "relay")["pending"]:
                await anyio.sleep(0.05)

    async with relay.serve(port=0, store=store) as server:
        dispatcher = server.hub.dispatcher
        assert isinstance(dispatcher, RedisDispatcher)
        dispatcher.sweeper.consumer_idle = 0.05
        client = await RawPeer.open(server.url)
        await client.attach("s")
        worker = await RawPeer.open(server.url, role="agent")
        await worker.request({"type": "worker", "agent": "x"})
        first = new_id()
        await client.publish("s", prompt(first, agent="x"))
        assert (await worker.next("dispatch", timeout=10))["run_id"] == first
        await worker.attach("s")
        assert (await worker.publish("s", run_status(first, "active")))["type"] == "ack"
        await settled()
        await worker.close()
        with anyio.fail_after(10):  # the node stops reading once its worker is gone
            while not (dispatcher._reader is None or dispatcher._reader.done()):
                await anyio.sleep(0.05)
        await anyio.sleep(0.1)
        assert await dispatcher.sweeper.prune() == (1, 1)
        assert not raw.exists(stream)

        second = new_id()
        await client.publish("s", prompt(second, agent="x"))
        late = await RawPeer.open(server.url, role="agent")
        await late.request({"type": "worker", "agent": "x"})
        assert (await late.next("dispatch", timeout=10))["run_id"] == second
        await late.attach("s")
        assert (await late.publish("s", run_status(second, "active")))["type"] == "ack"
        await settled()
        raw.delete(stream)  # as a prune would, had the reader's consumer gone quiet
        third = new_id()
        await client.publish("s", prompt(third, agent="x"))
        assert (await late.next("dispatch", timeout=10))["run_id"] == third
    raw.close()


async def test_an_end_for_an_agents_absence_is_stored_only_while_it_is_still_absent(
    store: RedisStore,
) -> None:
    # The check is in the script that stores the end: no node can mark the agent present
    # between the check and the write.
    await store.open_channel("s")
    run = active("s", "agent-x")
    ended = replace(run, status="error", owner=None)
    gone = Gone("agent-x", 0.05)
    await write_runs(store, [run])
    stored = await store.read("s", after=0)  # the entry the Run was written with
    await store.mark_present(["agent-x"], 30)  # back, through some node
    with pytest.raises(RunwireError) as refused:
        await store.append("s", "end", b"{}", [ended], gone=gone)
    assert refused.value.code == CONFLICT
    assert refused.value.details == {"present": "agent-x"}
    assert await store.read("s", after=0) == stored
    assert await store.run("s", "r-s") == run
    await store.mark_present(["agent-x"], 0.001)  # gone again, for longer than the grace
    await anyio.sleep(0.1)
    assert not (await store.append("s", "end", b"{}", [ended], gone=gone)).duplicate
    assert await store.run("s", "r-s") == ended


@pytest.mark.parametrize("durable", [False, True])
async def test_a_run_is_not_ended_agent_lost_when_its_agent_came_back_through_another_node(
    redis_prefix: str, durable: bool
) -> None:
    # The sweep found the agent gone (past its deadline by the grace) and is about to end
    # its Run (or hand it on, if durable) when the agent reconnects through another node,
    # which marks it present: the end must not happen. The sweeper's node does not have
    # the agent's connection, so only Redis knows it is back; here the sweep is held
    # between the two.
    def serve() -> AbstractAsyncContextManager[relay.Server]:
        store = RedisStore(REDIS_URL, prefix=redis_prefix)
        return relay.serve(port=0, store=store, agent_grace=1.0)  # a heartbeat every 0.33 s

    async with serve() as a, serve() as b:
        nodes = {a: dispatcher_of(a), b: dispatcher_of(b)}
        decided, go, ended = anyio.Event(), anyio.Event(), anyio.Event()
        sweepers: list[relay.Server] = []

        def held_back(server: relay.Server, expire: Expire) -> Expire:
            async def expire_later(session_id: str, run_id: str) -> None:
                if not sweepers:  # the first end the sweep asks for waits for the test
                    sweepers.append(server)
                    decided.set()
                    await go.wait()
                    try:
                        await expire(session_id, run_id)
                    finally:
                        ended.set()
                else:
                    await expire(session_id, run_id)

            return expire_later

        for server, node in nodes.items():
            node.sweeper.expire = held_back(server, node.sweeper.expire)
        client = await RawPeer.open(a.url)
        await client.attach("s")
        run_id = new_id()
        await client.publish("s", prompt(run_id))
        agent = await RawPeer.open(b.url, role="agent", client_id="agent-x")
        await agent.attach("s")
        started = {**run_status(run_id, "active"), "durable": durable}
        assert (await agent.publish("s", started))["type"] == "ack"
        await agent.close()
        with anyio.fail_after(10):
            await decided.wait()
        [sweeper] = sweepers
        other = b if sweeper is a else a
        store = nodes[a].store
        redis_client = store.client()
        try:
            lapsed = await redis_client.zscore(store.keys.presence, "agent-x")
            back = await RawPeer.open(other.url, role="agent", client_id="agent-x")
            with anyio.fail_after(5):  # its node marked it present
                while await redis_client.zscore(store.keys.presence, "agent-x") == lapsed:
                    await anyio.sleep(0.01)
            go.set()
            with anyio.fail_after(10):
                await ended.wait()
            await anyio.sleep(1.0)  # later sweeps leave it alone too: it is present
            record = await store.run("s", run_id)
            assert record is not None and record.status == "active"
            await back.close()
        finally:
            await redis_client.aclose()


def dispatcher_of(server: relay.Server) -> RedisDispatcher:
    found = server.hub.dispatcher
    assert isinstance(found, RedisDispatcher)
    return found


_IDS = st.text(min_size=1, max_size=40).filter(lambda t: "\x00" not in t)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)
@given(runs=st.lists(st.tuples(_IDS, st.sampled_from(["s1", "s.2", "a:b-c"]), _IDS), max_size=8))
async def test_any_run_and_agent_ids_make_the_round_trip_through_the_sweep(
    store: RedisStore, anyio_backend: str, runs: list[tuple[str, str, str]]
) -> None:
    # Run ids and client ids are any text (quotes, backslashes, braces, emoji...): the
    # sweep's script decodes what the append script stored and finds every Run.
    records = {
        (session_id, run_id): RunRecord(
            session_id=session_id, run_id=run_id, agent="a", status="active", owner=owner
        )
        for run_id, session_id, owner in runs
    }
    await write_runs(store, list(records.values()))
    expected: dict[str, set[tuple[str, str]]] = {}
    for record in records.values():
        assert record.owner is not None
        expected.setdefault(record.owner, set()).add((record.session_id, record.run_id))
    await anyio.sleep(0.002)
    gone = await store.gone_owners(0)
    assert {owner: set(found) for owner, found in gone.items()} == expected
    await write_runs(store, [replace(r, status="complete") for r in records.values()])
    assert await store.gone_owners(0) == {}  # each owner forgotten, owning nothing
    client = store.client()
    try:
        assert await client.zcard(store.keys.presence) == 0
    finally:
        await client.aclose()


async def test_an_agent_present_in_some_sessions_only_keeps_its_runs_there_only(
    store: RedisStore,
) -> None:
    # Its first connection may act in "keep-*" and "drop-*"; its fresh one in "keep-*"
    # only. Once the first one's deadline is past the grace, the sweep returns its Run in
    # "drop-1" and not the one in "keep-1"; the end of the first is stored, of the second
    # refused; then what lapsed is forgotten, and the sweep reads nothing of the Run the
    # agent is still present for.
    runs = [active("keep-1", "w"), active("drop-1", "w"), active("other", "elsewhere")]
    await write_runs(store, runs)
    both, fresh = ["keep-*", "drop-*"], ["keep-*"]
    await store.mark_present(["elsewhere"], 30, scoped=[("w", both)])
    await store.mark_present([], 0.001, scoped=[("w", both)])  # its last mark
    await store.mark_present([], 30, scoped=[("w", fresh)])
    await anyio.sleep(0.15)
    assert await store.gone_owners(0.1) == {"w": [("drop-1", "r-drop-1")]}
    for run in runs[:2]:
        await store.open_channel(run.session_id)
    gone = Gone("w", 0.1)
    kept = replace(runs[0], status="error", owner=None)
    with pytest.raises(RunwireError) as refused:
        await store.append("keep-1", "end", b"{}", [kept], gone=gone)
    assert refused.value.code == CONFLICT
    ended = replace(runs[1], status="error", owner=None)
    assert not (await store.append("drop-1", "end", b"{}", [ended], gone=gone)).duplicate
    assert await store.gone_owners(0.1) == {}
    client = store.client()
    try:
        assert await client.smembers(store.keys.scopes("w")) == {store.scope_member("w", fresh)}
        assert await client.zcard(store.keys.scoped_presence) == 1
        assert await client.zscore(store.keys.presence, "w") is None
        before = await client.info("commandstats")
        assert await store.gone_owners(0.1) == {}
        after = await client.info("commandstats")
        assert after["cmdstat_hget"]["calls"] == before.get("cmdstat_hget", {"calls": 0})["calls"]
        assert await store.run("keep-1", "r-keep-1") == runs[0]
    finally:
        await client.aclose()


_PATTERNS = st.text(alphabet="ab.é*", max_size=6)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)
@given(patterns=st.lists(_PATTERNS, min_size=1, max_size=3), session=_PATTERNS.filter(bool))
async def test_the_sweep_matches_session_patterns_as_tokens_do(
    store: RedisStore, anyio_backend: str, patterns: list[str], session: str
) -> None:
    # The scripts match an agent's patterns against a Run's session as relay.auth does.
    session = session.replace("*", "x")
    owner = new_id()
    await store.mark_present([], 30, scoped=[(owner, patterns)])
    await write_runs(store, [active(session, owner)])
    await store.mark_present([owner], 0.001)  # lapsed everywhere: the sweep looks at it
    await anyio.sleep(0.005)
    gone = (await store.gone_owners(0)).get(owner, [])
    covered = any(relay.auth.matches(pattern, session) for pattern in patterns)
    assert gone == ([] if covered else [(session, f"r-{session}")])
    await write_runs(store, [replace(active(session, owner), status="complete")])


async def test_owners_whose_runs_never_end_do_not_starve_the_others(store: RedisStore) -> None:
    """The sweep takes at most ``sweep_limit`` owners a pass, oldest first. An owner whose
    Run's end keeps failing (``hub.agent_lost`` only logs: the session cannot be loaded,
    its append is refused) must not keep that place for ever: the owners behind it get
    their turn, and the stuck ones are still tried."""
    stuck = {"s-stuck1", "s-stuck2"}
    tried: list[str] = []
    expired: list[tuple[str, str]] = []
    end = ending(store, expired)

    async def expire(session_id: str, run_id: str) -> None:
        tried.append(session_id)
        if session_id in stuck:
            return  # the end failed, as the hub logs and leaves it
        await end(session_id, run_id)

    node = RedisDispatcher(store, grace=0.2, expire=expire, metrics=Metrics(), sweep_limit=2)
    for name in ("s-stuck1", "s-stuck2", "s-later1", "s-later2", "s-later3"):
        await write_runs(store, [active(name, f"owner-{name}")])  # absent, oldest first
        await anyio.sleep(0.01)
    await anyio.sleep(0.25)
    with anyio.fail_after(10):
        for _ in range(6):
            await node.sweeper.sweep()
    assert sorted(expired) == [(s, f"r-{s}") for s in ("s-later1", "s-later2", "s-later3")]
    assert tried.count("s-stuck1") >= 2 and tried.count("s-stuck2") >= 2  # still retried


async def test_agents_gone_from_some_sessions_take_turns_in_the_sweep(store: RedisStore) -> None:
    # Two agents present by session patterns, both gone, one a pass (``limit=1``): the one
    # returned goes behind the other, whose turn is next, and then its own again.
    await write_runs(store, [active("x-1", "sw1"), active("x-2", "sw2")])
    await store.mark_present([], 0.001, scoped=[("sw1", ["x-*"])])
    await anyio.sleep(0.01)
    await store.mark_present([], 0.001, scoped=[("sw2", ["x-*"])])
    await anyio.sleep(0.15)
    passes = [await store.gone_owners(0.1, limit=1) for _ in range(3)]
    assert passes == [
        {"sw1": [("x-1", "r-x-1")]},
        {"sw2": [("x-2", "r-x-2")]},
        {"sw1": [("x-1", "r-x-1")]},
    ]


def hub_on(store: RedisStore, grace: float) -> tuple[Hub, RedisDispatcher]:
    """A hub on ``store`` (not serving): its dispatcher sweeps with the hub's own
    ``_agent_lost``, so what the sweep returns is ended as on a running node."""
    hub = Hub(store, RelayOptions(agent_grace=grace), Metrics())
    node = hub.dispatcher
    assert isinstance(node, RedisDispatcher)
    return hub, node


async def test_a_run_whose_record_redis_lost_is_dropped_from_its_owners_set_with_a_warning(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Under an evicting ``maxmemory-policy`` Redis may drop a session's ``runs`` hash on
    # its own while the owner's set still names the Run: the hub finds no such Run, so it
    # would come back in every sweep for ever and its owner would never be forgotten.
    _hub, node = hub_on(store, 0.2)
    for session_id in ("kept", "lost"):
        await store.open_channel(session_id)
    await write_runs(store, [active("kept", "leaver"), active("lost", "leaver")])
    client = store.client()
    try:
        await client.delete(f"{store.prefix}{{lost}}:runs")  # as an eviction would
        await anyio.sleep(0.25)  # the owner never marked present: past the grace
        with caplog.at_level("WARNING", logger="runwire.relay"):
            await node.sweeper.sweep()
        record = await store.run("kept", "r-kept")
        assert record is not None and record.status == "error"
        assert record.error is not None and record.error["code"] == AGENT_LOST
        assert await client.scard(store.keys.owner("leaver")) == 0  # the lost Run dropped too
        assert await client.hget(f"{store.prefix}{{lost}}:meta", "o:r-lost") is None
        warned = [r.getMessage() for r in caplog.records if "lost its record" in r.getMessage()]
        assert len(warned) == 1 and "lost/r-lost" in warned[0]
        caplog.clear()
        with caplog.at_level("WARNING", logger="runwire.relay"):
            await node.sweeper.sweep()  # owning nothing now: forgotten
            assert await client.zscore(store.keys.presence, "leaver") is None
            assert await store.gone_owners(0.2) == {}
            await node.sweeper.sweep()
        assert [r for r in caplog.records if r.levelname == "WARNING"] == []  # warned once
    finally:
        await client.aclose()


async def test_a_run_redis_lost_that_the_sweeping_node_has_loaded_is_ended_not_dropped(
    store: RedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    # The sweeping node watches the session (loaded before Redis lost the record): its
    # registry still knows the Run, so the end is stored (the record written again) and
    # there is nothing to drop.
    hub, node = hub_on(store, 0.2)
    await store.open_channel("lost")
    await write_runs(store, [active("lost", "leaver")])
    channel = await hub.channel("lost")
    channel.holds += 1  # as a watcher on this node keeps it loaded
    client = store.client()
    try:
        await client.delete(f"{store.prefix}{{lost}}:runs")
        await anyio.sleep(0.25)
        with caplog.at_level("WARNING", logger="runwire.relay"):
            await node.sweeper.sweep()
        record = await store.run("lost", "r-lost")
        assert record is not None and record.status == "error"
        assert record.error is not None and record.error["code"] == AGENT_LOST
        assert await client.scard(store.keys.owner("leaver")) == 0
        assert not any("lost its record" in r.getMessage() for r in caplog.records)
    finally:
        channel.holds -= 1
        await client.aclose()


async def test_a_run_redis_lost_the_order_of_is_ended_by_one_sweep_and_loaded_by_a_fresh_node(
    store: RedisStore, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Redis lost the session's ``order`` list (evicted, a partial restore, a DEL) but kept
    # its ``runs`` hash: the record is there, so the sweep keeps the Run, and the hub must
    # find it (the session's load lists every record) or it comes back in every sweep.
    _hub, node = hub_on(store, 0.2)
    await store.open_channel("s")
    three = [
        replace(active("s", "x"), run_id="r1", status="complete", owner=None, seq=1),
        replace(active("s", "leaver"), run_id="r2", seq=2),
        replace(active("s", "x"), run_id="r3", status="cancelled", owner=None, seq=3),
    ]
    await write_runs(store, three)
    client = store.client()
    try:
        await client.delete(f"{store.prefix}{{s}}:order")  # as an eviction would
        await anyio.sleep(0.25)  # the owner never marked present: past the grace
        with caplog.at_level("WARNING", logger="runwire.relay"):
            await node.sweeper.sweep()  # one sweep
            record = await store.run("s", "r2")
            assert record is not None and record.status == "error"
            assert record.error is not None and record.error["code"] == AGENT_LOST
            assert await client.scard(store.keys.owner("leaver")) == 0
            for _ in range(2):
                assert await store.gone_owners(0.2) == {}
                await node.sweeper.sweep()
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 1 and "Run order" in warned[0] and "'s'" in warned[0], warned
        await client.delete(f"{store.prefix}{{s}}:order")  # lost again
        with caplog.at_level("WARNING", logger="runwire.relay"):
            fresh = RedisStore(REDIS_URL, prefix=redis_prefix)  # another node
            await fresh.start()
            try:
                other, _ = hub_on(fresh, 0.2)
                channel = await other.channel("s")
                assert list(channel.registry.runs) == ["r1", "r2", "r3"]
                assert channel.registry.runs["r2"].status == "error"
            finally:
                await fresh.aclose()
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 2 and "Run order" in warned[1], warned  # once on each node
    finally:
        await client.aclose()


async def test_a_run_whose_end_redis_refuses_is_kept_and_ended_by_a_later_sweep(
    store: RedisStore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not to be taken for a Run Redis lost: its record is there, only its end failed.
    _hub, node = hub_on(store, 0.2)
    await store.open_channel("s")
    await write_runs(store, [active("s", "leaver")])
    append = store.append
    refusals = 2

    async def refusing(*args: Any, **kwargs: Any) -> Appended:
        nonlocal refusals
        if refusals:
            refusals -= 1
            raise RunwireError(
                STORE_UNAVAILABLE, "Redis is out of memory: OOM", details={"redis": "OOM"}
            )
        return await append(*args, **kwargs)

    monkeypatch.setattr(store, "append", refusing)
    client = store.client()
    try:
        await anyio.sleep(0.25)
        with caplog.at_level("WARNING", logger="runwire.relay"):
            for _ in range(2):
                await node.sweeper.sweep()
                assert await client.smembers(store.keys.owner("leaver")) == {b'["s","r-s"]'}
                record = await store.run("s", "r-s")
                assert record is not None and record.status == "active"
        assert any("could not end run s/r-s" in r.getMessage() for r in caplog.records)
        assert not any("lost its record" in r.getMessage() for r in caplog.records)
        await node.sweeper.sweep()  # Redis takes writes again
        record = await store.run("s", "r-s")
        assert record is not None and record.status == "error"
        assert await client.scard(store.keys.owner("leaver")) == 0
    finally:
        await client.aclose()
