"""``ShardedRedisStore``: one store URL spread over several hash slots (``?shards=N``).

A Redis Cluster gives each hash slot to one master. A ``RedisStore`` keeps every
key of its prefix in one slot, so one master would take all its writes. With
``shards=N`` the URL names N ``RedisStore`` shards instead, each with a prefix of
its own (``shard_prefix``): their slots are spread evenly, so each master of a
Cluster laid out by ``redis-cli --cluster create`` takes its part of the writes.

A session lives in one shard, chosen by a hash of its id (``shard_of``). Every
call about a session goes to its shard, whole, so each shard's scripts stay
atomic as before. Each shard keeps its own Run index, agent dispatch streams and
agent presence; the relay runs one dispatcher per shard (``relay._cluster_shards``).
Calls about every session (``runs_with_status``) ask every shard.

Shard 0 records the count. A store started with another count on the same prefix
is refused, since it would look for sessions in the wrong shards.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from typing import Any

from transport._runs import RunRecord

from ._base import Appended, ChannelInfo, Gone, OnEntry, OnReset, Store, StoredEntry, Unsubscribe
from ._redis import RedisStore

__all__ = ["ShardedRedisStore", "redis_store", "shard_of"]


def shard_of(session_id: str, shards: int) -> int:
    """The shard that holds ``session_id``: the same on every node and every run."""
    return zlib.crc32(session_id.encode()) % shards


def redis_store(url: str, **options: Any) -> RedisStore | ShardedRedisStore:
    """The Redis store a URL names: sharded when it asks for more than one shard, else
    its one ``RedisStore``. The URL is read once, by ``RedisStore``."""
    store = ShardedRedisStore(url, **options)
    return store.shards[0] if len(store.shards) == 1 else store


class ShardedRedisStore(Store):
    """A ``Store`` made of ``RedisStore`` shards (see the module docstring).

    Takes the arguments of ``RedisStore``; the URL's ``shards`` says how many. Its
    shards are in ``shards``, in order.
    """

    loses_channels = True

    def __init__(self, url: str, **options: Any) -> None:
        first = RedisStore(url, shard=0, **options)
        count = first.shards
        self.shards: list[RedisStore] = [first]
        """The shards, shard ``i`` at index ``i``."""
        self.shards += [RedisStore(url, shard=i, **options) for i in range(1, count)]
        self.url = url
        self.cluster = first.cluster
        self.prefix = first.prefix
        """Shard 0's prefix (the URL's, as a hash tag in Cluster mode)."""
        self.wait_replicas = first.wait_replicas

    def shard(self, session_id: str) -> RedisStore:
        """The shard that holds ``session_id``."""
        return self.shards[shard_of(session_id, len(self.shards))]

    @property
    def round_trips(self) -> int:
        """Pipelines sent on the shards' command connections, together."""
        return sum(s.round_trips for s in self.shards)

    @property
    def socket_timeout(self) -> float:
        """Seconds a round trip may take (the same for every shard)."""
        return self.shards[0].socket_timeout

    @property
    def linger_ms(self) -> float:
        """How long a small batch waits for company, in every shard."""
        return self.shards[0].linger_ms

    @linger_ms.setter
    def linger_ms(self, value: float) -> None:
        for s in self.shards:
            s.linger_ms = value

    @property
    def filled(self) -> int:
        """Entries delivered from the streams rather than from pub/sub, every shard."""
        return sum(s.filled for s in self.shards)

    @property
    def maxmemory_policy(self) -> str | None:
        """Redis's ``maxmemory-policy`` as shard 0 read it."""
        return self.shards[0].maxmemory_policy

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start every shard, shard 0 first (it checks the shard count); raises as
        ``RedisStore.start`` does, with every shard closed."""
        try:
            await self.shards[0].start()
            await asyncio.gather(*(s.start() for s in self.shards[1:]))
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close every shard. Idempotent."""
        await asyncio.gather(*(s.aclose() for s in self.shards))

    async def healthy(self) -> bool:
        """True while every shard answers."""
        return all(await asyncio.gather(*(s.healthy() for s in self.shards)))

    # -- one session: its shard --------------------------------------------------

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel, in its shard."""
        return await self.shard(session_id).open_channel(session_id)

    def close_channel(self, session_id: str) -> None:
        """Forget the channel in its shard."""
        self.shard(session_id).close_channel(session_id)

    async def append(
        self,
        session_id: str,
        entry_id: str,
        data: bytes,
        runs: Sequence[RunRecord] = (),
        *,
        expect_last: int | None = None,
        urgent: bool = False,
        gone: Gone | None = None,
    ) -> Appended:
        """``RedisStore.append`` in the session's shard: one script, one round trip."""
        return await self.shard(session_id).append(
            session_id, entry_id, data, runs, expect_last=expect_last, urgent=urgent, gone=gone
        )

    async def subscribe(
        self, session_id: str, fn: OnEntry, *, on_reset: OnReset | None = None
    ) -> Unsubscribe:
        """Follow the channel through its shard's pub/sub."""
        return await self.shard(session_id).subscribe(session_id, fn, on_reset=on_reset)

    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored entry with this id, within the dedup window, or None."""
        return await self.shard(session_id).find(session_id, entry_id)

    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (see the contract)."""
        return await self.shard(session_id).read(
            session_id, after=after, before=before, limit=limit
        )

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written."""
        return await self.shard(session_id).runs(session_id)

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One Run record of a session, or None."""
        return await self.shard(session_id).run(session_id, run_id)

    async def head(self, session_id: str) -> tuple[str | None, int]:
        """The channel's epoch (None if it does not exist) and newest serial."""
        return await self.shard(session_id).head(session_id)

    async def since(
        self, session_id: str, after: int, limit: int
    ) -> tuple[str | None, list[StoredEntry]]:
        """The channel's epoch and up to ``limit`` stored entries after ``after``."""
        return await self.shard(session_id).since(session_id, after, limit)

    # -- every session: every shard ------------------------------------------------

    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses``, shard by shard."""
        found = await asyncio.gather(
            *(s.runs_with_status(statuses, agent=agent) for s in self.shards)
        )
        return [record for part in found for record in part]
