"""``Sweeper``: agent presence and the AGENT_LOST sweep of the relay nodes on Redis.

Every node marks the agent client ids it holds connections of present, each
heartbeat, in one script. One node at a time sweeps: the holder of a lease. The sweep
finds the owners whose presence lapsed ``grace`` seconds ago, with the Runs they still
own, and passes each Run to ``expire`` (``Hub.agent_lost``). The sweeper also prunes
the consumers and streams of the agents' dispatch nobody uses any more.

A node that has just taken the lease, or whose maintenance failed, first moves the
deadlines that passed to "now": while no node could write presence, absence does not
count. ``steady_since`` says since when this node has had Redis without a failure; the
dispatch reader claims other nodes' entries only after ``claim_idle`` seconds of that.

``relay._cluster.RedisDispatcher`` owns one. See docs/explanation/relay-internals.md
("Presence", "The sweep") for every step and why it is safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from transport.errors import STORE_UNAVAILABLE, RunwireError

from ._cluster_scripts import LEAD, PRUNE
from ._dispatch import Expire
from .store._redis import RedisStore

__all__ = ["GROUP", "Presence", "Sweeper"]

log = logging.getLogger("runwire.relay")

GROUP = "relay"
"""The consumer group in which every node reads the agents' dispatch streams."""
Presence = tuple[str, tuple[str, ...] | None]
"""An agent connection's client id and the patterns of the sessions it may act in (None:
every session), as ``Peer.agent_scope`` gives them."""


class Sweeper:
    """One node's presence heartbeat, and the sweep and pruning while it holds the lease."""

    def __init__(
        self,
        store: RedisStore,
        redis: Any,
        *,
        node_id: str,
        grace: float,
        expire: Expire,
        refresh: Callable[[], Coroutine[Any, Any, None]],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        consumer_idle: float = 600.0,
        sweep_limit: int = 1000,
    ) -> None:
        self.store = store
        self._redis = redis  # the dispatcher's client (``RedisStore.client``)
        self.node_id = node_id
        self.grace = grace
        self.heartbeat = max(0.2, min(grace / 3, 2.0))
        """Seconds between two rounds of presence, and of the sweep on the lease holder."""
        self.expire = expire
        """Ends a Run whose owner is gone (``Hub.agent_lost``)."""
        self._refresh = refresh  # keeps the node's held dispatch entries fresh
        self._spawn = spawn
        self.consumer_idle = consumer_idle
        """Seconds a stream consumer holding nothing may stay idle before the sweeper drops it."""
        self.sweep_limit = sweep_limit
        """At most how many gone owners one sweep takes (oldest first)."""
        self.indexed = False
        """The active Runs an earlier version left out of their owners' sets are in them."""
        self.agents_present: dict[Presence, int] = {}
        """This node's agent connections by client id and scope (``Peer.agent_scope``)."""
        self.steady_since: float | None = None
        """Since when (monotonic) this node has had Redis without a failure, or None: not yet
        (its maintenance has not gone through once) or its maintenance or reader failed
        since (see ``RedisDispatcher.claim_due``)."""
        self._pruned = 0.0  # when this node last pruned consumers (as the sweeper)
        self._arrived: set[Presence] = set()  # agents whose presence is not written yet
        self._toucher: asyncio.Task[None] | None = None
        self._lead_script: Any = self._redis.register_script(LEAD)
        self._prune_script: Any = self._redis.register_script(PRUNE)

    def arrived(self, present: Presence) -> None:
        """Count an agent connection and write its presence soon."""
        self.agents_present[present] = self.agents_present.get(present, 0) + 1
        self._arrived.add(present)
        if self._toucher is None or self._toucher.done():
            self._toucher = self._spawn(self._touch_arrived())

    def left(self, present: Presence) -> None:
        """An agent connection closed: count it no more."""
        left = self.agents_present.get(present, 1) - 1
        if left <= 0:
            self.agents_present.pop(present, None)
        else:
            self.agents_present[present] = left

    async def run(self) -> None:
        lapsed = True  # no sweep yet, or maintenance failed (Redis away) since the last one
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                if not self.indexed:
                    await self.store.index_owners()
                    self.indexed = True
                if not await self.touch(list(self.agents_present)):
                    lapsed = True  # this node's agents may have lapsed meanwhile
                    self.steady_since = None
                await self._refresh()
                held = await self.lead()
                if held:
                    if held == 2 or lapsed:
                        # Deadlines that passed while no node could write presence (Redis
                        # away, or no sweeper) do not count: absence starts now, so every
                        # node marks its agents again before any Run is ended.
                        await self.store.absent_from_now()
                        lapsed = False
                    await self.sweep()
                    if time.monotonic() - self._pruned >= min(60.0, self.consumer_idle):
                        self._pruned = time.monotonic()
                        await self.prune()
                if self.steady_since is None:
                    self.steady_since = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                lapsed = True
                self.steady_since = None
                if isinstance(exc, RunwireError) and exc.code == STORE_UNAVAILABLE:
                    log.warning("cluster maintenance failed: %s", exc)  # Redis away: no trace
                else:
                    log.exception("cluster maintenance failed")

    async def _touch_arrived(self) -> None:
        """Write the presence of agents that connected, all that came meanwhile at once.

        One task, one pipeline at a time: a thousand agents reconnecting to a node
        together (after a restart) cost a few round trips on one connection, not a
        connection each.
        """
        while self._arrived:
            arrived = list(self._arrived)
            self._arrived.clear()
            await self.touch(arrived)

    async def touch(self, present: list[Presence]) -> bool:
        """Mark agents present (client ids with their scope: see
        ``RedisStore.mark_present``), in one round trip; False if Redis did not take it."""
        if not present:
            return True
        everywhere: list[str] = []
        scoped: list[tuple[str, tuple[str, ...]]] = []
        for client_id, scope in present:
            if scope is None:
                everywhere.append(client_id)
            else:
                scoped.append((client_id, scope))
        try:
            await self.store.mark_present(everywhere, self.heartbeat * 3, scoped=scoped)
        except RunwireError as exc:
            log.warning("presence heartbeat failed: %s", exc)
            return False
        return True

    async def lead(self) -> int:
        """Take or keep the sweeper's lease: 0 if another node holds it, 1 if this node
        kept it, 2 if it has just taken it."""
        lease = int(self.heartbeat * 3000)
        held = await self._lead_script(keys=[self.store.key("sweeper")], args=[self.node_id, lease])
        return int(held)

    async def sweep(self) -> None:
        """End the active Runs of owners gone for ``grace`` seconds past their deadline.

        One round trip when nobody left, however many Runs are active; the Runs of
        owners that did take one ``expire`` each.

        Redis may lose a Run's record while its owner's set still names it: evicted, or
        deleted. Such a Run goes to ``expire`` too. A node that has its session loaded
        still knows it, and its end writes the record again.

        Then the Run is dropped from its owner's set if its record is still missing, with
        a warning. That costs one more round trip, only when there is such a Run. Its owner
        is then forgotten as any other owning nothing. A Run whose record is there stays,
        whatever became of its end: ``Hub.agent_lost`` logs a failed one, and the next
        sweeps try again.
        """
        found = await self.store.gone_and_lost(self.grace, limit=self.sweep_limit)
        for runs in found.runs.values():
            for session_id, run_id in runs:
                await self.expire(session_id, run_id)
        if found.lost:
            for owner, session_id, run_id in await self.store.forget_lost(found.lost):
                log.warning(
                    "run %s/%s of agent %r: Redis lost its record (evicted or deleted; "
                    "see maxmemory-policy), so it cannot be ended AGENT_LOST; dropped from "
                    "its owner's active Runs",
                    session_id,
                    run_id,
                    owner,
                )

    async def prune(self) -> tuple[int, int]:
        """Drop consumers of gone nodes from every agent stream's group, then the streams
        nobody uses; how many consumers and streams went.

        Each node reads as a consumer of its own id, so every node that ever had a
        worker leaves one in the group of that agent's stream; the sweeper drops
        those idle for ``consumer_idle`` seconds that hold no entry. A stream left with
        no entry, none held and no consumer (no node has a worker of that name) is
        deleted with its group, in the same script (``cluster_scripts.PRUNE``).
        """
        idle_ms = int(self.consumer_idle * 1000)
        dropped = deleted = 0
        pattern = self.store.dispatch_streams
        async for stream in self._redis.scan_iter(match=pattern, count=1000, _type="stream"):
            consumers, gone = await self._prune_script(keys=[stream], args=[GROUP, idle_ms])
            dropped += int(consumers)
            deleted += int(gone)
        return dropped, deleted
