"""A cancel of a Run no agent has started ends it at once, on a relay with no worker.

Relay (memory and SQLite) + client SDK + a worker that connects afterwards, over
loopback WebSockets.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import Run

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'relay.db'}"


async def test_cancel_of_a_pending_run_ends_it_and_no_worker_gets_it(store: str) -> None:
    seen: list[str] = []

    async def handle(run: Run) -> None:
        seen.append(run.run_id)
        await run.end()

    with anyio.fail_after(15):
        async with (
            relay.serve(port=0, store=store) as server,
            client_side.connect(server.url, "s") as session,
        ):
            first = await session.send("nobody is here yet")
            assert first.status == "pending"
            with anyio.fail_after(5):  # far less than cancel()'s own 30 s wait
                await first.cancel("changed my mind")
            assert first.status == "cancelled"
            record = await server.store.run("s", first.run_id)
            assert record is not None and record.status == "cancelled"
            # Nothing goes on: reject is taken, enqueue does not wait behind it.
            rejected = await session.send("reject is fine", multitask="reject")
            assert rejected.status == "pending"
            await rejected.cancel()
            queued = await session.send("enqueue is not queued", multitask="enqueue")
            assert queued.status == "pending"

            worker = agent_side.Agent(server.url)
            worker.on_run(handle)
            async with worker:
                await queued.result()
                last = await session.send("and this one")
                await last.result()
            assert seen == [queued.run_id, last.run_id]
