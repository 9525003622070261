"""A durable Run's worker cut off from the relay (its process keeps running) past the grace.

The relay hands the Run on; when the worker's link heals it sends what it held
(appends queued while cut off, the close its ``pipe()`` makes once the hand-over
aborts it). None of that may land in the handed-over Run: the worker that adopts
it (here the same one, re-registered) goes on from where the relay saw it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

import agent_side
import relay
from agent_side import AbortSignal, Run, steering_loop
from transport import UIMessage

from ..agent_side.helpers import client_end
from .link_proxy import LinkProxy

pytestmark = pytest.mark.anyio

WORDS = [f"w{i} " for i in range(16)]


async def slow_words(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    for word in WORDS:
        if signal.aborted:
            return
        yield word
        await anyio.sleep(0.03)


async def test_a_worker_back_from_a_partition_writes_nothing_into_the_run_handed_on() -> None:
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "partition") as client,
    ):
        proxy = LinkProxy(server.port)
        await proxy.start()
        run_id = await client.prompt("Write sixteen words.")
        worker = agent_side.Agent(proxy.url, durable=True)
        handled: list[bool] = []

        @worker.on_run
        async def handle(run: Run) -> None:
            handled.append(run.adopted)
            await steering_loop(run, slow_words)

        try:
            async with worker:
                await client.wait_for(lambda: "w3" in "".join(client.response_texts(run_id)))
                await proxy.cut()  # the worker keeps streaming into its dead link
                await client.wait_status(run_id, "pending", timeout=5)  # handed on
                await anyio.sleep(0.3)  # more words pile up in the worker
                await proxy.heal()
                await client.wait_status(run_id, "complete", "error", timeout=10)
        finally:
            await proxy.aclose()
        entries = [e for e in client.entries if e["run_id"] == run_id]
    assert handled == [False, True]
    statuses = [(e["status"], e["client_id"]) for e in entries if e["kind"] == "run"]
    assert [s for s, _ in statuses] == ["active", "pending", "active", "complete"]
    handed = next(i for i, e in enumerate(entries) if e.get("status") == "pending")
    assert entries[handed + 1]["kind"] == "run"  # nothing from an agent before it restarted
    closes = [e for e in entries if e["kind"] == "response_close"]
    assert len(closes) == 1
    assert closes[0]["message"]["metadata"] == {}  # not an "interrupted" reply
    assert client.response_texts(run_id) == ["".join(WORDS)]
