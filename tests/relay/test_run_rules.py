"""The Run rules as the relay applies them, frame by frame (``transport.runs``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import relay
from relay import Server
from transport.messages import new_id

from .wire import RawPeer, prompt, run_status

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=5) as s:
        yield s


async def ended(peer: RawPeer, run_id: str, timeout: float = 5.0) -> str:
    """The status a delivered ``run`` entry ends ``run_id`` with."""
    with anyio.fail_after(timeout):
        while True:
            for entry in await peer.entries(1, timeout):
                if entry["kind"] == "run" and entry["run_id"] == run_id:
                    if entry["status"] in ("complete", "cancelled", "error"):
                        return str(entry["status"])


async def test_no_agent_refuses_the_cancels_of_or_checkpoints_a_run_nobody_started(
    server: Server,
) -> None:
    client = await RawPeer.open(server.url)
    agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
    try:
        await client.attach("s1")
        await agent.attach("s1")
        assert (await client.publish("s1", prompt("a")))["type"] == "ack"
        assert (await agent.publish("s1", run_status("a", "active")))["type"] == "ack"
        queued = await client.publish("s1", {**prompt("b"), "multitask": "enqueue"})
        assert queued["type"] == "ack"
        pending = await client.publish("s1", prompt("c"))  # alongside: pending, not started
        assert pending["type"] == "ack"
        assert (await client.publish("s1", cancel("c")))["type"] == "ack"  # kept for its agent
        for run_id in ("b", "c"):
            entries: list[dict[str, Any]] = [
                {"kind": "cancel_denied", "id": new_id(), "run_id": run_id},
                {"kind": "checkpoint", "id": new_id(), "run_id": run_id, "step": 1},
            ]
            for entry in entries:
                reply = await agent.publish("s1", entry)
                assert reply["type"] == "error", reply
                assert reply["error"]["code"] == "UNAUTHORIZED"
                assert reply["error"]["details"]["run_id"] == run_id
        # The cancel of the queued Run still stands: it ends b at once.
        assert (await client.publish("s1", cancel("b")))["type"] == "ack"
        assert await ended(client, "b") == "cancelled"
        # The agent that starts c owns it: its refusal of c's cancel is taken.
        assert (await agent.publish("s1", run_status("c", "active")))["type"] == "ack"
        refusal = {"kind": "cancel_denied", "id": new_id(), "run_id": "c"}
        assert (await agent.publish("s1", refusal))["type"] == "ack"
    finally:
        await client.close()
        await agent.close()


def cancel(run_id: str) -> dict[str, Any]:
    return {"kind": "cancel", "id": new_id(), "run_id": run_id}
