"""Dispatch of new Runs across nodes when things fail or change elsewhere: each Run is
handed to one worker, every node goes on dispatching and shares its Runs fairly."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import redis

import relay
from relay._cluster import RedisDispatcher
from relay.store._redis import RedisStore
from transport.messages import new_id

from ..relay.wire import RawPeer, prompt
from .conftest import REDIS_URL, Cluster, Node
from .test_redis_outage import ThrowawayRedis, throwaway

__all__ = ["throwaway"]  # the fixture, used by name

pytestmark = pytest.mark.anyio


def dispatcher(server: relay.Server) -> RedisDispatcher:
    found = server.hub.dispatcher
    assert isinstance(found, RedisDispatcher)
    return found


async def dispatches(peer: RawPeer, seconds: float) -> list[str]:
    """The run ids of the dispatches ``peer`` was sent, waiting ``seconds`` for more."""
    found = [f["run_id"] for f in peer.inbox if f["type"] == "dispatch"]
    peer.inbox = [f for f in peer.inbox if f["type"] != "dispatch"]
    with anyio.move_on_after(seconds):
        while True:
            frame: dict[str, Any] = await peer.recv(timeout=seconds + 1)
            if frame["type"] == "dispatch":
                found.append(frame["run_id"])
    return found


@dataclass
class HeldRun:
    """A Run a worker on the holder node (a process) was handed and has not started; the
    other node (in this process, ``server`` its dispatcher) watches the session."""

    holder: Node
    other: relay.Server
    server: RedisDispatcher
    client: RawPeer
    first: RawPeer


@asynccontextmanager
async def a_run_held_on_a_node(throwaway: ThrowawayRedis) -> AsyncIterator[HeldRun]:
    url = f"redis://127.0.0.1:{throwaway.port}/0"
    holder = await Cluster(store=url).start_node(grace=1.0)
    try:
        async with relay.serve(port=0, store=RedisStore(url), agent_grace=1.0) as other:
            server = dispatcher(other)
            server.claim_idle = 2.5  # (10 s by default) the holder refreshes every 0.33 s
            client = await RawPeer.open(other.url)
            await client.attach("s")
            first = await RawPeer.open(holder.url, role="agent", client_id="w-1")
            await first.request({"type": "worker", "agent": "default"})
            run_id = new_id()
            await client.publish("s", prompt(run_id))
            assert (await first.next("dispatch"))["run_id"] == run_id  # not started yet
            yield HeldRun(holder, other, server, client, first)
    finally:
        holder.kill()


@asynccontextmanager
async def away_longer_than_claim_idle(
    throwaway: ThrowawayRedis, held: HeldRun
) -> AsyncIterator[dict[str, Any]]:
    """Redis away for longer than ``claim_idle``, the holder stopped meanwhile and until
    the block ends (it comes back a moment after the other node); yields a new Run's
    prompt, acknowledged by the other node once it has Redis back."""
    throwaway.save_and_kill()
    held.holder.proc.send_signal(signal.SIGSTOP)
    try:
        await anyio.sleep(held.server.claim_idle + 0.5)
        throwaway.start()
        later = prompt()
        with anyio.fail_after(20):
            while (await held.client.publish("s", later, timeout=10))["type"] != "ack":
                await anyio.sleep(0.2)
        yield later
    finally:
        held.holder.proc.send_signal(signal.SIGCONT)


async def handed(second: RawPeer, run_id: str) -> list[str]:
    """What ``second`` is handed until ``run_id`` is among it."""
    with anyio.fail_after(10):
        found = await dispatches(second, 0.0)
        while run_id not in found:
            found += await dispatches(second, 0.1)
    return found


async def handed_nothing_else(second: RawPeer, held: HeldRun, so_far: list[str]) -> None:
    """Past ``claim_idle`` with a margin, the holder running again (it refreshed its entry
    meanwhile): ``second`` got only the new Run, and the holder's worker nothing more."""
    so_far += await dispatches(second, held.server.claim_idle + 1.0)
    assert len(so_far) == 1, so_far
    assert await dispatches(held.first, 0.0) == []  # and it was not handed it twice


async def test_a_run_held_by_a_live_node_goes_to_no_second_worker_after_redis_was_away_a_while(
    throwaway: ThrowawayRedis,
) -> None:
    # Redis counts a held entry's idle time on its own clock, outage included, so every
    # entry comes back from an outage longer than claim_idle looking abandoned. The
    # node whose reader reaches Redis first (each retries every 0.5 s: which one is
    # chance) must not take the others' entries before they could refresh them: a Run
    # already handed to a live worker would be handed to a second one. Here the holder
    # comes back a moment after the other node (stopped just that long, far less than
    # claim_idle), as it does by chance about half the time.
    async with a_run_held_on_a_node(throwaway) as held:
        second = await RawPeer.open(held.other.url, role="agent", client_id="w-2")
        await second.request({"type": "worker", "agent": "default"})
        async with away_longer_than_claim_idle(throwaway, held) as later:
            # The other node's reader is back once it dispatches the new Run (it claims
            # idle entries before it reads new ones).
            so_far = await handed(second, later["run_id"])
        await handed_nothing_else(second, held, so_far)


async def test_a_reader_that_starts_after_redis_came_back_claims_nothing_held_by_live_nodes(
    throwaway: ThrowawayRedis,
) -> None:
    # The same outage, seen by a node that had no worker then: its reader starts only when
    # its first worker registers, just after Redis came back, so it never saw the outage.
    # It must not take the held entries at once either: Redis counts the outage as idle
    # time for them too, and the holder (back a moment later) would refresh them.
    async with a_run_held_on_a_node(throwaway) as held:
        assert held.server._reader is None  # no worker on this node yet
        async with away_longer_than_claim_idle(throwaway, held) as later:
            second = await RawPeer.open(held.other.url, role="agent", client_id="w-2")
            await second.request({"type": "worker", "agent": "default"})
            so_far = await handed(second, later["run_id"])
        await handed_nothing_else(second, held, so_far)


async def test_a_node_whose_store_fails_a_dispatch_read_goes_on_dispatching(
    throwaway: ThrowawayRedis,
) -> None:
    # The reader reads a Run off the stream, then reads its record through the store's
    # connection; if that one fails (here Redis, at its client limit, refuses the
    # store's new connection after its old one was killed), the reader must retry
    # once Redis takes it again, not end and leave the node's workers without Runs.
    url = f"redis://127.0.0.1:{throwaway.port}/0"
    raw = redis.Redis(port=throwaway.port)
    try:
        async with (
            relay.serve(port=0, store=RedisStore(url)) as node,
            relay.serve(port=0, store=RedisStore(url)) as front,
        ):
            store = dispatcher(node).store
            worker = await RawPeer.open(node.url, role="agent", client_id="w-1")
            await worker.request({"type": "worker", "agent": "default"})
            client = await RawPeer.open(front.url)
            await client.attach("s")
            [conn_id] = await store.pipeline.call(("CLIENT", "ID"))
            raw.config_set("maxclients", 1)
            raw.client_kill_filter(_id=conn_id)
            run_id = new_id()
            await client.publish("s", prompt(run_id))
            stream = store.dispatch_stream("default")
            with anyio.fail_after(10):  # the node's reader has it
                while raw.xpending(stream, "relay")["pending"] == 0:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.2)
            assert not await store.healthy()  # the read of its record failed as well
            raw.config_set("maxclients", 10000)
            assert (await worker.next("dispatch", timeout=5))["run_id"] == run_id
            later = new_id()
            await client.publish("s", prompt(later))
            assert (await worker.next("dispatch", timeout=5))["run_id"] == later
    finally:
        raw.close()


async def test_runs_cancelled_before_their_worker_started_them_leave_its_node_sharing_fairly(
    redis_prefix: str,
) -> None:
    # A Run leaves its worker's count of Runs handed out and not started when it leaves
    # pending, also when that happens on another node in a session this node has not
    # loaded (an interrupt sent there cancels it before its worker attached): else the
    # node counts it for ever, hands that worker fewer Runs, and keeps its entry.
    def serve() -> Any:
        store = RedisStore(REDIS_URL, prefix=redis_prefix)
        return relay.serve(port=0, store=store, agent_grace=1.0)  # a heartbeat every 0.33 s

    async with serve() as node, serve() as front:
        client = await RawPeer.open(front.url)
        await client.attach("s")
        first = await RawPeer.open(node.url, role="agent", client_id="w-1")
        await first.request({"type": "worker", "agent": "default"})
        for _ in range(3):  # each interrupts (cancels) the one before, not started yet
            run_id = new_id()
            await client.publish("s", {**prompt(run_id), "multitask": "interrupt"})
            assert (await first.next("dispatch"))["run_id"] == run_id
        with anyio.move_on_after(3):  # a few heartbeats: the node looks at what it holds
            while len(dispatcher(node).held) > 1:
                await anyio.sleep(0.02)
        second = await RawPeer.open(node.url, role="agent", client_id="w-2")
        await second.request({"type": "worker", "agent": "default"})
        await client.attach("t")
        for _ in range(4):  # each to the worker with the fewest Runs not started
            await client.publish("t", prompt())
        handed = await dispatches(first, 0.0), await dispatches(second, 0.0)
        with anyio.fail_after(5):
            while len(handed[0]) + len(handed[1]) < 4:
                handed[0].extend(await dispatches(first, 0.1))
                handed[1].extend(await dispatches(second, 0.1))
        assert (len(handed[0]), len(handed[1])) == (2, 2)  # the first had one already


async def test_a_node_forgets_the_runs_it_held_when_redis_lost_its_data(
    throwaway: ThrowawayRedis, caplog: pytest.LogCaptureFixture
) -> None:
    # Redis restarted without persistence: the Runs a node held (handed to a worker, not
    # started) no longer exist, nor do their stream entries or the consumer group. The
    # node must forget them (held, assigned, records), so its worker's count of Runs not
    # started is right again: a worker that looks busy with Runs that are gone gets
    # fewer new ones. The refresh that finds the group gone (NOGROUP) forgets them at
    # once, and the heartbeat goes on (its sweep and the claim clock are not held up).
    url = f"redis://127.0.0.1:{throwaway.port}/0"
    async with relay.serve(port=0, store=RedisStore(url), agent_grace=1.0) as node:
        server = dispatcher(node)
        client = await RawPeer.open(node.url)
        await client.attach("s")
        worker = await RawPeer.open(node.url, role="agent", client_id="w-1")
        await worker.request({"type": "worker", "agent": "default"})
        run_id = new_id()
        await client.publish("s", prompt(run_id))
        assert (await worker.next("dispatch"))["run_id"] == run_id  # not started
        assert list(server.held) == [("s", run_id)]

        assert throwaway.proc is not None
        throwaway.proc.kill()  # no save: it comes back empty
        throwaway.proc.wait()
        throwaway.start()
        with anyio.fail_after(10):
            while server.held or server.assigned or server.records:
                await anyio.sleep(0.05)
        failed = [r for r in caplog.records if r.exc_info and "NOGROUP" in str(r.exc_info[1])]
        assert failed == [], "a heartbeat failed on the group Redis lost"
        # And it goes on dispatching, on the group its reader made again.
        again = await RawPeer.open(node.url)
        await again.attach("t")
        later = new_id()
        assert (await again.publish("t", prompt(later)))["type"] == "ack"
        assert (await worker.next("dispatch", timeout=10))["run_id"] == later
