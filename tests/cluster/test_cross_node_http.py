"""The HTTP API across relay nodes on one Redis, and across a history Redis lost.

Two ``relay.serve`` nodes in this process share a Redis; sessions expire after
``history_ttl`` (0.5 s) where a test needs Redis to lose a history.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relay
from relay import Server
from relay.store.redis import RedisStore

from ..relay.wire import RawPeer, prompt
from .conftest import REDIS_URL
from .test_cross_node_live import close_code, expired, serials

pytestmark = pytest.mark.anyio


@pytest.fixture
async def expiring(redis_prefix: str) -> AsyncIterator[tuple[Server, Server]]:
    """Two nodes whose sessions Redis drops after 0.5 s without a write."""
    ttl: dict[str, Any] = {"prefix": redis_prefix, "history_ttl": 0.5}
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, **ttl)) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, **ttl)) as b,
    ):
        yield a, b


async def test_a_node_that_opened_a_session_which_expired_empty_resets_when_another_recreates_it(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    """Node B opened the session (epoch E1) and it expired with no entry; node A makes
    it again (E2): B's clients are told to rebuild, never handed E2's entries as E1's."""
    a, b = expiring
    watcher = await RawPeer.open(b.url)
    first = await watcher.attach("s")
    assert first["head"] == 0
    await expired(f"{redis_prefix}{{s}}:meta")
    writer = await RawPeer.open(a.url)
    fresh = await writer.attach("s")
    assert fresh["epoch"] != first["epoch"]
    assert (await writer.publish("s", prompt()))["serial"] == 1
    assert await close_code(watcher) == 4009
    assert all(frame.get("type") != "deliver" for frame in watcher.inbox), watcher.inbox
    watcher = await RawPeer.open(b.url)
    again = await watcher.attach("s", from_serial=0, epoch=first["epoch"])
    assert again["epoch"] == fresh["epoch"] and serials(again["entries"]) == [1]


def entry_serials(found: list[Any]) -> list[int]:
    return [json.loads(e.data)["serial"] for e in found if e.event == "entry"]
