"""A paused Run under ``max_concurrent_runs``, end to end: relay + real workers + client SDK."""

from __future__ import annotations

import anyio
import pytest

import agent_side
import client_side
import relay

from .conductor import Conductor, status

pytestmark = pytest.mark.anyio

CALLS = [("c1", "deploy", {"service": "api"})]
"""The tool call the interrupt worker asks about (``tests.agent_side.test_interrupts``)."""


async def test_a_cancel_of_a_paused_run_ends_it_promptly_while_every_slot_is_held() -> None:
    """The paused Run holds no slot, and another Run holds the only one: Stop still ends the
    paused Run at once (a worker adopts it and applies the cancel), and the other Run goes
    on until it finishes."""
    from tests.agent_side.test_interrupts import worker

    busy = Conductor()
    async with relay.serve(port=0, store="memory://", max_concurrent_runs=1) as server:
        holder = agent_side.Agent(server.url, name="busy")
        holder.on_run(busy)
        async with (
            worker(server.url, CALLS),
            holder,
            client_side.connect(server.url, "paused") as phone,
            client_side.connect(server.url, "other", agent="busy") as other,
        ):
            run = await phone.send("Deploy the api")
            with anyio.fail_after(10):
                paused = await run.result()
            assert paused.status == "suspended"
            hold = await other.send("hold the slot")
            await busy.wait(lambda: hold.run_id in busy.started)
            assert server.hub.slots.in_use == 1
            await phone.cancel(run.run_id, reason="stop")
            with anyio.fail_after(5):
                while status(phone, run.run_id) != "cancelled":
                    await phone._wait_change()
            assert phone.paused_run() is None
            assert busy.ended == [] and status(other, hold.run_id) == "active"
            assert server.hub.slots.in_use == 1  # the cancelled Run gave its slot back
            busy.release(hold.run_id)
            await busy.wait(lambda: busy.ended == [(hold.run_id, "complete")])
