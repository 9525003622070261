"""``RedisDispatcher``: dispatch and agent liveness shared by several relay nodes.

Used instead of ``relay.dispatch.Dispatcher`` when the store is Redis, so that nothing
a second node would need stays in one node's memory.

Dispatch. The store's append script puts a Run written ``pending`` on its agent's
Redis stream, in the same atomic step that stores the prompt. One consumer group reads
each stream, every node a consumer of it. A node reads a stream only while it has a
live worker of that agent name, so each Run goes to exactly one node and one worker.
The node acknowledges the stream entry when the Run leaves ``pending``. Entries of a
node that died go idle and the other nodes claim them.

Liveness. Every node marks the agent client ids it holds connections of present,
each heartbeat, in one script. One node at a time sweeps: the holder of a lease. The
sweep finds the owners whose presence lapsed ``agent_grace`` seconds ago and the Runs
they still own. Each such Run ends ``error`` with ``AGENT_LOST`` if its owner is still
gone when the end is stored. A durable Run goes back to ``pending`` instead, and
another worker adopts it.

One task per node reads the streams of every agent name it serves, in one blocking
read. The heartbeat keeps the node's entries and presence fresh. The sweeper also
drops the consumers and streams nobody uses any more. The Lua scripts of the lease and
of that pruning are in ``relay.cluster_scripts``.

docs/explanation/relay-internals.md tells every step and why it is safe: outages,
claims, scopes of presence, evicted records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from contextlib import suppress
from typing import Any

from redis.exceptions import RedisError, ResponseError

from transport.errors import STORE_UNAVAILABLE, RunwireError
from transport.messages import new_id
from transport.runs import RunRecord

from .cluster_scripts import LEAD, PRUNE
from .dispatch import Expire, RunKey, discharge, enlist, hand_to_worker
from .metrics import Metrics
from .peer import Peer
from .store.redis import RedisStore

__all__ = ["RedisDispatcher"]

log = logging.getLogger("runwire.relay")

GROUP = "relay"
BOUNCE_WAIT = 0.05
"""Seconds a node's dispatch reader first pauses after a round in which no local worker
could take any Run it read (see ``RedisDispatcher._after_round``)."""
_WIDENED = object()
Presence = tuple[str, tuple[str, ...] | None]
"""An agent connection's client id and the patterns of the sessions it may act in (None:
every session), as ``Peer.agent_scope`` gives them."""


class RedisDispatcher:
    """Same interface as ``Dispatcher``; state in Redis (see the module docstring)."""

    needs_pending = False
    """The agents' streams hold the waiting Runs: a worker costs no read of the index."""

    def __init__(
        self,
        store: RedisStore,
        *,
        grace: float,
        expire: Expire,
        metrics: Metrics,
        claim_idle: float = 10.0,
        consumer_idle: float = 600.0,
        sweep_limit: int = 1000,
    ) -> None:
        self.store = store
        self.sweep_limit = sweep_limit
        """At most how many gone owners one sweep takes (oldest first)."""
        self.grace = grace
        self.metrics = metrics
        metrics.count_store_round_trips(lambda: store.round_trips)
        self.claim_idle = claim_idle
        self.consumer_idle = consumer_idle
        """Seconds a stream consumer holding nothing may stay idle before the sweeper drops it."""
        self._pruned = 0.0  # when this node last pruned consumers (as the sweeper)
        self.indexed = False
        """The active Runs an earlier version left out of their owners' sets are in them."""
        self.heartbeat = max(0.2, min(grace / 3, 2.0))
        self.node_id = f"node-{new_id()[:12]}"
        self._expire = expire
        self._redis: Any = store.client()
        self.workers: dict[str, list[Peer]] = {}
        self.assigned: dict[RunKey, Peer] = {}
        self.held: dict[RunKey, tuple[str, str]] = {}  # run -> (agent, stream entry id)
        self.records: dict[RunKey, RunRecord] = {}
        self.agents_present: dict[Presence, int] = {}
        """This node's agent connections by client id and scope (``Peer.agent_scope``)."""
        self._reader: asyncio.Task[None] | None = None
        self._reading: frozenset[str] = frozenset()  # agent names the read in progress covers
        self._widen = asyncio.Event()  # a worker of a name it does not cover arrived
        self._joined = asyncio.Event()  # a worker (of any name) registered on this node
        self._bounce_wait = 0.0  # the reader's pause after a round it could hand out nothing
        self.read_block = 0.5
        """Seconds a dispatch read waits for a Run before it checks the workers again."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._steady_since: float | None = None
        """Since when (monotonic) this node has had Redis without a failure, or None: not yet
        (its maintenance has not gone through once) or its maintenance or reader failed
        since (see ``_claim_due``)."""
        self._arrived: set[Presence] = set()  # agents whose presence is not written yet
        self._toucher: asyncio.Task[None] | None = None
        self._groups: set[str] = set()
        # Where each stream's next XAUTOCLAIM goes on (it looks at 100 pending entries a
        # call, so starting from the first every time would never get past 100 held ones).
        self._claim_from: dict[str, str] = {}
        self._lead_script: Any = self._redis.register_script(LEAD)
        self._prune_script: Any = self._redis.register_script(PRUNE)

    # ---------------------------------------------------------- lifecycle --

    def start(self) -> None:
        """Start the heartbeat/sweep loop."""
        self._spawn(self._maintain())

    def close(self) -> None:
        """Stop every loop (held stream entries go idle and other nodes claim them)."""
        for task in [*self._tasks, self._reader]:
            if task is not None:
                task.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _stream(self, agent: str) -> str:
        return self.store.dispatch_stream(agent)

    async def _ensure_group(self, agent: str) -> None:
        if agent in self._groups:
            return
        try:
            await self._redis.xgroup_create(self._stream(agent), GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(agent)

    # ------------------------------------------------------------ workers --

    def add_worker(self, peer: Peer, agent: str, pending: list[RunRecord]) -> None:
        """Register a local worker; start reading the agent's stream on this node."""
        del pending  # empty (``needs_pending``): the stream holds waiting Runs
        enlist(self.workers, peer, agent, self.metrics)
        self._joined.set()
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read())
        elif agent not in self._reading:
            self._widen.set()

    def peer_gone(self, peer: Peer, owned_active: list[RunRecord]) -> None:
        """Re-hand Runs a dead worker had not started; liveness covers its active Runs."""
        del owned_active  # the sweep ends them after the grace period, on whatever node
        for key in discharge(self.workers, self.assigned, peer, self.metrics):
            record = self.records.get(key)
            if record is not None and not self._hand_local(record):
                self._spawn(self._give_back(key))
        if peer.is_agent():  # as ``Hub.hello`` counted it
            present = (peer.sender.client_id, peer.agent_scope())
            left = self.agents_present.get(present, 1) - 1
            if left <= 0:
                self.agents_present.pop(present, None)
            else:
                self.agents_present[present] = left

    def client_back(self, client_id: str, *, scope: tuple[str, ...] | None = None) -> None:
        """Count an agent connection for the presence heartbeat (clients own no Runs), by
        client id and ``scope``, the patterns of the sessions it may act in
        (``Peer.agent_scope``; None: every session), so its presence keeps its Runs there
        only."""
        present = (client_id, scope)
        self.agents_present[present] = self.agents_present.get(present, 0) + 1
        self._arrived.add(present)
        if self._toucher is None or self._toucher.done():
            self._toucher = self._spawn(self._touch_arrived())

    async def _touch_arrived(self) -> None:
        """Write the presence of agents that connected, all that came meanwhile at once.

        One task, one pipeline at a time: a thousand agents reconnecting to a node
        together (after a restart) cost a few round trips on one connection, not a
        connection each.
        """
        while self._arrived:
            arrived = list(self._arrived)
            self._arrived.clear()
            await self._touch(arrived)

    def start_timer(self, record: RunRecord) -> None:
        """Liveness is swept from Redis; nothing to time locally."""

    # --------------------------------------------------------------- runs --

    async def run_created(self, record: RunRecord) -> None:
        """Nothing to do: the append that made the Run pending put it on its agent's stream."""

    def run_changed(self, record: RunRecord) -> None:
        """A Run left ``pending``: acknowledge its stream entry if this node held it."""
        key = (record.session_id, record.run_id)
        if record.status == "pending":
            return
        self.assigned.pop(key, None)
        self.records.pop(key, None)
        held = self.held.pop(key, None)
        if held is not None:
            self._spawn(self._ack(*held))

    # ------------------------------------------------------------ helpers --

    async def _ack(self, agent: str, entry_id: str) -> None:
        """Acknowledge and delete a dispatch entry, on the store's command connection (a
        task per ack on the pooled client opened a Redis connection per Run that started
        in a burst, kept for ever, and failed the acks beyond the pool's limit)."""
        try:
            await self.store.ack_dispatch(agent, GROUP, entry_id)
        except RunwireError as exc:
            log.warning("could not acknowledge dispatch %s: %s", entry_id, exc)

    async def _give_back(self, key: RunKey) -> None:
        held = self.held.pop(key, None)
        record = self.records.pop(key, None)
        if held is None or record is None:
            return
        agent, entry_id = held
        try:
            await self.store.requeue(record.session_id, record.run_id, agent, entry_id, GROUP)
        except RunwireError as exc:
            log.warning("could not re-queue run %s: %s", key, exc)

    def _live_workers(self, agent: str) -> list[Peer]:
        return [w for w in self.workers.get(agent, []) if not w.closed]

    def _hand_local(self, record: RunRecord) -> bool:
        key = (record.session_id, record.run_id)
        if hand_to_worker(self._live_workers(record.agent), self.assigned, record, self.metrics):
            self.records[key] = record
            return True
        return False

    async def _take(self, agent: str, entry_id: str, fields: dict[bytes, bytes]) -> bool:
        """Hand the Run of a stream entry to a local worker. Returns False when it went
        back to the stream instead: no local worker of its name may take it (none has
        the ``agent`` right in its session)."""
        session_id = fields.get(b"s", b"").decode()
        run_id = fields.get(b"r", b"").decode()
        key = (session_id, run_id)
        record = await self.store.run(session_id, run_id)
        if record is None or record.status != "pending":
            await self._ack(agent, entry_id)
            return True
        self.held[key] = (agent, entry_id)
        if not self._hand_local(record):
            self.records[key] = record
            await self._give_back(key)
            return False
        return True

    async def _read(self) -> None:
        """Read the streams of every agent name this node has live workers of."""
        own = True  # first take back what this node holds unacknowledged
        regrouped = False  # the last round ended in NOGROUP, and made its groups again
        claimed_at = 0.0
        while True:
            # No await from here to ``_reading``: a worker of a name not in it, from
            # now on, sets ``_widen`` and cuts the coming read short.
            self._widen.clear()
            self._joined.clear()
            agents = [agent for agent in list(self.workers) if self._live_workers(agent)]
            self._reading = frozenset(agents)
            # Forget the streams of names with no live worker here (agent names come and
            # go); one that comes back has its group made again, its claims start over.
            self._groups.intersection_update(agents)
            streams = {self._stream(agent): agent for agent in agents}
            for stream in [s for s in self._claim_from if s not in streams]:
                del self._claim_from[stream]
            if not agents:
                return
            try:
                for agent in agents:
                    await self._ensure_group(agent)
                if own:
                    reply = await self._redis.xreadgroup(
                        GROUP, self.node_id, dict.fromkeys(streams, "0"), count=100
                    )
                    own = False
                else:
                    reply = await self._interruptible(
                        self._redis.xreadgroup(
                            GROUP,
                            self.node_id,
                            dict.fromkeys(streams, ">"),
                            count=10,
                            block=max(1, int(self.read_block * 1000)),
                        )
                    )
                    if reply is _WIDENED:
                        own = True  # Redis may have handed it entries all the same
                        continue
                held = set(self.held.values())  # (agent, entry id): ids repeat across streams
                taken = given_back = 0
                for stream, items in reply or []:
                    agent = streams[stream.decode()]
                    for raw_id, fields in items:
                        entry_id = raw_id.decode()
                        if (agent, entry_id) in held:
                            continue  # taken already (read again with this node's own)
                        if not fields:  # deleted while this node held it
                            await self._ack(agent, entry_id)
                            continue
                        if await self._take(agent, entry_id, fields):
                            taken += 1
                        else:
                            given_back += 1
                now = time.monotonic()
                if self._claim_due(now) and now - claimed_at >= min(1.0, self.claim_idle / 2):
                    claimed_at = now
                    await self._claim_idle(streams)
                await self._after_round(taken, given_back)
                regrouped = False
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, RunwireError) as exc:  # the store's: STORE_UNAVAILABLE
                self._groups.clear()
                own = True
                if isinstance(exc, ResponseError) and str(exc).startswith("NOGROUP"):
                    if not regrouped:
                        # A stream (with its group) the sweeper deleted as unused just
                        # before this node read it (or Redis lost its data): make the group
                        # again, from the stream's start, and read again at once.
                        regrouped = True
                        continue
                log.warning("dispatch reader: %s", exc)
                self._steady_since = None
                await asyncio.sleep(0.5)

    async def _after_round(self, taken: int, given_back: int) -> None:
        """Pause a little when a round gave back every Run it read (no local worker may
        take them: their tokens do not cover those sessions), so that the node does not
        read the same Runs again at once, over and over, while no node can take them.

        The pause doubles from ``BOUNCE_WAIT`` up to ``read_block`` while rounds keep
        giving back all they read; a worker registering on this node ends it at once.
        The Runs wait on the stream meanwhile, for whichever node can take them.
        """
        if not given_back or taken:
            self._bounce_wait = 0.0
            return
        self._bounce_wait = min(max(BOUNCE_WAIT, self._bounce_wait * 2), self.read_block)
        if self._joined.is_set() or self._widen.is_set():
            return
        joined = asyncio.ensure_future(self._joined.wait())
        widened = asyncio.ensure_future(self._widen.wait())
        try:
            await asyncio.wait({joined, widened}, timeout=self._bounce_wait)
        finally:
            joined.cancel()
            widened.cancel()

    async def _interruptible(self, read: Coroutine[Any, Any, Any]) -> Any:
        """``read``'s reply, or ``_WIDENED`` if a worker of another agent name came first."""
        reading = asyncio.ensure_future(read)
        widened = asyncio.ensure_future(self._widen.wait())
        try:
            await asyncio.wait({reading, widened}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            widened.cancel()
            if not reading.done():
                reading.cancel()
                with suppress(asyncio.CancelledError, RedisError, OSError):
                    await reading
        return _WIDENED if reading.cancelled() else reading.result()

    def _claim_due(self, now: float) -> bool:
        """Whether entries idle for ``claim_idle`` seconds may be taken as abandoned now.

        Only once this node has had Redis, without a failure, for ``claim_idle`` seconds:
        Redis counts the time it was away (or paused, or out of reach) as idle time, so
        right after an outage every held entry looks abandoned, those of live nodes too,
        whose heartbeat refreshes them once they have Redis back. This holds for a reader
        that saw the outage and for one that starts just after it (a node's first worker
        registering then): the node's maintenance, every heartbeat, saw it either way.
        A node that has just started waits as long, so a dead node's entries go to a
        worker at most ``claim_idle`` seconds (and a heartbeat) after the later of its
        death and the claimer's start.
        """
        since = self._steady_since
        return since is not None and now - since >= self.claim_idle

    async def _claim_idle(self, streams: dict[str, str]) -> None:
        """Take over entries other nodes left unacknowledged for ``claim_idle`` seconds.

        Each call goes on through a stream's pending entries where the last one
        stopped (Redis's cursor), back to the first once it has been through them all.
        """
        idle_ms = int(self.claim_idle * 1000)
        async with self._redis.pipeline(transaction=False) as pipe:
            for stream in streams:
                start = self._claim_from.get(stream, "0-0")
                pipe.xautoclaim(stream, GROUP, self.node_id, idle_ms, start, count=10)
            replies = await pipe.execute()
        for (stream, agent), claimed in zip(streams.items(), replies, strict=True):
            if claimed:
                self._claim_from[stream] = claimed[0].decode()
            for entry_id, fields in claimed[1] if claimed else []:
                if fields:
                    await self._take(agent, entry_id.decode(), fields)

    async def _touch(self, present: list[Presence]) -> bool:
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

    async def _maintain(self) -> None:
        lapsed = True  # no sweep yet, or maintenance failed (Redis away) since the last one
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                if not self.indexed:
                    await self.store.index_owners()
                    self.indexed = True
                if not await self._touch(list(self.agents_present)):
                    lapsed = True  # this node's agents may have lapsed meanwhile
                    self._steady_since = None
                await self._refresh_held()
                held = await self._lead()
                if held:
                    if held == 2 or lapsed:
                        # Deadlines that passed while no node could write presence (Redis
                        # away, or no sweeper) do not count: absence starts now, so every
                        # node marks its agents again before any Run is ended.
                        await self.store.absent_from_now()
                        lapsed = False
                    await self._sweep()
                    if time.monotonic() - self._pruned >= min(60.0, self.consumer_idle):
                        self._pruned = time.monotonic()
                        await self._prune()
                if self._steady_since is None:
                    self._steady_since = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                lapsed = True
                self._steady_since = None
                if isinstance(exc, RunwireError) and exc.code == STORE_UNAVAILABLE:
                    log.warning("cluster maintenance failed: %s", exc)  # Redis away: no trace
                else:
                    log.exception("cluster maintenance failed")

    async def _lead(self) -> int:
        """Take or keep the sweeper's lease: 0 if another node holds it, 1 if this node
        kept it, 2 if it has just taken it."""
        lease = int(self.heartbeat * 3000)
        held = await self._lead_script(keys=[self.store.key("sweeper")], args=[self.node_id, lease])
        return int(held)

    async def _refresh_held(self) -> None:
        """Keep this node's held entries fresh; forget those gone from the stream.

        An entry is gone when its Run left ``pending`` (the append script deletes it,
        and ``XCLAIM`` drops a deleted entry from the group's pending list) on a node
        that had the session loaded; this node, without it, was not told. Every entry
        of a stream whose group is gone (``NOGROUP``: Redis lost its data) is gone too;
        the reader makes the group again.
        """
        by_agent: dict[str, list[str]] = {}
        for agent, entry_id in self.held.values():
            by_agent.setdefault(agent, []).append(entry_id)
        for agent, ids in by_agent.items():
            try:
                kept = await self._redis.xclaim(
                    self._stream(agent), GROUP, self.node_id, 0, ids, justid=True
                )
            except ResponseError as exc:
                if not str(exc).startswith("NOGROUP"):
                    raise
                kept = []
            gone = set(ids) - {entry_id.decode() for entry_id in kept}
            for key, held in list(self.held.items()):
                if held[0] == agent and held[1] in gone:
                    del self.held[key]
                    self.assigned.pop(key, None)
                    self.records.pop(key, None)

    async def _sweep(self) -> None:
        """End the active Runs of owners gone for ``grace`` seconds past their deadline.

        One round trip when nobody left, however many Runs are active; the Runs of
        owners that did take one ``expire`` each.

        A Run whose record Redis lost (evicted, or deleted, while its owner's set still
        names it) is given to ``expire`` too (a node that has its session loaded still
        knows it, and its end writes the record again), then dropped from its owner's set
        if its record is still missing: one more round trip, only when there is such a Run,
        and a warning for each dropped (once: it is in no set after that). Its owner is
        then forgotten as any other owning nothing. A Run whose record is there stays,
        whatever became of its end (``Hub._agent_lost`` logs a failed one; the next sweeps
        try again).
        """
        found = await self.store.gone_and_lost(self.grace, limit=self.sweep_limit)
        for runs in found.runs.values():
            for session_id, run_id in runs:
                await self._expire(session_id, run_id)
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

    async def _prune(self) -> tuple[int, int]:
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
