"""An agent's publishes are stored in the order its code acted, even those sent from tasks."""

from __future__ import annotations

import anyio
import pytest

import agent_side
import relay
from agent_side import CancelRequest
from transport.frames import RunEntry

from ..client_side.fake_agent import channel_entries
from .helpers import client_end

pytestmark = pytest.mark.anyio


async def test_a_cancel_refused_at_start_is_stored_before_an_end_made_right_after() -> None:
    """``on_cancel`` refuses a cancel that came before ``start()`` (the Run was handed over:
    its earlier worker went away): the refusal is decided in ``start()``, so the asker hears
    ``cancel_denied`` before the Run's end, made next. (A Run no agent ever started is ended
    by the relay at its cancel: no agent could refuse that one.)"""
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.1) as server,
        client_end(server.url, "deny-order") as client,
    ):
        relay_url = server.url
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "deny-order") as earlier:
            await earlier._publish(
                RunEntry(id="earlier-start", run_id=run_id, status="active", durable=True)
            )
        await client.wait_for(lambda: len(client.of(run_id, "run")) == 2)  # handed over
        await client.cancel(run_id)
        async with agent_side.connect(relay_url, "deny-order") as session:

            def refuse(request: CancelRequest) -> bool:
                return False

            with anyio.fail_after(5):
                while (session.last_serial or 0) < 4:  # prompt, start, hand-over, cancel
                    await anyio.sleep(0.01)
            run = session.create_run(run_id, on_cancel=refuse)
            with anyio.fail_after(10):
                await run.start()
                await run.end()
                await client.wait_status(run_id, "complete")
                entries = await channel_entries(relay_url, "deny-order")
        kinds = [
            e["kind"] if e["kind"] != "run" else f"run:{e['status']}"
            for e in entries
            if e["kind"] in ("cancel", "cancel_denied", "run")
        ]
        assert kinds[-2:] == ["cancel_denied", "run:complete"], kinds
