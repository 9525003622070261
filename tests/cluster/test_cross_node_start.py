"""An agent starts a Run on its node as soon as the prompt, sent through another node, is acked.

Two relay nodes in this process on one Redis; node A's pub/sub is held up so
that the agent's ``run: active`` reaches A before the prompt does.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from relay import Server
from relay.store._redis_live import Listener
from transport.messages import new_id

from ..relay.wire import RawPeer, prompt, run_status

pytestmark = pytest.mark.anyio


async def test_a_run_started_before_its_prompt_reached_the_node_is_accepted(
    nodes: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    agent = await RawPeer.open(a.url, role="agent")
    client = await RawPeer.open(b.url)
    await agent.attach("s")
    await client.attach("s")
    listener_a = a.store._listener  # type: ignore[attr-defined]
    handle = Listener._handle
    held = anyio.Event()

    async def slow(self: Listener, item: tuple[Any, ...]) -> None:
        if self is listener_a and item[0] == "reply" and not held.is_set():
            await held.wait()  # pub/sub of node A is late
        await handle(self, item)

    monkeypatch.setattr(Listener, "_handle", slow)
    run_id = new_id()
    assert (await client.publish("s", prompt(run_id)))["type"] == "ack"
    started = await agent.publish("s", run_status(run_id, "active"))
    held.set()
    assert started["type"] == "ack", started
    assert started["serial"] == 2
