"""Live delivery and session lifecycle across two relay nodes in this process on one Redis.

Node B's pub/sub is made late or lossy where a test needs B to lag behind what
node A stored (pub/sub is at-most-once, and a node's deliverer can be busy).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from redis import Redis
from websockets.exceptions import ConnectionClosed

import relay
from relay import Server
from relay.store._redis import RedisStore
from relay.store._redis_live import Listener, _Channel, _Sub

from ..relay.test_http_api import call, post
from ..relay.wire import RawPeer, prompt, run_status
from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio


@contextmanager
def pubsub_lost(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While in the block, every pub/sub message ``server``'s node receives is lost."""
    listener = server.store._listener  # type: ignore[attr-defined]
    take = Listener._take

    def lossy(self: Listener, channel: _Channel, payload: bytes) -> list[_Sub]:
        if self is listener:
            return []
        return take(self, channel, payload)

    with monkeypatch.context() as patch:
        patch.setattr(Listener, "_take", lossy)
        yield


async def close_code(peer: RawPeer, timeout: float = 5.0) -> int | None:
    """The code the relay closes ``peer`` with (frames received meanwhile are kept)."""
    with anyio.fail_after(timeout):
        try:
            while True:
                peer.inbox.append(await peer.recv(timeout))
        except ConnectionClosed:
            pass
    return peer.ws.close_code


async def expired(key: str) -> None:
    """Until Redis dropped ``key`` (its own expiry: nothing to wait on but the clock)."""
    with Redis.from_url(REDIS_URL) as raw, anyio.fail_after(10):
        while raw.exists(key):
            await anyio.sleep(0.05)


def serials(entries: list[dict[str, Any]]) -> list[int]:
    return [entry["serial"] for entry in entries]


async def test_a_client_resumes_on_a_node_that_has_not_yet_seen_its_last_entry(
    nodes: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    watcher = await RawPeer.open(b.url)  # keeps the session loaded on node B
    await watcher.attach("s")
    client = await RawPeer.open(a.url)
    first = await client.attach("s")
    assert (await client.publish("s", prompt()))["serial"] == 1
    assert serials(await watcher.entries(1)) == [1]
    with pubsub_lost(b, monkeypatch):  # node B has not heard of serial 2 yet
        assert (await client.publish("s", prompt()))["serial"] == 2
        assert serials(await client.entries(2)) == [1, 2]
        await client.close()
        # The client's connection drops; the balancer sends it to node B, where it
        # resumes from the last serial it saw.
        again = await RawPeer.open(b.url)
        resumed = await again.attach("s", from_serial=2, epoch=first["epoch"])
    assert resumed["reset"] is False, resumed
    assert resumed["entries"] == []
    assert resumed["head"] == 2
    # Live delivery goes on from there: no gap, no duplicate, on both of B's clients.
    other = await RawPeer.open(a.url)
    await other.attach("s")
    assert (await other.publish("s", prompt()))["serial"] == 3
    assert serials(await again.entries(1)) == [3]
    assert serials(await watcher.entries(2)) == [2, 3]


async def frames_until_closed(peer: RawPeer, timeout: float = 5.0) -> int | None:
    """Keep what ``peer`` receives in its inbox until the relay closes it; its close code,
    or None if it was still open after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        try:
            while True:
                peer.inbox.append(await peer.recv(timeout + 1))
        except ConnectionClosed:
            return peer.ws.close_code
    return None


def delivered(peer: RawPeer) -> list[int]:
    """The serials of the entries ``peer`` was delivered (from its inbox)."""
    return [e["serial"] for f in peer.inbox if f["type"] == "deliver" for e in f["entries"]]


async def watched_on_b(a: Server, b: Server) -> tuple[RawPeer, dict[str, Any]]:
    """A watcher on node B (it keeps session ``s`` loaded there) and its attach reply,
    once it was delivered serials 1-3, published through node A."""
    watcher = await RawPeer.open(b.url)
    attached = await watcher.attach("s")
    for n in range(3):
        assert (await post(a, "s", {"message": f"old-{n}"})).json()["serial"] == n + 1
    assert serials(await watcher.entries(3)) == [1, 2, 3]
    return watcher, attached


async def test_a_resume_from_a_history_redis_lost_under_a_lagging_node_is_reset_not_mixed(
    expiring: tuple[Server, Server], redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that saw serial 4 through node A resumes on node B, which took in 1-3 and
    has not yet heard that Redis dropped the session and node A made it anew (serials
    1-6 of a new epoch). B catches up from the store before it answers: it must see the
    new epoch there and reset, never take the new history's 4-6 into the old one (its
    watcher delivered them, the client resumed with them as if they came after 4)."""
    a, b = expiring
    watcher, first = await watched_on_b(a, b)
    with pubsub_lost(b, monkeypatch):  # node B hears nothing more of the session
        assert (await post(a, "s", {"message": "old-3"})).json()["serial"] == 4
        await expired(f"{redis_prefix}{{s}}:meta")
        for n in range(6):
            assert (await post(a, "s", {"message": f"new-{n}"})).json()["serial"] == n + 1
        client = await RawPeer.open(b.url)
        resumed = await client.attach("s", from_serial=4, epoch=first["epoch"])
        code = await frames_until_closed(watcher)
    assert resumed["reset"] is True and resumed["epoch"] != first["epoch"], (
        f"node B resumed the client in the old history with the new one's entries: {resumed}"
    )
    texts = [e["message"]["parts"][0]["text"] for e in resumed["entries"]]
    assert texts == [f"new-{n}" for n in range(6)]
    assert delivered(watcher) == [], "node B delivered the new history's entries as the old's"
    assert code == 4009


async def test_a_publish_that_looks_ahead_past_a_history_redis_lost_resets_the_node(
    expiring: tuple[Server, Server], redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steer published through node B for a Run B has not heard of makes B read what the
    store holds beyond its last serial (the prompt may have come through another node).
    When Redis dropped the session and node A made it anew, what B reads there is of the
    new epoch: B resets (its clients rebuild) instead of delivering it as the old history's,
    and the steer goes into the new history."""
    a, b = expiring
    watcher, _ = await watched_on_b(a, b)
    with pubsub_lost(b, monkeypatch):
        await expired(f"{redis_prefix}{{s}}:meta")
        for n in range(4):
            body = {"message": f"new-{n}", "run_id": f"r{n}"}
            assert (await post(a, "s", body)).json()["serial"] == n + 1
        steered = await post(b, "s", {"message": "faster", "intent": "steer", "run_id": "r3"})
        code = await frames_until_closed(watcher)
    assert delivered(watcher) == [], "node B delivered the new history's entries as the old's"
    assert code == 4009
    assert steered.status == 201 and steered.json()["serial"] == 5, steered.body


async def test_clients_of_a_session_redis_dropped_while_they_watched_it_rebuild_and_go_on(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    a, b = expiring
    client = await RawPeer.open(a.url)
    first = await client.attach("s")
    watcher = await RawPeer.open(b.url)
    await watcher.attach("s")
    assert (await client.publish("s", prompt()))["serial"] == 1
    assert serials(await watcher.entries(1)) == [1]
    await expired(f"{redis_prefix}{{s}}:meta")  # idle for longer than history_ttl

    # The session's history is gone: the publish that finds out is not stored, and its
    # client is closed to rebuild, like every client of a history Redis lost (before,
    # it stayed attached and every publish was refused EPOCH_MISMATCH).
    entry = prompt()
    await client.send({"type": "publish", "req": 99, "session_id": "s", "entry": entry})
    assert await close_code(client) == 4009
    assert all(frame.get("type") != "ack" for frame in client.inbox)
    client = await RawPeer.open(a.url)
    rebuilt = await client.attach("s", from_serial=1, epoch=first["epoch"])
    assert rebuilt["reset"] is True and rebuilt["epoch"] != first["epoch"]
    assert (await client.publish("s", entry))["serial"] == 1  # its retry is stored

    # The watcher on the other node is reset too, and sees the new history from there.
    assert await close_code(watcher) == 4009
    watcher = await RawPeer.open(b.url)
    again = await watcher.attach("s", from_serial=1, epoch=first["epoch"])
    assert again["reset"] is True and again["epoch"] == rebuilt["epoch"]
    assert serials(again["entries"]) == [1]
    assert (await client.publish("s", prompt()))["serial"] == 2
    assert serials(await watcher.entries(1)) == [2]


async def test_a_client_attaching_to_a_reset_session_an_event_stream_still_holds_gets_it_live(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    a, b = expiring
    watcher = await RawPeer.open(b.url)
    first = await watcher.attach("s")
    assert (await watcher.publish("s", prompt()))["serial"] == 1
    await expired(f"{redis_prefix}{{s}}:meta")
    async with anyio.create_task_group() as tg:
        # An HTTP client waits on B's event stream of the session (it holds the channel).
        tg.start_soon(call, b, "GET", "/v1/sessions/s/events?from=1&wait=2")
        with anyio.fail_after(5):
            while not b.hub.channels["s"].listeners:
                await anyio.sleep(0.01)
        # Through node A the session starts over; node B's clients are told to rebuild.
        writer = await RawPeer.open(a.url)
        fresh = await writer.attach("s")
        assert fresh["epoch"] != first["epoch"]
        assert (await writer.publish("s", prompt()))["serial"] == 1
        assert await close_code(watcher) == 4009
        watcher = await RawPeer.open(b.url)
        again = await watcher.attach("s", from_serial=1, epoch=first["epoch"])
        assert again["reset"] is True and again["epoch"] == fresh["epoch"], again
        assert serials(again["entries"]) == [1]
        assert (await writer.publish("s", prompt()))["serial"] == 2
        assert serials(await watcher.entries(1)) == [2]


async def test_a_client_that_leaves_while_its_publish_is_stored_leaves_no_subscription_behind(
    nodes: tuple[Server, Server], redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = nodes
    store = a.store
    assert isinstance(store, RedisStore)
    inner = store.append
    called, go_on = anyio.Event(), anyio.Event()

    async def slow_append(*args: Any, **kwargs: Any) -> Any:
        called.set()
        await go_on.wait()  # a round trip to Redis that takes a while
        return await inner(*args, **kwargs)

    monkeypatch.setattr(store, "append", slow_append)
    client = await RawPeer.open(a.url)
    await client.attach("s")
    await client.send({"type": "publish", "req": 1, "session_id": "s", "entry": prompt()})
    with anyio.fail_after(5):
        await called.wait()
    await client.close()  # the client goes while its entry is being stored
    with anyio.fail_after(5):
        while a.hub.peers:
            await anyio.sleep(0.01)
    go_on.set()
    with anyio.fail_after(5):
        while a.hub.tasks:  # the publish, and what the relay publishes after it
            await anyio.sleep(0.01)
    assert (await store.head("s"))[1] == 1  # stored
    # Nobody on node A watches the session any more: the node let go of it, and of its
    # pub/sub subscription, rather than keep both for as long as it runs.
    assert "s" not in a.hub.channels
    with Redis.from_url(REDIS_URL) as raw, anyio.fail_after(5):
        while raw.execute_command("PUBSUB", "SHARDNUMSUB", store.live_channel("s"))[1]:
            await anyio.sleep(0.01)


@pytest.mark.parametrize("history_ttl", [None, 60.0], ids=["no-ttl", "ttl"])
async def test_a_session_whose_keys_redis_lost_but_not_the_salt_gets_a_new_epoch(
    redis_prefix: str, history_ttl: float | None
) -> None:
    """Redis loses a written session's keys but keeps the epoch salt (evicted under an
    eviction policy, a failover to a replica they had not reached, a restore of an older
    snapshot: not history_ttl's expiry, which the quarters cover). Another client then
    writes the session again. A client that saw serials 1-3 of the old history must be
    answered ``reset``, never resumed after 3 in the new one (it would never get new 1-3).
    The new history gets a random epoch (an epoch derived from a salt kept in Redis and
    the session id, tried once so that reads need not write, failed this test)."""
    ttl: dict[str, Any] = {"prefix": redis_prefix, "history_ttl": history_ttl}
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, **ttl)) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, **ttl)) as b,
    ):
        client = await RawPeer.open(a.url)
        first = await client.attach("s")
        for n in range(3):
            assert (await client.publish("s", prompt()))["serial"] == n + 1
        await client.close()
        with anyio.fail_after(5):
            while "s" in a.hub.channels:  # no node has it loaded: nobody sees the loss
                await anyio.sleep(0.01)
        with Redis.from_url(REDIS_URL) as raw:
            raw.delete(*raw.scan_iter(match=f"{redis_prefix}{{s}}*"))
        writer = await RawPeer.open(b.url)
        await writer.attach("s")
        for n in range(5):
            assert (await writer.publish("s", prompt()))["serial"] == n + 1
        back = await RawPeer.open(a.url)
        resumed = await back.attach("s", from_serial=3, epoch=first["epoch"])
        assert resumed["reset"] is True, f"resumed after 3 in another history: {resumed}"


async def test_a_session_redis_dropped_while_its_run_waited_for_a_slot_gives_its_slots_back(
    redis_prefix: str,
) -> None:
    """A node keeps a session loaded while a Run of it waits for a slot of
    ``max_concurrent_runs``. When Redis drops that session (``history_ttl``) and everyone
    there leaves, the node puts it down as any other: its Runs are gone, so the slot its
    active Run held is free for another session's, and it is not offered freed slots."""
    store = RedisStore(REDIS_URL, prefix=redis_prefix, history_ttl=0.5)
    async with relay.serve(port=0, store=store, max_concurrent_runs=1) as node:
        client = await RawPeer.open(node.url)
        agent = await RawPeer.open(node.url, role="agent", client_id="agent-1")
        await client.attach("s")
        await agent.attach("s")
        assert (await client.publish("s", prompt(run_id="a1")))["type"] == "ack"
        assert (await agent.publish("s", run_status("a1", "active")))["type"] == "ack"
        reply = await client.publish("s", prompt(run_id="q"))
        assert reply["type"] == "ack"
        assert node.hub.channels["s"].registry.runs["q"].status == "queued"  # no slot
        await expired(f"{redis_prefix}{{s}}:meta")  # idle for longer than history_ttl
        await client.send({"type": "publish", "req": 9, "session_id": "s", "entry": prompt()})
        assert await close_code(client) == 4009
        await close_code(agent)
        with anyio.fail_after(5):
            while "s" in node.hub.channels:
                await anyio.sleep(0.02)
        assert node.hub.slots.in_use == 0
        other = await RawPeer.open(node.url)
        await other.attach("t")
        assert (await other.publish("t", prompt(run_id="t1")))["type"] == "ack"
        assert node.hub.channels["t"].registry.runs["t1"].status == "pending"
        await other.close()


async def test_a_slot_a_node_gives_back_when_it_puts_a_session_down_goes_to_a_queued_run(
    redis_prefix: str,
) -> None:
    """Node B counts the slots of the Runs of the sessions it has loaded. A client on B
    leaves a session whose Run goes on (through node A): B puts the session down and gives
    back its slot, which a Run queued on B in another session then takes; before, nothing
    told it, and it waited for a Run on B to end."""
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as a,
        relay.serve(
            port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix), max_concurrent_runs=1
        ) as b,
    ):
        agent = await RawPeer.open(a.url, role="agent", client_id="agent-a")
        await agent.attach("first")
        leaving = await RawPeer.open(b.url)
        await leaving.attach("first")
        assert (await leaving.publish("first", prompt(run_id="r")))["type"] == "ack"
        assert (await agent.publish("first", run_status("r", "active")))["type"] == "ack"
        waiting = await RawPeer.open(b.url)
        await waiting.attach("second")
        assert (await waiting.publish("second", prompt(run_id="q")))["type"] == "ack"
        assert b.hub.channels["second"].registry.runs["q"].status == "queued"  # no slot
        await leaving.close()  # B puts "first" down
        with anyio.fail_after(5):
            while b.hub.channels["second"].registry.runs["q"].status == "queued":
                await anyio.sleep(0.02)
        assert b.hub.channels["second"].registry.runs["q"].status == "pending"
        await waiting.close()
        await agent.close()
