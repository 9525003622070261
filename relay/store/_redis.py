"""``redis://host:port/db`` (and ``rediss://``): channels shared by several relay nodes.

``RedisStore`` is the ``Store`` on Redis. Its parts have a module each:

* ``redis_keys``: the key names, a session's keys sharing the session's hash slot;
* ``redis_lua``: the Lua scripts, one per atomic step (an append is one script);
* ``redis_pipeline``: the one command connection, calls sent in call order as pipelines;
* ``redis_runs``: Run records read back, the status index and the dispatch streams;
* ``redis_presence``: agent presence and the AGENT_LOST sweep's queries;
* ``redis_live``: pub/sub, so that every node sees every append, without gaps;
* ``redis_cluster``: Cluster mode, which master serves the store's slot.

URL options (``URL_OPTIONS``): ``prefix``, ``max_history``, ``dedup_window``,
``history_ttl``, ``linger_ms``, ``socket_timeout``, ``connect_timeout`` and
``wait_replicas``. Every failure to reach Redis is ``STORE_UNAVAILABLE``; a
Redis that lost a session is seen by its epoch (``EPOCH_MISMATCH``).

See docs/explanation/stores.md for the key layout, the scripts, the linger,
the timeouts and what a failover can lose.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection

from transport._codec import splice_serial
from transport._runs import RunRecord
from transport.errors import (
    CONFLICT,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)

from ._base import (
    Appended,
    ChannelInfo,
    Gone,
    OnEntry,
    OnReset,
    Store,
    StoredEntry,
    Unsubscribe,
)
from ._redis_connections import Connections
from ._redis_keys import RedisKeys, glob_escape
from ._redis_layout import check_shards
from ._redis_live import Listener
from ._redis_log import EntryLog
from ._redis_lua import INDEXED, SCRIPTS, STATUSES, evalsha
from ._redis_options import URL_OPTIONS, read_url
from ._redis_pipeline import (
    CONNECT_TIMEOUT,
    LINGER_FULL,
    LINGER_MS,
    SOCKET_TIMEOUT,
    Pipeline,
    check,
)
from ._redis_presence import GoneOwners, Presence
from ._redis_runs import RunIndex
from ._redis_wire import unsupported

__all__ = [
    "CONNECT_TIMEOUT",
    "LINGER_FULL",
    "LINGER_MS",
    "SOCKET_TIMEOUT",
    "URL_OPTIONS",
    "GoneOwners",
    "RedisStore",
    "glob_escape",
]

log = logging.getLogger("runwire.relay.store")

HEALTH_TIMEOUT = 0.8
"""The longest ``healthy()`` waits for a PING's answer: ``/healthz`` answers within a second."""
_CONTENDED = 10_000
"""Sessions remembered as contended (the set starts over when full)."""


def _info(section: Any, field: bytes) -> str | None:
    """A field of an ``INFO`` reply (``field:value`` lines), or None."""
    if not isinstance(section, bytes):
        return None
    for line in section.splitlines():
        name, _, value = line.partition(b":")
        if name == field:
            return value.strip().decode(errors="replace")
    return None


def _warn_if_evicting(where: str, policy: str | None) -> None:
    """Log a warning unless Redis's ``maxmemory-policy`` keeps every key."""
    if policy not in (None, "noeviction"):
        log.warning(
            "Redis at %s may evict keys when it runs short of memory "
            "(maxmemory-policy %s): a session's serial counter, de-dup window or Run "
            "records could then go on their own; set maxmemory-policy noeviction, "
            "under which a full Redis refuses writes instead (STORE_UNAVAILABLE)",
            where,
            policy,
        )


def _check_replicated(
    reply: Any, wanted: int, wait_ms: int, session_id: str, entry_id: str
) -> None:
    """Raise ``STORE_UNAVAILABLE`` unless ``WAIT`` says ``wanted`` replicas have the append.

    The append is on the master all the same, but a failover may lose it.
    """
    check(reply)
    if int(reply) < wanted:
        raise RunwireError(
            STORE_UNAVAILABLE,
            f"{entry_id!r} of {session_id!r} reached {int(reply)} of the "
            f"{wanted} Redis replicas wait_replicas asks for within "
            f"{wait_ms} ms: stored on the master, but a failover could lose it",
            details={"replicas": int(reply)},
        )


class RedisStore(Store):
    """A ``Store`` on Redis (see the module docstring and ``relay.store._base``).

    ``await start()`` connects (raising ``RunwireError(STORE_UNAVAILABLE)`` if
    Redis cannot be reached) and ``await aclose()`` disconnects; other calls
    raise ``RunwireError(STORE_UNAVAILABLE)`` before ``start()``, after
    ``aclose()`` and while Redis is unreachable. ``round_trips`` counts the
    pipelines sent on the command connection. ``linger_ms`` may be changed at
    any time; it applies from the next batch.
    """

    loses_channels = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "rw:",
        max_history: int = 100_000,
        dedup_window: int = 10_000,
        history_ttl: float | None = None,
        linger_ms: float = LINGER_MS,
        socket_timeout: float = SOCKET_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        wait_replicas: int = 0,
        shards: int = 1,
        shard: int | None = None,
    ) -> None:
        options = read_url(
            url,
            prefix=prefix,
            max_history=max_history,
            dedup_window=dedup_window,
            history_ttl=history_ttl,
            linger_ms=linger_ms,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            wait_replicas=wait_replicas,
            shards=shards,
            shard=shard,
        )
        self.url = options.url
        self.cluster = options.cluster
        """Cluster mode (``redis+cluster://`` or ``?cluster=1``: see ``redis_cluster``)."""
        self.wait_replicas = options.wait_replicas
        """Replicas an append must reach (``WAIT``) before it is acknowledged; 0: none."""
        self.prefix = options.prefix
        self.shards = options.shards
        """How many stores share the URL's sessions (``redis_shards``); 1: this one alone."""
        self.shard = options.shard
        """Which of them this store is (its ``prefix`` is that shard's)."""
        self.keys = RedisKeys(options.prefix)
        """The names of this store's keys."""
        self.max_history = options.max_history
        self.dedup_window = options.dedup_window
        self.history_ttl = history_ttl = options.history_ttl
        self.sharded = True  # SPUBLISH/SSUBSCRIBE; set from the server's version at start
        self.where = options.where
        socket_timeout = options.socket_timeout
        self.connections = Connections(options)
        """The pool, and in Cluster mode the slot's master."""
        reason = unsupported(self.new_connection())
        if reason is not None:
            raise RunwireError(VALIDATION_ERROR, f"store URL {options.redis_url!r}: {reason}")
        self.pipeline = Pipeline(
            self.connections.new_connection,
            where=self.where,
            socket_timeout=socket_timeout,
            linger_ms=options.linger_ms,
            cluster=self.connections.cluster,
        )
        """The command connection every call goes through."""
        self.log = EntryLog(self.keys, self.pipeline)
        """Reads of sessions' entries."""
        self.index = RunIndex(self.keys, self.pipeline, self.where)
        """Run records read back, and the dispatch streams."""
        self.presence = Presence(self.keys, self.pipeline)
        """Agent presence and the AGENT_LOST sweep's queries."""
        self._wait_ms = max(1, round(socket_timeout * 500))
        """How long an append's ``WAIT`` waits for replicas: half the socket timeout."""
        self._ttl = "0" if history_ttl is None else str(max(1, round(history_ttl * 1000)))
        self._epochs: dict[str, str] = {}
        self._contended: set[str] = set()  # sessions whose last append met another node's
        self._listener = Listener(self)
        self._closed = False

    @property
    def socket_timeout(self) -> float:
        """Seconds a round trip (or a connect with its handshake) may take."""
        return self.pipeline.socket_timeout

    @property
    def linger_ms(self) -> float:
        """How long a small batch waits for company; may be changed at any time."""
        return self.pipeline.linger_ms

    @linger_ms.setter
    def linger_ms(self, value: float) -> None:
        self.pipeline.linger_ms = value

    @property
    def round_trips(self) -> int:
        """Pipelines sent on the command connection."""
        return self.pipeline.round_trips

    @property
    def maxmemory_policy(self) -> str | None:
        """Redis's ``maxmemory-policy``, read at start (a warning names any but ``noeviction``)."""
        return self.index.maxmemory_policy

    def client(self) -> Any:
        """A redis-py client for relay-node coordination (``Connections.client``)."""
        return self.connections.client()

    async def locate(self) -> None:
        """In Cluster mode, look up which master serves the store's slot now."""
        await self.connections.locate()

    def dispatch_stream(self, agent: str) -> str:
        """The stream of an agent's Runs waiting for a worker (``<prefix>agent:<name>:runs``)."""
        return self.keys.dispatch_stream(agent)

    @property
    def dispatch_streams(self) -> str:
        """A ``SCAN MATCH`` pattern for every agent's dispatch stream (and nothing else)."""
        return self.keys.dispatch_streams

    def key(self, *parts: str) -> str:
        """A key under this store's prefix for node coordination (``<prefix>a:b``)."""
        return self.keys.key(*parts)

    def live_channel(self, session_id: str) -> bytes:
        """The pub/sub channel a session's entries are published on."""
        return self.keys.live_channel(session_id)

    @property
    def filled(self) -> int:
        """Entries delivered to subscribers from the stream rather than from pub/sub."""
        return self._listener.filled

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect and load the scripts; raises ``RunwireError(STORE_UNAVAILABLE)`` if it can't."""
        if self.pipeline.running:
            return
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the Redis store is closed")
        self.pipeline.start()
        try:
            server, memory = await self.pipeline.call(("INFO", "server"), ("INFO", "memory"))
            version = _info(server, b"redis_version") or "7"
            self.sharded = int(version.split(".")[0]) >= 7
            policy = self.index.maxmemory_policy = _info(memory, b"maxmemory_policy")
            _warn_if_evicting(self.where, policy)
            await self.pipeline.call(*[("SCRIPT", "LOAD", text) for text in SCRIPTS.values()])
            if self.shard == 0:
                await check_shards(self.pipeline, self.keys.key("shards"), self.shards, self.where)
            # Index sets of ended Runs that earlier versions kept (and never read).
            ended = [self.keys.status(s) for s in STATUSES if s not in INDEXED]
            await self.pipeline.call(("UNLINK", *ended))
        except BaseException:
            await self.aclose()
            raise
        self._listener.start()

    async def aclose(self) -> None:
        """Fail queued calls, end every subscription and disconnect. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._listener.aclose()
        await self.pipeline.aclose()
        await self.connections.aclose()

    async def healthy(self) -> bool:
        """True while started, not closed, and Redis answers a PING (now)."""
        if self._closed or not self.pipeline.running:
            return False
        try:
            async with asyncio.timeout(min(HEALTH_TIMEOUT, self.socket_timeout)):
                await self.pipeline.call(("PING",))
        except (RunwireError, TimeoutError):
            return False
        return True

    # -- the Store interface ---------------------------------------------------

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel (a new one gets a random epoch, kept in Redis)."""
        keys = self.keys.session(session_id)
        (reply,) = await self.pipeline.call(
            evalsha("open", keys, [secrets.token_hex(8), self._ttl])
        )
        check(reply)
        epoch = reply[0].decode()
        self._epochs[session_id] = epoch
        return ChannelInfo(session_id, epoch, int(reply[2]), int(reply[1]))

    def close_channel(self, session_id: str) -> None:
        """Forget the channel's epoch (``open_channel`` reads it again)."""
        self._epochs.pop(session_id, None)
        self.keys.forget(session_id)
        self._contended.discard(session_id)

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
        """Store ``data`` under the next serial, or return the original of a repeated id.

        One script, one round trip. Raises ``RunwireError(CONFLICT)`` if
        ``expect_last`` is given and is not the newest serial. It raises it too if
        ``gone`` is given and a node marked that agent present in the session less
        than ``gone.grace`` seconds ago: it came back, and ``details["present"]``
        names it. Raises ``RunwireError(EPOCH_MISMATCH)`` if Redis lost the channel
        since ``open_channel``, ``RunwireError(INTERNAL_ERROR)`` if ``open_channel``
        was not called first, and ``RunwireError(VALIDATION_ERROR)`` for a Run
        record of another session.
        """
        self.pipeline.check_open()
        epoch = self._epochs.get(session_id)
        if epoch is None:
            raise RunwireError(INTERNAL_ERROR, f"append to {session_id!r} before open_channel")
        args: list[Any] = [
            epoch,
            entry_id,
            data,
            "" if expect_last is None else str(expect_last),
            str(self.max_history),
            str(self.dedup_window),
            self._ttl,
            "SPUBLISH" if self.sharded else "PUBLISH",
            self.live_channel(session_id),
            session_id,
            "" if gone is None else gone.client_id,
            "0" if gone is None else str(max(0, round(gone.grace * 1000))),
        ]
        args.extend(self.keys.run_args(session_id, runs))
        keys = self.keys.session(session_id)
        if runs or gone is not None:
            keys = [*keys, *self.keys.run_keys]  # the presence last
        contended = session_id in self._contended
        commands = [evalsha("append", keys, args)]
        if self.wait_replicas:
            commands.append(("WAIT", self.wait_replicas, self._wait_ms))
        reply, *waited = await self.pipeline.call(*commands, linger=not (urgent or contended))
        check(reply)
        if waited:
            _check_replicated(waited[0], self.wait_replicas, self._wait_ms, session_id, entry_id)
        code = int(reply[0])
        if code == 0:
            now = reply[1].decode() or None
            raise RunwireError(
                EPOCH_MISMATCH,
                f"Redis lost channel {session_id!r} (epoch {epoch}); open it again",
                details={"epoch": now},
            )
        if code == 2:
            last = int(reply[1])
            if len(self._contended) >= _CONTENDED:
                self._contended.clear()  # sessions that raced and went quiet
            self._contended.add(session_id)
            raise RunwireError(
                CONFLICT,
                f"{session_id!r} is at serial {last}, not {expect_last}",
                details={"last": last},
            )
        if code == 4:
            assert gone is not None
            raise RunwireError(
                CONFLICT,
                f"agent {gone.client_id!r} is present again: {entry_id!r} not stored",
                details={"present": gone.client_id},
            )
        if contended:
            self._contended.discard(session_id)
        serial = int(reply[1])
        if code == 1:
            return Appended(serial, bytes(reply[2]), duplicate=True)
        stored = splice_serial(data, serial)
        self._listener.offer(session_id, epoch, serial, stored)
        return Appended(serial, stored)

    async def subscribe(
        self, session_id: str, fn: OnEntry, *, on_reset: OnReset | None = None
    ) -> Unsubscribe:
        """Call ``fn`` with every entry any node appends to the channel from now on.

        Returns once Redis confirmed the subscription. Raises
        ``RunwireError(STORE_UNAVAILABLE)`` if pub/sub is not connected within
        the socket timeout. ``on_reset`` is called (and the subscription ends)
        if Redis loses the channel.
        """
        self.pipeline.check_open()
        return await self._listener.subscribe(session_id, fn, on_reset, self.socket_timeout)

    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored entry with this id, within the dedup window (``duplicate=True``), or None."""
        return await self.log.find(session_id, entry_id)

    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (see the contract)."""
        return await self.log.read(session_id, after, before, limit)

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written
        (``RunIndex.runs``: one round trip, unless Redis lost part of the order)."""
        return await self.index.runs(session_id)

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One Run record of a session, or None: one ``HGET``, however many Runs it has."""
        return await self.index.run(session_id, run_id)

    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given)."""
        return await self.index.runs_with_status(statuses, agent=agent)

    # -- agent presence and dispatch (relay._cluster) ------------------------------

    async def mark_present(
        self,
        client_ids: Sequence[str],
        ttl: float,
        *,
        scoped: Sequence[tuple[str, Sequence[str]]] = (),
    ) -> None:
        """Count agents present until ``ttl`` seconds from now (``Presence.mark_present``)."""
        await self.presence.mark_present(client_ids, ttl, scoped=scoped)

    @staticmethod
    def scope_member(client_id: str, patterns: Sequence[str]) -> bytes:
        """An agent's member of ``scoped_presence_key``: present where ``patterns`` match."""
        return Presence.scope_member(client_id, patterns)

    async def gone_owners(
        self, grace: float, *, limit: int = 1000
    ) -> dict[str, list[tuple[str, str]]]:
        """The owners gone for ``grace`` seconds, with their Runs (``Presence.gone_owners``)."""
        return await self.presence.gone_owners(grace, limit=limit)

    async def gone_and_lost(self, grace: float, *, limit: int = 1000) -> GoneOwners:
        """``gone_owners``, and which of those Runs Redis has no record of."""
        return await self.presence.gone_and_lost(grace, limit=limit)

    async def forget_lost(self, lost: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Drop lost Runs from their owners' sets (``Presence.forget_lost``); those dropped."""
        return await self.presence.forget_lost(lost)

    async def absent_from_now(self) -> int:
        """Restart the absence of owners whose deadline has passed, from now; how many."""
        return await self.presence.absent_from_now()

    async def index_owners(self) -> int:
        """Put every active Run in its owner's set if it is not; how many were added."""
        return await self.presence.index_owners()

    async def requeue(
        self, session_id: str, run_id: str, agent: str, entry_id: str, group: str
    ) -> None:
        """Give back a dispatch a node took (``RunIndex.requeue``)."""
        await self.index.requeue(session_id, run_id, agent, entry_id, group)

    async def ack_dispatch(self, agent: str, group: str, entry_id: str) -> None:
        """Acknowledge and delete ``entry_id`` on the agent's dispatch stream."""
        await self.index.ack_dispatch(agent, group, entry_id)

    # -- for the pub/sub listener ----------------------------------------------

    def new_connection(self) -> AbstractConnection:
        """A new, unconnected connection to this store's Redis (``Connections``)."""
        return self.connections.new_connection()

    async def head(self, session_id: str) -> tuple[str | None, int]:
        """The channel's epoch (None if it does not exist) and newest serial."""
        return await self.log.head(session_id)

    async def since(
        self, session_id: str, after: int, limit: int
    ) -> tuple[str | None, list[StoredEntry]]:
        """The channel's epoch and up to ``limit`` stored entries after ``after`` (one script)."""
        return await self.log.since(session_id, after, limit)
