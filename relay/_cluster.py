"""``RedisDispatcher``: dispatch and agent liveness shared by several relay nodes.

Used instead of ``relay._dispatch.Dispatcher`` when the store is Redis, so that nothing
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
of that pruning are in ``relay._cluster_scripts``.

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

from transport._runs import RunRecord
from transport.errors import RunwireError
from transport.messages import new_id

from ._dispatch import Expire, RunKey, discharge, enlist, hand_to_worker
from ._metrics import Metrics
from ._peer import Peer
from ._sweeper import GROUP, Sweeper
from .store._redis import RedisStore

__all__ = ["RedisDispatcher"]

log = logging.getLogger("runwire.relay")

BOUNCE_WAIT = 0.05
"""Seconds a node's dispatch reader first pauses after a round in which no local worker
could take any Run it read (see ``RedisDispatcher._after_round``)."""
_WIDENED = object()


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
        workers: dict[str, list[Peer]] | None = None,
        assigned: dict[RunKey, Peer] | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        if workers is None:  # else one of a store's shards: ``ShardedDispatcher`` counts
            metrics.count_store_round_trips(lambda: store.round_trips)
        self.claim_idle = claim_idle
        self.node_id = f"node-{new_id()[:12]}"
        self._redis: Any = store.client()
        self.workers: dict[str, list[Peer]] = {} if workers is None else workers
        """Local workers by agent name (shared by the dispatchers of a store's shards)."""
        self.assigned: dict[RunKey, Peer] = {} if assigned is None else assigned
        """Runs sent to a local worker (shared as ``workers`` is)."""
        self.held: dict[RunKey, tuple[str, str]] = {}  # run -> (agent, stream entry id)
        self.records: dict[RunKey, RunRecord] = {}
        self._reader: asyncio.Task[None] | None = None
        self._reading: frozenset[str] = frozenset()  # agent names the read in progress covers
        self._widen = asyncio.Event()  # a worker of a name it does not cover arrived
        self._joined = asyncio.Event()  # a worker (of any name) registered on this node
        self._bounce_wait = 0.0  # the reader's pause after a round it could hand out nothing
        self.read_block = 0.5
        """Seconds a dispatch read waits for a Run before it checks the workers again."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._groups: set[str] = set()
        # Where each stream's next XAUTOCLAIM goes on (it looks at 100 pending entries a
        # call, so starting from the first every time would never get past 100 held ones).
        self._claim_from: dict[str, str] = {}
        self.sweeper = Sweeper(
            store,
            self._redis,
            node_id=self.node_id,
            grace=grace,
            expire=expire,
            refresh=self._refresh_held,
            spawn=self._spawn,
            consumer_idle=consumer_idle,
            sweep_limit=sweep_limit,
        )

    # ---------------------------------------------------------- lifecycle --

    def start(self) -> None:
        """Start the heartbeat/sweep loop."""
        self._spawn(self.sweeper.run())

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
        self.hand_again(discharge(self.workers, self.assigned, peer, self.metrics))
        self.agent_left(peer)

    def hand_again(self, keys: list[RunKey]) -> None:
        """Hand the Runs of ``keys`` this dispatcher read to another local worker, or back
        to their stream; keys of Runs it did not read are passed over."""
        for key in keys:
            record = self.records.get(key)
            if record is not None and not self._hand_local(record):
                self._spawn(self._give_back(key))

    def agent_left(self, peer: Peer) -> None:
        """Stop counting an agent connection for the presence heartbeat."""
        if peer.is_agent():  # as ``Hub.hello`` counted it
            self.sweeper.left((peer.sender.client_id, peer.agent_scope()))

    def client_back(self, client_id: str, *, scope: tuple[str, ...] | None = None) -> None:
        """Count an agent connection for the presence heartbeat (clients own no Runs), by
        client id and ``scope``, the patterns of the sessions it may act in
        (``Peer.agent_scope``; None: every session), so its presence keeps its Runs there
        only."""
        self.sweeper.arrived((client_id, scope))

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
        """Acknowledge and delete a dispatch entry, on the store's command connection.

        A task per ack on the pooled client opened a Redis connection per Run that started
        in a burst. It kept them for ever and failed the acks beyond the pool's limit.
        """
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
                if self.claim_due(now) and now - claimed_at >= min(1.0, self.claim_idle / 2):
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
                self.sweeper.steady_since = None
                await asyncio.sleep(0.5)

    async def _after_round(self, taken: int, given_back: int) -> None:
        """Pause a little when a round gave back every Run it read.

        No local worker could take them: their tokens do not cover those sessions. The
        pause keeps the node from reading the same Runs again and again while no node can
        take them.

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

    def claim_due(self, now: float) -> bool:
        """Whether entries idle for ``claim_idle`` seconds may be taken as abandoned now.

        Only once this node has had Redis, without a failure, for ``claim_idle`` seconds.
        Redis counts the time it was away (or paused, or out of reach) as idle time. So
        right after an outage every held entry looks abandoned, those of live nodes too,
        whose heartbeat refreshes them once they have Redis back. This holds for a reader
        that saw the outage and for one that starts just after it (a node's first worker
        registering then): the node's maintenance, every heartbeat, saw it either way.
        A node that has just started waits as long, so a dead node's entries go to a
        worker at most ``claim_idle`` seconds (and a heartbeat) after the later of its
        death and the claimer's start.
        """
        since = self.sweeper.steady_since
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

    @property
    def heartbeat(self) -> float:
        """Seconds between two presence rounds (``Sweeper.heartbeat``)."""
        return self.sweeper.heartbeat
