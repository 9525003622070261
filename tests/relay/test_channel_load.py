"""A channel loading while another relay node appends to its session."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from relay._channel import Channel
from relay.store._memory import MemoryStore
from transport._runs import RunRecord

pytestmark = pytest.mark.anyio


def run_entry(entry_id: str, status: str) -> bytes:
    return orjson.dumps(
        {"kind": "run", "id": entry_id, "run_id": "r", "status": status, "client_id": "relay"}
    )


async def test_entries_another_node_appends_while_a_channel_loads_are_applied_once() -> None:
    # The channel reads the head, then the Run records. A hand-over and the new
    # worker's start stored in between are in the records already: replayed on top of
    # them, the hand-over would count twice (and the node would then publish the
    # Run's next hand-over under another id than every other node).
    store = MemoryStore()
    await store.start()
    await store.open_channel("s")
    active = RunRecord(session_id="s", run_id="r", agent="a", status="active", owner="w1")
    await store.append("s", "e1", run_entry("e1", "active"), [active])
    read_runs = store.runs

    async def runs_after_another_node_appended(session_id: str) -> list[RunRecord]:
        store.runs = read_runs  # type: ignore[method-assign]
        handed = replace(active, status="pending", owner=None, adoptions=1)
        await store.append("s", "e2", run_entry("e2", "pending"), [handed])
        again = replace(handed, status="active", owner="w2")
        await store.append("s", "e3", run_entry("e3", "active"), [again])
        return await read_runs(session_id)

    store.runs = runs_after_another_node_appended  # type: ignore[method-assign]
    committed: list[Any] = []
    channel = Channel(store, "s", lambda *args: committed.append(args))
    await channel.load()
    record = channel.registry.get("r")
    assert record is not None
    assert (record.status, record.owner, record.adoptions) == ("active", "w2", 1)
    assert channel.last == 3
    channel.close()
    await store.aclose()
