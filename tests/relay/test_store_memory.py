"""The memory store: the conformance suite, and that it keeps nothing between instances."""

from __future__ import annotations

import pytest

from relay.store import MemoryStore, Store

from .store_conformance import StoreConformance, body


class TestMemoryStore(StoreConformance):
    def make_store(self) -> Store:
        return MemoryStore()


@pytest.mark.anyio
async def test_a_new_memory_store_starts_empty() -> None:
    first = MemoryStore()
    info = await first.open_channel("s")
    await first.append("s", "e1", body("e1"))
    second = MemoryStore()
    again = await second.open_channel("s")
    assert (again.last, await second.read("s")) == (0, [])
    assert again.epoch != info.epoch
