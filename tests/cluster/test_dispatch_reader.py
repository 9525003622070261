"""A relay node on Redis, in process: its one dispatch reader, and what it reads and keeps."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from redis.asyncio import Redis

import relay
from relay import Server
from relay._cluster import RedisDispatcher
from relay.store._redis import RedisStore
from transport.messages import new_id

from ..relay.wire import RawPeer, prompt
from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def node(redis_prefix: str) -> AsyncIterator[Server]:
    async with relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as server:
        yield server


def dispatcher(server: Server) -> RedisDispatcher:
    found = server.hub.dispatcher
    assert isinstance(found, RedisDispatcher)
    return found


async def test_a_worker_of_a_new_agent_name_is_served_without_waiting_out_the_read(
    node: Server,
) -> None:
    # The reader blocks for up to 4 s on the streams it knows; a worker of another name
    # interrupts it, so that name's Run is dispatched at once, not after the block.
    dispatcher(node).read_block = 4.0
    client = await RawPeer.open(node.url)
    await client.attach("s")
    first = await RawPeer.open(node.url, role="agent", client_id="w-a")
    await first.request({"type": "worker", "agent": "a"})
    await anyio.sleep(0.3)  # the reader is blocked on stream "a" alone
    second = await RawPeer.open(node.url, role="agent", client_id="w-b")
    await second.request({"type": "worker", "agent": "b"})
    run_id = new_id()
    await client.publish("s", prompt(run_id, agent="b"))
    with anyio.fail_after(2):
        assert (await second.next("dispatch", timeout=2))["run_id"] == run_id
    # The interrupted read lost nothing: a Run for "a" still reaches its worker.
    run_a = new_id()
    await client.publish("s", prompt(run_a, agent="a"))
    assert (await first.next("dispatch", timeout=5))["run_id"] == run_a


async def test_entries_a_cut_short_read_was_handed_are_taken_back(node: Server) -> None:
    # Redis may serve a read the node then cancels (a worker of a new name cut it
    # short): the entry is then this node's, unacknowledged, and no worker was given
    # it. Every (re)start of the reader first reads this node's own pending entries.
    server = dispatcher(node)
    client = await RawPeer.open(node.url)
    await client.attach("s")
    redis_client = server.store.client()
    try:
        stream = server.store.dispatch_stream("a")
        await redis_client.xgroup_create(stream, "relay", id="0", mkstream=True)
        run_id = new_id()
        await client.publish("s", prompt(run_id, agent="a"))  # on the stream; no reader
        # The served read whose reply the node never saw.
        [[_, served]] = await redis_client.xreadgroup(
            "relay", server.node_id, {stream: ">"}, count=1
        )
        assert len(served) == 1
        assert (await redis_client.xpending(stream, "relay"))["pending"] == 1
        worker = await RawPeer.open(node.url, role="agent", client_id="w-a")
        await worker.request({"type": "worker", "agent": "a"})
        # Well before claim_idle (10 s), after which any node would claim it.
        got = await worker.next("dispatch", timeout=3)
        assert got["run_id"] == run_id
        # Handed once: reading its own entries again does not hand it a second time.
        await anyio.sleep(0.3)  # the reader is blocked again
        server._widen.set()
        with pytest.raises(TimeoutError):
            await worker.next("dispatch", timeout=1)
    finally:
        await redis_client.aclose()


async def test_a_worker_registering_reads_nothing_of_the_cluster_wide_index(
    node: Server,
) -> None:
    # Workers reconnecting to a node after a restart: each registration reads its
    # agent's stream, not every pending Run of the cluster (the status index).
    server = dispatcher(node)
    client = await RawPeer.open(node.url)
    await client.attach("s")
    for _ in range(5):
        await client.publish("s", prompt(agent="elsewhere"))  # pending, in the index
    redis_client = server.store.client()
    try:

        async def index_reads() -> int:
            stats = await redis_client.info("commandstats")
            return int(stats.get("cmdstat_smembers", {"calls": 0})["calls"])

        with anyio.fail_after(10):  # the node's one read of the index at start is done
            while not server.sweeper.indexed:
                await anyio.sleep(0.05)
        before = await index_reads()
        workers = [
            await RawPeer.open(node.url, role="agent", client_id=f"w-{i}") for i in range(10)
        ]
        for worker in workers:
            assert (await worker.request({"type": "worker", "agent": "a"}))["type"] == "ack"
        assert await index_reads() == before
    finally:
        await redis_client.aclose()


async def test_a_sweep_that_finds_nothing_to_end_leaves_no_session_loaded(node: Server) -> None:
    # The sweeper's node loads a session to end a Run; when the Run has ended already
    # (another holder got there first) it must not keep the session, and its pub/sub,
    # for a session none of its clients watch.
    client = await RawPeer.open(node.url)
    await client.attach("s")
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    await client.close()
    with anyio.fail_after(5):
        while "s" in node.hub.channels:
            await anyio.sleep(0.02)
    await node.hub.agent_lost("s", run_id)  # pending, not active: nothing to end
    await node.hub.agent_lost("s", "no-such-run")
    assert "s" not in node.hub.channels


async def test_a_run_abandoned_behind_many_entries_live_nodes_hold_is_claimed(
    node: Server,
) -> None:
    # XAUTOCLAIM looks at a hundred pending entries per call: a node that always
    # started from the first would never reach an abandoned entry behind more
    # entries than that held (and kept fresh) by live nodes.
    server = dispatcher(node)
    server.claim_idle = 1.0
    redis_client = server.store.client()
    client = await RawPeer.open(node.url)
    stream = server.store.dispatch_stream("a")
    await redis_client.xgroup_create(stream, "relay", id="0", mkstream=True)
    run_ids = [new_id() for _ in range(121)]
    for i, run_id in enumerate(run_ids):
        await client.attach(f"s{i}")
        await client.publish(f"s{i}", prompt(run_id, agent="a"))
    [[_, alive]] = await redis_client.xreadgroup("relay", "alive", {stream: ">"}, count=120)
    [[_, dead]] = await redis_client.xreadgroup("relay", "dead", {stream: ">"}, count=1)
    assert len(alive) == 120 and len(dead) == 1
    held = [entry_id for entry_id, _ in alive]

    async def keep_fresh() -> None:  # a live node refreshes what it holds
        while True:
            await redis_client.xclaim(stream, "relay", "alive", 0, held, justid=True)
            await anyio.sleep(0.2)

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_fresh)
        await anyio.sleep(1.2)  # the dead node's entry is past claim_idle
        worker = await RawPeer.open(node.url, role="agent", client_id="w-a")
        await worker.request({"type": "worker", "agent": "a"})
        got = await worker.next("dispatch", timeout=8)
        assert got["run_id"] == run_ids[-1]
        tg.cancel_scope.cancel()
    await redis_client.aclose()


async def test_many_runs_starting_at_once_cost_the_node_no_redis_connection_each(
    node: Server,
) -> None:
    # Each Run leaving ``pending`` had its dispatch entry acknowledged by a task of its
    # own on a pooled redis-py client: a burst of starts opened a Redis connection per
    # Run, which the pool kept open for ever, and past the pool's limit (100) the
    # acknowledgements failed ("Too many connections"), leaving the entries pending in
    # the group until another read claimed them as idle.
    runs = 150
    store = node.store
    assert isinstance(store, RedisStore)
    worker = await RawPeer.open(node.url, role="agent", client_id="w-burst")
    await worker.request({"type": "worker", "agent": "default"})
    client = await RawPeer.open(node.url)
    sessions = [f"burst-{i}" for i in range(runs)]
    run_ids = {session: new_id() for session in sessions}
    for session in sessions:
        await client.attach(session)
        await client.publish(session, prompt(run_ids[session]))
        await client.request({"type": "detach", "session_id": session})
    await client.close()
    with anyio.fail_after(20):
        for _ in sessions:
            await worker.next("dispatch", timeout=20)
    assert len(dispatcher(node).held) == runs
    for session in sessions:
        await worker.attach(session)
    for i, session in enumerate(sessions):  # every start at once, not one by one
        entry = {"kind": "run", "id": new_id(), "run_id": run_ids[session], "status": "active"}
        await worker.send(
            {"type": "publish", "req": f"start-{i}", "session_id": session, "entry": entry}
        )
    with anyio.fail_after(20):
        acked = 0
        while acked < runs:
            frame = await worker.recv(timeout=20)
            assert frame["type"] != "error", frame
            acked += frame["type"] == "ack"
    # Every entry was acknowledged at once (not left for an idle claim, 10 s later).
    redis = Redis.from_url(REDIS_URL)
    try:
        with anyio.fail_after(5):
            while (await redis.xpending(store.dispatch_stream("default"), "relay"))["pending"]:
                await anyio.sleep(0.05)
    finally:
        await redis.aclose()
    assert not dispatcher(node).held
    pool = store.connections.pool
    opened = len(pool._available_connections) + len(pool._in_use_connections)
    assert opened <= 5, f"the node holds {opened} Redis connections after {runs} starts"
    await worker.close()


async def test_agent_names_that_come_and_go_leave_no_stream_state_behind(node: Server) -> None:
    # A node kept, for every agent name it ever had a worker of, an empty list of
    # workers and the name among the streams whose group it made: growing with every
    # name for as long as it ran.
    keeper = await RawPeer.open(node.url, role="agent", client_id="w-keep")
    await keeper.request({"type": "worker", "agent": "kept"})
    for i in range(10):
        peer = await RawPeer.open(node.url, role="agent", client_id=f"w-name-{i}")
        assert (await peer.request({"type": "worker", "agent": f"name-{i}"}))["type"] == "ack"
        await anyio.sleep(0.05)  # the reader takes the name up (its group is made)
        await peer.close()
    found = dispatcher(node)
    with anyio.fail_after(5):
        while set(found.workers) != {"kept"} or found._groups != {"kept"}:
            await anyio.sleep(0.02)
    assert set(found._claim_from) <= {found.store.dispatch_stream("kept")}
    # A name that comes back is served again.
    client = await RawPeer.open(node.url)
    await client.attach("s-back")
    back = await RawPeer.open(node.url, role="agent", client_id="w-back")
    await back.request({"type": "worker", "agent": "name-3"})
    run_id = new_id()
    await client.publish("s-back", prompt(run_id, agent="name-3"))
    assert (await back.next("dispatch", timeout=5))["run_id"] == run_id
    for each in (keeper, client, back):
        await each.close()
