"""Double-texting strategies hold across relay nodes: every node decides from the same state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import AbortSignal, Run
from relay.store._redis import RedisStore
from tests.agent_side.test_interrupts import worker
from tests.integration.conductor import Conductor, status
from tests.relay.wire import RawPeer, prompt, run_status
from transport import RunwireError, UIMessage, message_text
from transport.messages import new_id

from .conftest import REDIS_URL, Cluster
from .test_cluster import an_active_run, wait_until, words

pytestmark = pytest.mark.anyio


def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    """ "long ..." streams until cancelled; anything else answers in a few words."""
    text = message_text(messages[-1])
    return words(100_000 if text.startswith("long") else 5, text.split()[0], signal, delay=0.01)


async def test_two_devices_on_two_nodes_rejecting_at_once_exactly_one_wins(
    cluster: Cluster,
) -> None:
    a, b = [await cluster.start_node() for _ in range(2)]
    async with (
        client_side.connect(a.url, "race") as phone,
        client_side.connect(b.url, "race") as laptop,
    ):
        outcomes: list[object] = []

        async def send(session: client_side.ClientSession, text: str) -> None:
            try:
                outcomes.append(await session.send(text, multitask="reject"))
            except RunwireError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, phone, "long from the phone")
            tg.start_soon(send, laptop, "long from the laptop")
        refused = [o for o in outcomes if isinstance(o, RunwireError)]
        assert len(outcomes) == 2 and len(refused) == 1, outcomes
        assert refused[0].code == "THREAD_BUSY"


@asynccontextmanager
async def phone_laptop_and_agent(
    cluster: Cluster, session_id: str
) -> AsyncIterator[
    tuple[client_side.ClientSession, client_side.ClientSession, client_side.ClientRun]
]:
    """Two devices on two nodes, a worker on a third, and a first Run streaming from the phone."""
    a, b, c = [await cluster.start_node() for _ in range(3)]
    worker = agent_side.Agent(c.url)

    @worker.on_run
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with (
        worker,
        client_side.connect(a.url, session_id) as phone,
        client_side.connect(b.url, session_id) as laptop,
    ):
        first = await phone.send("long first")
        await wait_until(lambda: (phone.view.run(first.run_id) or first).status == "active")
        yield phone, laptop, first


async def test_enqueued_on_one_node_starts_when_the_run_on_another_ends(cluster: Cluster) -> None:
    async with phone_laptop_and_agent(cluster, "queue") as (phone, laptop, first):
        later = await laptop.send("short then", multitask="enqueue")
        assert later.status == "queued"
        await anyio.sleep(0.3)  # it waits its turn: nothing starts it meanwhile
        run = laptop.view.run(later.run_id)
        assert run is not None and run.status == "queued"
        await phone.cancel(first.run_id)
        assert (await first.result()).status == "cancelled"
        assert (await later.result()).status == "complete"
        # Its prompt joined the conversation after the answer before it, on both devices.
        await wait_until(
            lambda: (
                [vm.message.id for vm in phone.view.messages()]
                == [vm.message.id for vm in laptop.view.messages()]
            )
        )
        order = [vm.run_id for vm in laptop.view.messages()]
        assert order.index(first.run_id) < order.index(later.run_id)


async def test_an_interrupt_sent_through_one_node_cancels_a_run_streaming_through_another(
    cluster: Cluster,
) -> None:
    async with phone_laptop_and_agent(cluster, "interrupt") as (_, laptop, first):
        now = await laptop.send("short instead", multitask="interrupt")
        assert (await first.result()).status == "cancelled"
        assert (await now.result()).status == "complete"


async def test_a_node_started_later_holds_no_slot_for_runs_of_sessions_it_never_loaded(
    cluster: Cluster,
) -> None:
    # max_concurrent_runs counts per node the Runs of the sessions it has loaded. A
    # node starting while another node's Run goes on must not hold a slot for it: it
    # would never see it end, and its own sessions would wait for ever.
    a = await cluster.start_node()
    _, agent, run_id = await an_active_run(a, a)  # session "s", all on node A
    b = await cluster.start_node(1.0, "--max-concurrent-runs", "1")
    assert (await agent.publish("s", run_status(run_id, "complete")))["type"] == "ack"
    async with client_side.connect(b.url, "here") as session:
        run = await session.send("hello")
        assert run.status == "pending"  # the one slot is free


async def test_a_node_that_puts_a_session_down_gives_back_the_slots_of_its_runs(
    cluster: Cluster,
) -> None:
    # The client on node B leaves while its Run goes on through the agent's node A:
    # B forgets the session and must forget its slot too, since the Run's end would
    # never reach it.
    a = await cluster.start_node()
    b = await cluster.start_node(1.0, "--max-concurrent-runs", "1")
    agent = await RawPeer.open(a.url, role="agent", client_id="agent-a")
    await agent.attach("first")
    client = await RawPeer.open(b.url)
    await client.attach("first")
    run_id = new_id()
    assert (await client.publish("first", prompt(run_id)))["type"] == "ack"
    assert (await agent.publish("first", run_status(run_id, "active")))["type"] == "ack"
    await client.close()  # B puts "first" down: nobody there watches it
    await anyio.sleep(0.5)
    assert (await agent.publish("first", run_status(run_id, "complete")))["type"] == "ack"
    async with client_side.connect(b.url, "second") as session:
        run = await session.send("hello")
        assert run.status == "pending"  # the one slot is free


async def test_a_cancel_of_a_paused_run_ends_it_promptly_while_its_node_has_no_free_slot(
    redis_prefix: str,
) -> None:
    """Node B's one slot is held by a Run of another session; a Run paused on a question
    (its worker on node A) is cancelled through B: B owes its resume at once, A's worker
    adopts it and applies the cancel, and the Run holding the slot goes on."""
    busy = Conductor()
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as a,
        relay.serve(
            port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix), max_concurrent_runs=1
        ) as b,
    ):
        holder = agent_side.Agent(b.url, name="busy")
        holder.on_run(busy)
        async with (
            worker(a.url, [("c1", "deploy", {"service": "api"})]),
            holder,
            client_side.connect(b.url, "paused") as phone,
            client_side.connect(b.url, "other", agent="busy") as other,
        ):
            run = await phone.send("Deploy the api")
            with anyio.fail_after(10):
                assert (await run.result()).status == "suspended"
            hold = await other.send("hold the slot")
            await busy.wait(lambda: hold.run_id in busy.started)
            assert not b.hub.slots.free()
            await phone.cancel(run.run_id, reason="stop")
            with anyio.fail_after(5):
                while status(phone, run.run_id) != "cancelled":
                    await phone._wait_change()
            assert busy.ended == [] and status(other, hold.run_id) == "active"
            busy.release(hold.run_id)
            await busy.wait(lambda: busy.ended == [(hold.run_id, "complete")])
