"""``ShardedDispatcher``: dispatch and agent liveness on a Redis store of several shards.

A ``ShardedRedisStore`` keeps each shard's Run index, agent dispatch streams and agent
presence in that shard's hash slot. So this dispatcher is one ``RedisDispatcher`` per
shard, each reading its own shard's streams and sweeping its own shard's presence.

They share the node's workers and the Runs handed to them, so a worker counts once and
gets the least loaded share across every shard. A worker that arrives or leaves is told
to every shard; a Run's change goes to its session's shard.
"""

from __future__ import annotations

from transport._runs import RunRecord

from ._cluster import RedisDispatcher
from ._dispatch import Expire, RunKey, discharge
from ._metrics import Metrics
from ._peer import Peer
from .store._redis_shards import ShardedRedisStore, shard_of

__all__ = ["ShardedDispatcher"]


class ShardedDispatcher:
    """Same interface as ``RedisDispatcher``, over the shards of one store."""

    needs_pending = False
    """The agents' streams hold the waiting Runs: a worker costs no read of the index."""

    def __init__(
        self, store: ShardedRedisStore, *, grace: float, expire: Expire, metrics: Metrics
    ) -> None:
        self.store = store
        self.metrics = metrics
        metrics.count_store_round_trips(lambda: store.round_trips)
        self.workers: dict[str, list[Peer]] = {}
        self.assigned: dict[RunKey, Peer] = {}
        self.parts = [
            RedisDispatcher(
                shard,
                grace=grace,
                expire=expire,
                metrics=metrics,
                workers=self.workers,
                assigned=self.assigned,
            )
            for shard in store.shards
        ]
        """One dispatcher per shard, in the store's order."""

    def _part(self, session_id: str) -> RedisDispatcher:
        return self.parts[shard_of(session_id, len(self.parts))]

    def start(self) -> None:
        """Start every shard's heartbeat and sweep."""
        for part in self.parts:
            part.start()

    def close(self) -> None:
        """Stop every shard's loops."""
        for part in self.parts:
            part.close()

    def add_worker(self, peer: Peer, agent: str, pending: list[RunRecord]) -> None:
        """Register a local worker with every shard (it is counted once)."""
        for part in self.parts:
            part.add_worker(peer, agent, pending)

    def peer_gone(self, peer: Peer, owned_active: list[RunRecord]) -> None:
        """Hand the Runs a dead worker had not started to another, each in its shard."""
        del owned_active  # each shard's sweep ends them after the grace period
        keys = discharge(self.workers, self.assigned, peer, self.metrics)
        by_part: dict[int, list[RunKey]] = {}
        for key in keys:
            by_part.setdefault(shard_of(key[0], len(self.parts)), []).append(key)
        for index, part in enumerate(self.parts):
            part.hand_again(by_part.get(index, []))
            part.agent_left(peer)

    def client_back(self, client_id: str, *, scope: tuple[str, ...] | None = None) -> None:
        """Count an agent connection for every shard's presence heartbeat."""
        for part in self.parts:
            part.client_back(client_id, scope=scope)

    def start_timer(self, record: RunRecord) -> None:
        """Liveness is swept from Redis; nothing to time locally."""

    async def run_created(self, record: RunRecord) -> None:
        """Nothing to do: the append that made the Run pending put it on its stream."""

    def run_changed(self, record: RunRecord) -> None:
        """A Run left ``pending``: its shard acknowledges the stream entry if it held it."""
        self._part(record.session_id).run_changed(record)
