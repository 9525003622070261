"""An agent's publishes are stored in the order its code acted, even those sent from tasks."""

from __future__ import annotations

import anyio
import pytest

import agent_side
from agent_side import CancelRequest

from ..client_side.fake_agent import channel_entries
from .helpers import client_end

pytestmark = pytest.mark.anyio


async def test_a_cancel_refused_at_start_is_stored_before_an_end_made_right_after(
    relay_url: str,
) -> None:
    """``on_cancel`` refuses a cancel that came before ``start()``: the refusal is decided
    in ``start()``, so the asker hears ``cancel_denied`` before the Run's end, made next."""
    async with client_end(relay_url, "deny-order") as client:
        run_id = await client.prompt("go")
        await client.cancel(run_id)
        async with agent_side.connect(relay_url, "deny-order") as session:

            def refuse(request: CancelRequest) -> bool:
                return False

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
