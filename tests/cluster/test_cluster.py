"""Two and three relay nodes (separate processes) on one Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import psutil  # type: ignore[import-untyped]
import pytest
import redis

import agent_side
import client_side
from agent_side import AbortSignal, Run
from tests.relay.wire import RawPeer, prompt, run_status
from transport import UIMessage, message_text
from transport.messages import new_id

from .conftest import REDIS_URL, Balancer, Cluster, Node

pytestmark = pytest.mark.anyio


async def words(n: int, tag: str, signal: AbortSignal, delay: float = 0.005) -> AsyncIterator[str]:
    for i in range(n):
        if signal.aborted:
            return
        yield f"{tag}-{i} "
        with anyio.move_on_after(delay):
            await signal.wait()


def model_for(n: int, delay: float = 0.005) -> Callable[[list[UIMessage], AbortSignal], Any]:
    def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        tag = message_text(messages[-1]).split()[0] if messages else "x"
        return words(n, tag, signal, delay)

    return model


async def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def test_client_agent_and_second_device_on_three_nodes(cluster: Cluster) -> None:
    a, b, c = [await cluster.start_node() for _ in range(3)]
    lengths = {"first": 400, "steer": 5, "second": 100_000}

    def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        tag = message_text(messages[-1]).split()[0]
        return words(lengths[tag], tag, signal)

    worker = agent_side.Agent(b.url)

    @worker.on_run
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with (
        worker,
        client_side.connect(a.url, "trip") as phone,
        client_side.connect(c.url, "trip") as laptop,
    ):
        run = await phone.send("first plan")
        await wait_until(
            lambda: any("first-3" in message_text(vm.message) for vm in laptop.view.messages())
        )
        delivery = run.steer("steer shorter")
        assert (await delivery.outcome).consumed
        result = await run.result()
        assert result.status == "complete"
        # The second device saw the same conversation and the same outcome.
        await wait_until(lambda: laptop.view.tree.outcome(delivery.message.id) is not None)
        outcome = laptop.view.tree.outcome(delivery.message.id)
        assert outcome is not None and outcome.consumed
        assert [vm.message.id for vm in laptop.view.messages()] == [
            vm.message.id for vm in phone.view.messages()
        ]
        # Cancel from the second device, of a Run started on the first.
        second = await phone.send("second long")
        await wait_until(lambda: (laptop.view.run(second.run_id) or second).status == "active")
        await laptop.cancel(second.run_id)
        assert (await second.result()).status == "cancelled"
        # A network drop on the phone: it resumes with no gap and no duplicate.
        await phone.link.conn.kill_socket()
        third = await phone.send("steer again")
        assert (await third.result()).status == "complete"
        ids = [vm.message.id for vm in phone.view.messages()]
        assert len(ids) == len(set(ids))
        await wait_until(lambda: [vm.message.id for vm in laptop.view.messages()] == ids)


async def test_a_node_killed_mid_stream_the_client_resumes_on_another(cluster: Cluster) -> None:
    a, b, c = [await cluster.start_node() for _ in range(3)]
    worker = agent_side.Agent(b.url)

    @worker.on_run
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model_for(300, delay=0.01))

    lb = Balancer(a.url)
    async with anyio.create_task_group() as tg:
        await tg.start(lb.serve)
        async with worker, client_side.connect(lb.url, "s") as session:
            run = await session.send("story go")
            await wait_until(
                lambda: any(
                    "story-20" in message_text(vm.message) for vm in session.view.messages()
                )
            )
            lb.point_at(c.url)
            a.kill()  # the node the client was on dies mid-stream
            result = await run.result()
            assert result.status == "complete"
            replies = [
                message_text(vm.message)
                for vm in session.view.messages()
                if vm.message.role == "assistant"
            ]
            assert replies == ["".join(f"story-{i} " for i in range(300))]
            serials = [vm.serial for vm in session.view.messages()]
            assert serials == sorted(set(serials))
        tg.cancel_scope.cancel()


async def test_simultaneous_sends_through_two_nodes_get_distinct_ordered_serials(
    cluster: Cluster,
) -> None:
    a, b = [await cluster.start_node() for _ in range(2)]
    pa = await RawPeer.open(a.url)
    pb = await RawPeer.open(b.url)
    await pa.attach("race")
    await pb.attach("race")
    acked: list[int] = []

    async def send_many(peer: RawPeer) -> None:
        for _ in range(40):
            reply = await peer.publish("race", prompt())
            assert reply["type"] == "ack", reply
            acked.append(reply["serial"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_many, pa)
        tg.start_soon(send_many, pb)
    assert sorted(acked) == list(range(1, 81))
    for peer in (pa, pb):
        got = await peer.entries(80)
        assert [e["serial"] for e in got] == list(range(1, 81))


async def test_a_worker_that_dies_before_starting_hands_its_run_to_another(
    cluster: Cluster, redis_prefix: str
) -> None:
    a, b = [await cluster.start_node() for _ in range(2)]
    w1 = await RawPeer.open(a.url, role="agent")
    w2 = await RawPeer.open(b.url, role="agent")
    await w1.request({"type": "worker"})
    await w2.request({"type": "worker"})
    client = await RawPeer.open(a.url)
    await client.attach("s")
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    got, other = None, None
    with anyio.fail_after(10):
        while got is None:
            for w, o in ((w1, w2), (w2, w1)):
                try:
                    d = await w.next("dispatch", timeout=0.2)
                except TimeoutError:
                    continue
                assert d["run_id"] == run_id
                got, other = w, o
                break
    assert other is not None
    got.ws.transport.abort()
    d = await other.next("dispatch", timeout=15)
    assert d["run_id"] == run_id
    # The second worker starts it; nobody else is handed it, and the stream is empty.
    await other.attach("s")
    assert (await other.publish("s", run_status(run_id, "active")))["type"] == "ack"
    assert waiting(redis_prefix) == []


def waiting(prefix: str, agent: str = "default") -> list[str]:
    """Run ids on an agent's dispatch stream (Runs offered to its workers), oldest first."""
    with redis.Redis.from_url(REDIS_URL) as client:
        return [f[b"r"].decode() for _, f in client.xrange(f"{prefix}agent:{agent}:runs")]


async def test_runs_started_by_agents_that_are_not_workers_leave_no_dispatch_behind(
    cluster: Cluster, redis_prefix: str
) -> None:
    # An agent attached to its session starts the Runs its user prompts: the stream that
    # offers Runs to workers must not keep one entry per Run for ever.
    a, b = [await cluster.start_node() for _ in range(2)]
    client = await RawPeer.open(a.url)
    await client.attach("s")
    agent = await RawPeer.open(b.url, role="agent")
    await agent.attach("s")
    for _ in range(3):
        run_id = new_id()
        await client.publish("s", prompt(run_id))
        assert waiting(redis_prefix) == [run_id]  # offered to workers while pending
        assert (await agent.publish("s", run_status(run_id, "active")))["type"] == "ack"
        assert (await agent.publish("s", run_status(run_id, "complete")))["type"] == "ack"
    assert waiting(redis_prefix) == []


async def an_active_run(
    client_node: Node, agent_node: Node, **status: Any
) -> tuple[RawPeer, RawPeer, str]:
    """A client on one node prompts session ``s``; agent ``agent-x`` on another starts
    the Run (``status``: more fields of its ``active`` entry). Returns both and the id."""
    client = await RawPeer.open(client_node.url)
    await client.attach("s")
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    agent = await RawPeer.open(agent_node.url, role="agent", client_id="agent-x")
    await agent.attach("s")
    assert (await agent.publish("s", {**run_status(run_id, "active"), **status}))["type"] == "ack"
    return client, agent, run_id


@pytest.mark.parametrize("goes", ["its node dies", "it leaves a node that stays up"])
async def test_an_agent_that_goes_away_has_its_run_ended_agent_lost(
    cluster: Cluster, goes: str
) -> None:
    # A node that stays up must stop vouching for it: each connection counted once.
    a, b = [await cluster.start_node(grace=1.0) for _ in range(2)]
    client, agent, _ = await an_active_run(a, b)
    if goes == "its node dies":
        b.kill()
    else:
        agent.ws.transport.abort()
    with anyio.fail_after(20):
        while True:
            [entry] = await client.entries(1, timeout=20)
            if entry["kind"] == "run" and entry["status"] == "error":
                break
    assert entry["error"]["code"] == "AGENT_LOST"


async def test_an_agent_that_comes_back_through_another_node_in_time_keeps_its_run(
    cluster: Cluster,
) -> None:
    # The network drops; the agent reconnects through another node within the grace:
    # no node may end its Run, however long it then keeps streaming.
    a, b, c = [await cluster.start_node(grace=1.5) for _ in range(3)]
    client, agent, run_id = await an_active_run(a, b)
    agent.ws.transport.abort()
    await anyio.sleep(0.5)
    back = await RawPeer.open(c.url, role="agent", client_id="agent-x")
    await back.attach("s")
    await anyio.sleep(3.5)  # the grace, twice over, and sweeps on every heartbeat
    assert (await back.publish("s", run_status(run_id, "complete")))["type"] == "ack"
    statuses: list[str] = []
    with anyio.fail_after(20):
        while "complete" not in statuses:
            for entry in await client.entries(1, timeout=20):
                if entry["kind"] == "run":
                    statuses.append(entry["status"])
    assert statuses == ["active", "complete"]  # never "error" (AGENT_LOST)


async def test_a_durable_run_whose_node_dies_is_adopted_by_a_worker_on_another_node(
    cluster: Cluster,
) -> None:
    a, b, c = [await cluster.start_node(grace=1.0) for _ in range(3)]
    client, first, run_id = await an_active_run(a, b, durable=True)
    checkpoint = {"kind": "checkpoint", "id": new_id(), "run_id": run_id, "step": 2, "turn": 1}
    assert (await first.publish("s", {**checkpoint, "state": {"k": 1}}))["type"] == "ack"
    second = await RawPeer.open(c.url, role="agent", client_id="agent-y")
    assert (await second.request({"type": "worker", "agent": "default"}))["type"] == "ack"
    b.kill()  # the owner's node dies with it: the sweep hands the Run on, not AGENT_LOST
    dispatch = await second.next("dispatch", timeout=20)
    assert dispatch["run_id"] == run_id and dispatch["adopted"] is True
    assert dispatch["checkpoint"]["step"] == 2 and dispatch["checkpoint"]["state"] == {"k": 1}
    await second.attach("s")
    assert (await second.publish("s", run_status(run_id, "active")))["type"] == "ack"
    assert (await second.publish("s", run_status(run_id, "complete")))["type"] == "ack"
    kinds: list[tuple[str, str | None]] = []
    with anyio.fail_after(20):
        while ("run", "complete") not in kinds:
            for entry in await client.entries(1, timeout=20):
                kinds.append((entry["kind"], entry.get("status")))
    assert ("run", "pending") in kinds and ("run", "error") not in kinds


def redis_connections(node: Node) -> int:
    """The node's open TCP connections to Redis."""
    port = int(REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    conns = psutil.Process(node.proc.pid).net_connections(kind="tcp")
    return sum(1 for c in conns if c.raddr and c.raddr.port == port)


async def test_agents_connecting_together_do_not_each_cost_a_redis_connection(
    cluster: Cluster, redis_prefix: str
) -> None:
    # Agents reconnecting to a node all at once (say after a restart): their presence
    # is written in shared pipelines, not on a pooled connection each.
    node = await cluster.start_node()
    first = await RawPeer.open(node.url, role="agent", client_id="agent-first")
    with redis.Redis.from_url(REDIS_URL) as client:
        with anyio.fail_after(10):
            while client.zscore(f"{redis_prefix}presence", "agent-first") is None:
                await anyio.sleep(0.02)
        before = redis_connections(node)
        peers: list[RawPeer] = [first]

        async def join(i: int) -> None:
            peers.append(await RawPeer.open(node.url, role="agent", client_id=f"agent-{i}"))

        async with anyio.create_task_group() as tg:
            for i in range(80):
                tg.start_soon(join, i)
        ids = [f"agent-{i}" for i in range(80)]
        with anyio.fail_after(10):
            while None in client.zmscore(f"{redis_prefix}presence", ids):
                await anyio.sleep(0.02)
    assert redis_connections(node) <= before + 1
    for peer in peers:
        await peer.close()


async def test_one_node_reads_every_agent_names_runs_on_one_redis_connection(
    cluster: Cluster,
) -> None:
    # Workers of 20 agent names on one node: one read covers all their streams, so the
    # node's Redis connections do not grow with the names it serves; each name's Run
    # goes to that name's worker.
    node = await cluster.start_node()
    client = await RawPeer.open(node.url)
    await client.attach("s")
    first = await RawPeer.open(node.url, role="agent", client_id="w-first")
    await first.request({"type": "worker", "agent": "first"})
    await client.publish("s", prompt(agent="first"))
    await first.next("dispatch", timeout=10)
    before = redis_connections(node)
    workers: dict[str, RawPeer] = {}
    for i in range(20):
        workers[f"name-{i}"] = await RawPeer.open(node.url, role="agent", client_id=f"w-{i}")
        await workers[f"name-{i}"].request({"type": "worker", "agent": f"name-{i}"})
    runs = {name: new_id() for name in workers}
    for name, run_id in runs.items():
        await client.publish("s", prompt(run_id, agent=name))
    for name, worker in workers.items():
        assert (await worker.next("dispatch", timeout=10))["run_id"] == runs[name]
    assert redis_connections(node) <= before + 1
