"""Live delivery and session lifecycle across two relay nodes in this process on one Redis.

Node B's pub/sub is made late or lossy where a test needs B to lag behind what
node A stored (pub/sub is at-most-once, and a node's deliverer can be busy).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import relay
from relay import Server
from relay.store.redis import RedisStore
from relay.store.redis_live import Listener, _Channel, _Sub

from ..relay.wire import RawPeer, prompt
from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nodes(redis_prefix: str) -> AsyncIterator[tuple[Server, Server]]:
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as b,
    ):
        yield a, b


@contextmanager
def pubsub_lost(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While in the block, every pub/sub message ``server``'s node receives is lost."""
    listener = server.store._listener  # type: ignore[attr-defined]
    take = Listener._take

    def lossy(self: Listener, channel: _Channel, payload: bytes) -> list[_Sub]:
        if self is listener:
            return []
        return take(self, channel, payload)

    with monkeypatch.context() as patch:
        patch.setattr(Listener, "_take", lossy)
        yield


def serials(entries: list[dict[str, Any]]) -> list[int]:
    return [entry["serial"] for entry in entries]


async def test_a_client_resumes_on_a_node_that_has_not_yet_seen_its_last_entry(
    nodes: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    watcher = await RawPeer.open(b.url)  # keeps the session loaded on node B
    await watcher.attach("s")
    client = await RawPeer.open(a.url)
    first = await client.attach("s")
    assert (await client.publish("s", prompt()))["serial"] == 1
    assert serials(await watcher.entries(1)) == [1]
    with pubsub_lost(b, monkeypatch):  # node B has not heard of serial 2 yet
        assert (await client.publish("s", prompt()))["serial"] == 2
        assert serials(await client.entries(2)) == [1, 2]
        await client.close()
        # The client's connection drops; the balancer sends it to node B, where it
        # resumes from the last serial it saw.
        again = await RawPeer.open(b.url)
        resumed = await again.attach("s", from_serial=2, epoch=first["epoch"])
    assert resumed["reset"] is False, resumed
    assert resumed["entries"] == []
    assert resumed["head"] == 2
    # Live delivery goes on from there: no gap, no duplicate, on both of B's clients.
    other = await RawPeer.open(a.url)
    await other.attach("s")
    assert (await other.publish("s", prompt()))["serial"] == 3
    assert serials(await again.entries(1)) == [3]
    assert serials(await watcher.entries(2)) == [2, 3]
