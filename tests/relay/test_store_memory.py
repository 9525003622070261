"""The memory store: the conformance suite, and that it keeps nothing between instances."""

from __future__ import annotations

import pytest

from relay.store import MemoryStore, Store

from .store_conformance import StoreConformance, body


class TestMemoryStore(StoreConformance):
    def make_store(self) -> Store:
        return MemoryStore()

    async def footprint(self, store: Store) -> object:
        assert isinstance(store, MemoryStore)
        memory = {k: dict(v) for k, v in vars(store).items() if isinstance(v, dict)}
        memory["subscribers"] = dict(store._subscribers._channels)
        return memory


@pytest.mark.anyio
async def test_a_new_memory_store_starts_empty() -> None:
    first = MemoryStore()
    info = await first.open_channel("s")
    await first.append("s", "e1", body("e1"))
    second = MemoryStore()
    again = await second.open_channel("s")
    assert (again.last, await second.read("s")) == (0, [])
    assert again.epoch != info.epoch
