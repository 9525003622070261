"""``redis://host:port/db`` (and ``rediss://``): channels shared by several relay nodes.

Theory of operation
-------------------
Keys live under a prefix (``rw:`` by default; ``?prefix=`` in the URL), and
every key of a session carries the session as a hash tag, ``rw:{<session>}:``,
so a session's keys share one Cluster slot:

* ``meta``: a hash with the epoch ``e``, the newest serial ``s``, for each
  ``pending`` Run ``d:<run id>``: its entry on its agent's dispatch stream, and
  for each ``active`` Run with an owner ``o:<run id>``: its owner's set (below);
* ``log``: a stream of the entries, id ``<serial>-0``, field ``d``, trimmed
  with ``MAXLEN ~ max_history`` (default 100,000; never below the dedup window);
* ``ids``: a sorted set entry id -> serial holding exactly the newest
  ``dedup_window`` ids (default 10,000): the dedup window is by count, not time;
* ``runs`` (run id -> JSON record) and ``order`` (run ids in the order first
  written). ``runs()`` lists every record of ``runs``: in the order of ``order``,
  and, should Redis have lost that list or part of it while ``runs`` survived
  (evicted under a ``maxmemory-policy`` other than ``noeviction``, restored in
  part, deleted), the records it does not name where their creation puts them
  (``seq``, then ``created_ts``), so the hub still finds those Runs (an AGENT_LOST
  sweep can end them) and clients loading the session see them. Only then is
  there more to do than the one round trip: a script writes the list anew (unless
  a Run was pushed on it since it was read) and the node logs a warning, once
  per session;
* ``live``: the pub/sub channel entries are published on (``SPUBLISH`` on
  Redis 7 and later, ``PUBLISH`` before).

``runs_with_status`` reads a global index, one set per status a Run leaves
(``rw:status:<status>`` for ``queued`` to ``suspended``, members
``["<session>","<run id>"]`` as JSON; a Run that ends leaves every set, so
the index holds what is under way, not every Run that ever ended), kept in
step by the same scripts, and so are the agents' dispatch streams
(``rw:agent:<name>:runs``, read by ``relay.cluster``): a Run written
``pending`` is added to its agent's stream in the same script, and taken off it
when written with another status, so a stored prompt cannot lose its dispatch
and no stream entry outlives its Run's ``pending``. The scripts also keep each
owner's active Runs (``rw:owns:<client id>``, members as in the status index)
and put an owner no node has marked present in the Run's session yet in the
agents' presence (``rw:presence``, a sorted set client id -> deadline in ms on
Redis's clock, for agents that may act in every session; ``rw:scoped``,
``[client id, [pattern, ...]]`` -> deadline, for those whose token grants ``agent``
in some sessions only, each client id's members in ``rw:scopes:<client id>``; the
nodes refresh both: ``mark_present``), so ``relay.cluster``'s AGENT_LOST
sweep asks only after owners past a deadline (``gone_owners``, one script)
instead of reading every Run under way, and returns their Runs in sessions no
deadline of theirs still covers (telling which of them have no record left: Redis
evicted or lost it; ``forget_lost`` drops those from their owner's set once the hub
had its try, ``gone_and_lost``); the append that then ends such an owner's
Run tests that again in the same script (``append(..., gone=)``), so an
owner marked present there meanwhile keeps its Run. Those keys are outside the
session's slot, so the store needs a standalone Redis (or a proxy that keeps
everything on one node): Redis Cluster would refuse the scripts with
``CROSSSLOT``. Everything else is ready for Cluster.

With ``history_ttl`` (seconds, ``?history_ttl=`` in the URL) every write to a
session refreshes an expiry on all its keys, so an idle session is dropped as
a whole (and gets a new epoch when opened again); off by default.

One Lua script per append, in one round trip: check the epoch, the dedup
window (a repeat returns the original), ``expect_last`` (``CONFLICT``), then
write the entry with its serial spliced in (exactly like
``codec.splice_serial``), record the id, write the Run records and the status
index, and publish ``<epoch> <entry>``. Other nodes see the entry through
pub/sub (``redis_live``).

Commands go out in call order on one connection owned by one task: every call
queues its commands before it first yields, the task sends everything queued
as one pipeline (one round trip, counted in ``round_trips``) and hands each
caller its replies. So appends are sequenced in call order, ``find`` sees an
append called before it, and a hundred concurrent appends cost a few round
trips, not a hundred. Scripts run by ``EVALSHA`` (``SCRIPT LOAD`` at start and
again after ``NOSCRIPT``, when Redis restarted).

One pipeline is in flight at a time; what is queued meanwhile waits for it.
At a low rate that shares little (at 1,000 single-token appends a second
nearly every append would be a round trip of its own), so a small batch
*lingers* (the idea of Kafka's ``linger.ms``): when the writer finds fewer
than ``LINGER_FULL`` commands queued, it waits until the oldest of them has
waited ``linger_ms`` (``?linger_ms=`` in the URL; 2 ms by default, 0 turns it
off) or until ``LINGER_FULL`` are queued, then sends. Calls of different
sessions then share round trips (fewer for Redis to read, fewer for the node
to send and wake for) for at most ``linger_ms`` more latency; under load the
queue fills while the previous round trip is in flight and nothing lingers.
Only appends that are not ``urgent`` linger (the relay's streamed deltas:
everything else it appends, messages, cancels, Run status, has someone
waiting); every other call (an attach's reads, a catch-up, a gap fill, the
health ``PING``, Run record writes, start-up) ends a linger at once. A
session whose append lost a race with another node's (``CONFLICT``) does not
linger either: its retried append ends the linger at once, so the node that
lost does not keep losing to a node whose publishes follow each other as
fast as its acks come back.

Failure: any Redis or socket error fails the calls of that round trip with
``RunwireError(STORE_UNAVAILABLE)`` (an append that fails so may or may not
have been written: read back the truth); the next call connects again. There
are no automatic retries, so a dead Redis is reported within the socket
timeouts (``connect_timeout`` 1 s, ``socket_timeout`` 1.5 s by default, or
``?connect_timeout=`` and ``?socket_timeout=`` in the URL; the latter bounds a
round trip as a whole, connecting, sending and every reply, with one deadline
rather than redis-py's timer per reply). When a round trip gets no reply in
time (Redis hung or stopped), the calls that waited behind it a third of the
timeout or more fail with it, so no call waits much over ``socket_timeout``
(4/3 of it: 2 s by default) whatever it waited behind; ``healthy()`` waits at
most ``HEALTH_TIMEOUT`` (0.8 s). An error reply
(Redis out of memory, a read-only replica, one still loading its data) fails
just its call, ``STORE_UNAVAILABLE`` with Redis's code in ``details["redis"]``;
a script refused so wrote nothing (Redis refuses a script at its first write).
``start()`` reads ``maxmemory-policy`` and warns of any but ``noeviction``. Redis
that lost its data (no persistence) is seen by the epoch check: ``append``
raises ``RunwireError(EPOCH_MISMATCH)`` until the channel is opened again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    BusyLoadingError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
)

from transport.codec import dumps, loads, splice_serial
from transport.errors import (
    CONFLICT,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.runs import RunRecord

from .base import (
    Appended,
    ChannelInfo,
    Gone,
    OnEntry,
    OnReset,
    Store,
    StoredEntry,
    Unsubscribe,
    read_position,
)
from .redis_live import Listener, connect, stop
from .redis_lua import INDEXED, SCRIPTS, SHA, STATUSES
from .redis_wire import Wire, unsupported

__all__ = ["URL_OPTIONS", "GoneOwners", "RedisStore", "glob_escape"]

log = logging.getLogger("runwire.relay.store")

_MAX_BATCH = 1000
"""Commands sent in one round trip at most."""
LINGER_MS = 2.0
SOCKET_TIMEOUT = 1.5
"""The default bound of one round trip (seconds): a Redis that does not answer in it is
unavailable (a publish fails ``STORE_UNAVAILABLE`` and the SDK retries)."""
CONNECT_TIMEOUT = 1.0
"""The default bound of a TCP connect to Redis (seconds)."""
HEALTH_TIMEOUT = 0.8
"""The longest ``healthy()`` waits for a PING's answer: ``/healthz`` answers within a second."""
"""Default ``linger_ms``: how long a small batch waits for company before it is sent."""
LINGER_FULL = 32
"""Queued commands that end the linger at once (a batch worth sending as it is)."""

URL_OPTIONS = (
    "prefix",
    "max_history",
    "dedup_window",
    "history_ttl",
    "linger_ms",
    "socket_timeout",
    "connect_timeout",
)
"""Query options of a ``redis://`` URL that are the store's own, not redis-py's."""


@dataclass(frozen=True)
class GoneOwners:
    """What one AGENT_LOST sweep found (``RedisStore.gone_and_lost``)."""

    runs: dict[str, list[tuple[str, str]]]
    """Per owner gone past the grace, the Runs (session id, run id) it still owns there."""
    lost: list[tuple[str, str, str]]
    """Of those, the Runs Redis has no record of (owner, session id, run id)."""


def _serial_of(stream_id: bytes) -> int:
    return int(stream_id.partition(b"-")[0])


def _by_creation(listed: list[RunRecord], missing: list[RunRecord]) -> list[RunRecord]:
    """``listed`` in its order, with each of ``missing`` before the first of them created
    after it (``seq``, then ``created_ts``; ``missing`` among themselves by those, then by
    run id): the order the Runs were first written in, when ``listed`` was."""
    missing = sorted(missing, key=lambda r: (_created(r), r.run_id))
    found: list[RunRecord] = []
    at = 0
    for record in listed:
        while at < len(missing) and _created(missing[at]) < _created(record):
            found.append(missing[at])
            at += 1
        found.append(record)
    found.extend(missing[at:])
    return found


def _created(record: RunRecord) -> tuple[int, int]:
    """When a Run was made: its place among its session's (``seq``), then its stamp."""
    return record.seq, record.created_ts


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Op:
    __slots__ = ("commands", "future", "queued", "urgent")

    def __init__(
        self,
        commands: list[tuple[Any, ...]],
        future: asyncio.Future[list[Any]],
        queued: float,
        urgent: bool,
    ) -> None:
        self.commands = commands
        self.future = future
        self.queued = queued
        self.urgent = urgent


def glob_escape(text: str) -> str:
    """``text`` matched literally in a ``SCAN MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _info(section: Any, field: bytes) -> str | None:
    """A field of an ``INFO`` reply (``field:value`` lines), or None."""
    if not isinstance(section, bytes):
        return None
    for line in section.splitlines():
        name, _, value = line.partition(b":")
        if name == field:
            return value.strip().decode(errors="replace")
    return None


_REFUSALS: tuple[tuple[type[RedisError], str, str], ...] = (
    (OutOfMemoryError, "OOM", "is out of memory (maxmemory reached) and wrote nothing"),
    (ReadOnlyError, "READONLY", "is a read-only replica"),
    (BusyLoadingError, "LOADING", "is still loading its data set"),
)
"""Refusals of a Redis that is there but cannot take writes: its error code and what it means."""


def _refused(where: str, reply: RedisError) -> RunwireError:
    """``STORE_UNAVAILABLE`` for an error reply, saying why when Redis said so.

    redis-py strips the error code (``OOM``, ``READONLY``, ...) from the message and
    turns it into the exception's class (not always a ``ResponseError``: ``LOADING``
    is a ``ConnectionError``); ``details["redis"]`` gives the code back.
    """
    for kind, code, meaning in _REFUSALS:
        if isinstance(reply, kind):
            return RunwireError(
                STORE_UNAVAILABLE, f"Redis at {where} {meaning}: {reply}", details={"redis": code}
            )
    return RunwireError(STORE_UNAVAILABLE, f"Redis at {where}: {reply}")


class RedisStore(Store):
    """A ``Store`` on Redis (see the module docstring and ``relay.store.base``).

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
    ) -> None:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        options: dict[str, str] = {k: query.pop(k) for k in URL_OPTIONS if k in query}
        try:
            prefix = options.get("prefix", prefix)
            max_history = int(options.get("max_history", max_history))
            dedup_window = int(options.get("dedup_window", dedup_window))
            ttl = options.get("history_ttl")
            history_ttl = float(ttl) if ttl is not None else history_ttl
            linger_ms = float(options.get("linger_ms", linger_ms))
            socket_timeout = float(options.get("socket_timeout", socket_timeout))
            connect_timeout = float(options.get("connect_timeout", connect_timeout))
        except ValueError as exc:
            raise RunwireError(VALIDATION_ERROR, f"store URL {url!r}: {exc}") from None
        if "{" in prefix or "}" in prefix:
            raise RunwireError(VALIDATION_ERROR, f"Redis key prefix {prefix!r} has a brace")
        if dedup_window < 1 or max_history < dedup_window:
            raise RunwireError(
                VALIDATION_ERROR,
                f"need 1 <= dedup_window ({dedup_window}) <= max_history ({max_history})",
            )
        if history_ttl is not None and history_ttl <= 0:
            raise RunwireError(VALIDATION_ERROR, "history_ttl must be positive (or None)")
        if not (0 < socket_timeout <= 3600 and 0 < connect_timeout <= 3600):
            raise RunwireError(
                VALIDATION_ERROR, "socket_timeout and connect_timeout must be positive seconds"
            )
        if not 0 <= linger_ms <= 1000:
            raise RunwireError(VALIDATION_ERROR, f"linger_ms must be 0 to 1000, not {linger_ms}")
        self.url = url
        self.prefix = prefix
        self.max_history = max_history
        self.dedup_window = dedup_window
        self.history_ttl = history_ttl
        self.linger_ms = linger_ms
        self.round_trips = 0
        self.sharded = True  # SPUBLISH/SSUBSCRIBE; set from the server's version at start
        self.maxmemory_policy: str | None = None
        """Redis's ``maxmemory-policy``, read at start (a warning names any but ``noeviction``)."""
        self.where = parts.hostname or "localhost"
        if parts.port:
            self.where += f":{parts.port}"
        redis_url = urlunsplit(parts._replace(query=urlencode(query)))
        try:
            self._pool = ConnectionPool.from_url(
                redis_url,
                protocol=2,
                decode_responses=False,
                socket_timeout=socket_timeout,
                socket_connect_timeout=connect_timeout,
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as exc:
            raise RunwireError(VALIDATION_ERROR, f"store URL {url!r}: {exc}") from None
        reason = unsupported(self.new_connection())
        if reason is not None:
            raise RunwireError(VALIDATION_ERROR, f"store URL {url!r}: {reason}")
        self.socket_timeout = socket_timeout
        """Seconds a round trip (or a connect with its handshake) may take."""
        self._ttl = "0" if history_ttl is None else str(max(1, round(history_ttl * 1000)))
        self._epochs: dict[str, str] = {}
        self._session_keys: dict[str, list[str]] = {}
        # Written with Run records: the status index sets, then the agents' presence.
        self._status_keys = [self._status_key(status) for status in INDEXED]
        self._status_keys.append(self.presence_key)
        self._queue: deque[_Op] = deque()
        self._queued = 0  # commands in the queue
        self._urgent = 0  # urgent calls in the queue
        self._contended: set[str] = set()  # sessions whose last append met another node's
        self._unordered: set[str] = set()  # sessions warned of as missing Runs from ``order``
        self._wake = asyncio.Event()
        self._full: asyncio.Future[None] | None = None  # ends a linger early
        self._conn: AbstractConnection | None = None
        self._wire: Wire | None = None  # the command connection's replies, once connected
        self._writer: asyncio.Task[None] | None = None
        self._listener = Listener(self)
        self._closed = False

    def client(self) -> Any:
        """A ``redis.asyncio.Redis`` on this store's pool, for relay-node coordination."""
        from redis.asyncio import Redis

        return Redis(connection_pool=self._pool)

    def dispatch_stream(self, agent: str) -> str:
        """The stream of an agent's Runs waiting for a worker (``<prefix>agent:<name>:runs``)."""
        return self.key("agent", agent, "runs")

    @property
    def dispatch_streams(self) -> str:
        """A ``SCAN MATCH`` pattern for every agent's dispatch stream (and nothing else)."""
        return glob_escape(self.key("agent", "")) + "*:runs"

    def key(self, *parts: str) -> str:
        """A key under this store's prefix for node coordination (``<prefix>a:b``)."""
        return self.prefix + ":".join(parts)

    @property
    def presence_key(self) -> str:
        """The agents' presence: a sorted set, client id -> deadline (ms, Redis's clock)."""
        return self.prefix + "presence"

    @property
    def scoped_presence_key(self) -> str:
        """The agents' presence in some sessions only: a sorted set, ``scope_member`` ->
        deadline (ms, Redis's clock); each client id's members also in ``scopes_key``."""
        return self.prefix + "scoped"

    def scopes_key(self, client_id: str) -> str:
        """The set of an agent's members of ``scoped_presence_key``."""
        return self.prefix + "scopes:" + client_id

    def owner_key(self, owner: str) -> str:
        """The set of an owner's active Runs (members as in the status index)."""
        return self.prefix + "owns:" + owner

    @property
    def filled(self) -> int:
        """Entries delivered to subscribers from the stream rather than from pub/sub."""
        return self._listener.filled

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect and load the scripts; raises ``RunwireError(STORE_UNAVAILABLE)`` if it can't."""
        if self._writer is not None:
            return
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the Redis store is closed")
        self._conn = self.new_connection()
        self._writer = asyncio.create_task(self._write(), name="runwire-redis-commands")
        try:
            server, memory = await self._call(("INFO", "server"), ("INFO", "memory"))
            version = _info(server, b"redis_version") or "7"
            self.sharded = int(version.split(".")[0]) >= 7
            self.maxmemory_policy = _info(memory, b"maxmemory_policy")
            if self.maxmemory_policy not in (None, "noeviction"):
                log.warning(
                    "Redis at %s may evict keys when it runs short of memory "
                    "(maxmemory-policy %s): a session's serial counter, de-dup window or Run "
                    "records could then go on their own; set maxmemory-policy noeviction, "
                    "under which a full Redis refuses writes instead (STORE_UNAVAILABLE)",
                    self.where,
                    self.maxmemory_policy,
                )
            await self._call(*[("SCRIPT", "LOAD", text) for text in SCRIPTS.values()])
            # Index sets of ended Runs that earlier versions kept (and never read).
            ended = [self._status_key(s) for s in STATUSES if s not in INDEXED]
            await self._call(("UNLINK", *ended))
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
        if self._writer is not None:
            await stop(self._writer)
        self._fail(list(self._queue), RunwireError(STORE_UNAVAILABLE, "the Redis store is closed"))
        self._queue.clear()
        self._queued = 0
        self._urgent = 0
        if self._conn is not None:
            await self._conn.disconnect(nowait=True)
        await self._pool.disconnect()

    async def healthy(self) -> bool:
        """True while started, not closed, and Redis answers a PING (now)."""
        if self._closed or self._writer is None:
            return False
        try:
            async with asyncio.timeout(min(HEALTH_TIMEOUT, self.socket_timeout)):
                await self._call(("PING",))
        except (RunwireError, TimeoutError):
            return False
        return True

    # -- the Store interface ---------------------------------------------------

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel (a new one gets a random epoch, kept in Redis)."""
        keys = self._keys(session_id)
        (reply,) = await self._call(self._eval("open", keys, [secrets.token_hex(8), self._ttl]))
        self._check(reply)
        epoch = reply[0].decode()
        self._epochs[session_id] = epoch
        return ChannelInfo(session_id, epoch, int(reply[2]), int(reply[1]))

    def close_channel(self, session_id: str) -> None:
        """Forget the channel's epoch (``open_channel`` reads it again)."""
        self._epochs.pop(session_id, None)
        self._session_keys.pop(session_id, None)
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
        ``expect_last`` is given and is not the newest serial, or if ``gone`` is
        given and that agent has a presence deadline that covers the session (``rw:presence``,
        or one of its scopes in ``rw:scoped``) and is less than ``gone.grace`` seconds past
        (a node marked it present there: it came back; ``details["present"]`` names it),
        ``RunwireError(EPOCH_MISMATCH)`` if Redis lost the channel since
        ``open_channel``, ``RunwireError(INTERNAL_ERROR)`` if ``open_channel``
        was not called first, ``RunwireError(VALIDATION_ERROR)`` for a Run
        record of another session.
        """
        self._check_open()
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
        args.extend(self._run_args(session_id, runs))
        keys = self._keys(session_id)
        if runs or gone is not None:
            keys = [*keys, *self._status_keys]  # the presence last
        contended = session_id in self._contended
        (reply,) = await self._call(
            self._eval("append", keys, args), linger=not (urgent or contended)
        )
        self._check(reply)
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
            if len(self._contended) >= 10_000:
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
        self._check_open()
        return await self._listener.subscribe(session_id, fn, on_reset, self.socket_timeout)

    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored entry with this id, within the dedup window (``duplicate=True``), or None."""
        keys = self._keys(session_id)
        (reply,) = await self._call(self._eval("find", [keys[2], keys[1]], [entry_id]))
        self._check(reply)
        return None if reply is None else Appended(int(reply[0]), bytes(reply[1]), duplicate=True)

    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (see the contract)."""
        if limit < 1:
            raise RunwireError(VALIDATION_ERROR, f"limit must be at least 1, not {limit}")
        log = self._keys(session_id)[1]
        after, before = read_position(after), read_position(before)
        if before is not None and before <= 1:
            return []
        high = "+" if before is None else f"{before - 1}-0"
        if after is not None:
            low = f"{max(after, 0) + 1}-0"
            command: tuple[Any, ...] = ("XRANGE", log, low, high, "COUNT", limit)
        else:
            command = ("XREVRANGE", log, high, "-", "COUNT", limit)
        (reply,) = await self._call(command)
        self._check(reply)
        entries = [StoredEntry(_serial_of(stream_id), fields[1]) for stream_id, fields in reply]
        return entries if after is not None else entries[::-1]

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written.

        One round trip (the ``order`` list and the ``runs`` hash). Every record of the
        hash is listed, those the list names in its order (each once: a record written
        again after Redis lost the hash is on the list twice) and any it does not (Redis
        lost the list or part of it: evicted, restored in part, deleted) where their
        creation puts them (``seq``, then ``created_ts``, then run id). Then, only then,
        the list is mended (``_mend_order``, one more round trip) and a warning logged,
        once per session on this node.
        """
        keys = self._keys(session_id)
        order, flat = await self._call(("LRANGE", keys[4], 0, -1), ("HGETALL", keys[3]))
        self._check(order)
        self._check(flat)
        records = dict(zip(flat[::2], flat[1::2], strict=True))
        listed = [
            RunRecord.from_dict(loads(records[r])) for r in dict.fromkeys(order) if r in records
        ]
        if len(listed) == len(records):
            return listed
        named = {r.run_id for r in listed}
        missing = [
            RunRecord.from_dict(loads(raw))
            for run_id, raw in records.items()
            if run_id.decode() not in named
        ]
        found = _by_creation(listed, missing)
        mended = await self._mend_order(session_id, len(order), [r.run_id for r in found])
        if session_id not in self._unordered:
            if len(self._unordered) >= 10_000:
                self._unordered.clear()
            self._unordered.add(session_id)
            log.warning(
                "Redis at %s lost the Run order of session %r: %d of its %d Run records were "
                "not in its order list (evicted under a maxmemory-policy other than "
                "noeviction, this Redis has %s; or restored in part, or deleted): listed "
                "where their creation puts them, and the list %s",
                self.where,
                session_id,
                len(missing),
                len(records),
                self.maxmemory_policy or "unknown",
                "mended" if mended else "left to mend at a later read",
            )
        return found

    async def _mend_order(self, session_id: str, read: int, run_ids: list[str]) -> bool:
        """Write a session's ``order`` list anew as ``run_ids``, unless it changed since it
        was read ``read`` long (a Run made meanwhile: a later read mends it). True if it
        did. A failure (Redis refusing writes, or away) is no failure of the read."""
        keys = self._keys(session_id)
        try:
            (reply,) = await self._call(self._eval("mend_order", keys[3:5], [read, *run_ids]))
            self._check(reply)
        except RunwireError as exc:
            log.debug("mending the Run order of session %r failed: %s", session_id, exc)
            return False
        return bool(reply)

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One Run record of a session, or None: one ``HGET``, however many Runs it has."""
        (found,) = await self._call(("HGET", self._keys(session_id)[3], run_id))
        self._check(found)
        return None if found is None else RunRecord.from_dict(loads(found))

    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given).

        ``queued`` to ``suspended`` are read from their index sets; the terminal
        statuses have none (an index of every Run that ever ended would only grow),
        so asking for them scans every session's Runs: the relay never does.
        """
        wanted = [status for status in dict.fromkeys(statuses) if status in STATUSES]
        indexed = [status for status in wanted if status in INDEXED]
        found = await self._indexed_runs(indexed, agent) if indexed else []
        if len(indexed) < len(wanted):
            ended = set(wanted) - set(indexed)
            found += [r for r in await self._all_runs(agent) if r.status in ended]
        return found

    async def _indexed_runs(self, wanted: list[str], agent: str | None) -> list[RunRecord]:
        replies = await self._call(*[("SMEMBERS", self._status_key(s)) for s in wanted])
        sessions: dict[str, list[tuple[str, bytes]]] = {}
        for reply in replies:
            self._check(reply)
            for member in reply:
                session_id, run_id = loads(member)
                sessions.setdefault(session_id, []).append((run_id, member))
        if not sessions:
            return []
        replies = await self._call(
            *[
                ("HMGET", self._keys(session_id)[3], *[run_id for run_id, _ in runs])
                for session_id, runs in sessions.items()
            ]
        )
        found: list[RunRecord] = []
        stale: list[bytes] = []
        for (_, runs), values in zip(sessions.items(), replies, strict=True):
            self._check(values)
            for (_, member), value in zip(runs, values, strict=True):
                if value is None:  # the session expired (history_ttl)
                    stale.append(member)
                    continue
                record = RunRecord.from_dict(loads(value))
                if record.status in wanted and (agent is None or record.agent == agent):
                    found.append(record)
        if stale:
            await self._call(*[("SREM", self._status_key(s), *stale) for s in wanted])
        return found

    async def _all_runs(self, agent: str | None) -> list[RunRecord]:
        """Every Run record of every session under this prefix (``SCAN`` of the runs hashes)."""
        pattern = glob_escape(self.prefix) + "{*}:runs"
        found: list[RunRecord] = []
        cursor = b"0"
        while True:
            (reply,) = await self._call(("SCAN", cursor, "MATCH", pattern, "COUNT", 1000))
            self._check(reply)
            cursor, keys = reply
            if keys:
                for values in await self._call(*[("HVALS", key) for key in keys]):
                    self._check(values)
                    records = [RunRecord.from_dict(loads(v)) for v in values]
                    found += [r for r in records if agent is None or r.agent == agent]
            if cursor == b"0":
                return found

    async def put_runs(self, runs: Sequence[RunRecord]) -> None:
        """Write Run records without an entry (atomically per session)."""
        by_session: dict[str, list[RunRecord]] = {}
        for record in runs:
            by_session.setdefault(record.session_id, []).append(record)
        if not by_session:
            return
        replies = await self._call(
            *[
                self._eval(
                    "put_runs",
                    [*self._keys(session_id), *self._status_keys],
                    [self._ttl, session_id, *self._run_args(session_id, records)],
                )
                for session_id, records in by_session.items()
            ]
        )
        for reply in replies:
            self._check(reply)

    # -- agent presence (relay.cluster's AGENT_LOST sweep) ------------------------

    async def mark_present(
        self,
        client_ids: Sequence[str],
        ttl: float,
        *,
        scoped: Sequence[tuple[str, Sequence[str]]] = (),
    ) -> None:
        """Count the agents ``client_ids`` present in every session, and those of
        ``scoped`` (client id, session-id patterns) present in the sessions their patterns
        match, until ``ttl`` seconds from now. One round trip (a script per 1,000)."""
        ttl_ms = str(max(1, round(ttl * 1000)))
        keys = [self.presence_key, self.scoped_presence_key]
        ids = list(client_ids)
        pairs = [(client_id, self.scope_member(client_id, p)) for client_id, p in scoped]
        commands = []
        for i in range(0, max(len(ids), len(pairs)), 1000):
            chunk = ids[i : i + 1000]
            args: list[Any] = [ttl_ms, str(len(chunk)), *chunk]
            for client_id, member in pairs[i : i + 1000]:
                args += [client_id, member]
            commands.append(self._eval("present", keys, args))
        for reply in await self._call(*commands) if commands else []:
            self._check(reply)

    @staticmethod
    def scope_member(client_id: str, patterns: Sequence[str]) -> bytes:
        """An agent's member of ``scoped_presence_key``: present where ``patterns`` match."""
        return dumps([client_id, sorted(set(patterns))])

    async def gone_owners(
        self, grace: float, *, limit: int = 1000
    ) -> dict[str, list[tuple[str, str]]]:
        """The owners absent for ``grace`` seconds past a presence deadline (everywhere, or
        in some sessions: ``mark_present``), each with the Runs it still owns (session id,
        run id) in sessions where no deadline of it is that recent; of those left owning
        nothing so, what lapsed is forgotten. At most ``limit`` owners, oldest deadline
        first; an owner returned moves behind the others (its lapsed deadlines become
        ``grace`` ago, so it is still gone), so owners whose Runs' ends keep failing do
        not take every pass's places for ever.

        One round trip, whatever the number of active Runs: the work follows the
        agents that left, not the Runs under way.
        """
        return (await self.gone_and_lost(grace, limit=limit)).runs

    async def gone_and_lost(self, grace: float, *, limit: int = 1000) -> GoneOwners:
        """``gone_owners``, and which of the Runs it returns Redis has no record of
        (``GoneOwners.lost``): Redis evicted or lost them while their owner's set still
        names them. Drop those with ``forget_lost`` once the hub had its try at ending
        them (a node that has the session loaded still knows the Run, and its end writes
        the record again). The same one round trip as ``gone_owners``."""
        args = [str(max(0, round(grace * 1000))), self.owner_key(""), self.prefix, str(limit)]
        keys = [self.presence_key, self.scoped_presence_key]
        (reply,) = await self._call(self._eval("gone", keys, args))
        self._check(reply)
        found = GoneOwners({}, [])
        for owner, members, lost in zip(reply[::3], reply[1::3], reply[2::3], strict=True):
            client_id = owner.decode()
            runs = found.runs[client_id] = []
            for member in members:
                session_id, run_id = loads(member)
                runs.append((session_id, run_id))
            for member in lost:
                session_id, run_id = loads(member)
                found.lost.append((client_id, session_id, run_id))
        return found

    async def forget_lost(self, lost: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Drop from their owners' sets the Runs of ``lost`` (owner, session id, run id)
        whose record is still not in Redis (``GoneOwners.lost``): the sweep would return
        them for ever, and keep their owners, since the hub finds no such Run. A Run whose
        record is there (its end was stored meanwhile, or it was never lost) is left alone.
        The ones dropped. One round trip (a script per 500)."""
        commands = []
        for i in range(0, len(lost), 500):
            args: list[Any] = [self.owner_key(""), self.prefix]
            for owner, session_id, run_id in lost[i : i + 500]:
                args += [owner, dumps([session_id, run_id])]
            commands.append(self._eval("forget_lost", [], args))
        dropped: list[tuple[str, str, str]] = []
        for reply in await self._call(*commands) if commands else []:
            self._check(reply)
            for owner, member in zip(reply[::2], reply[1::2], strict=True):
                session_id, run_id = loads(member)
                dropped.append((owner.decode(), session_id, run_id))
        return dropped

    async def absent_from_now(self) -> int:
        """Restart the absence of owners whose deadline has passed: from now, as if they
        had just been marked for the last time. How many there were."""
        keys = [self.presence_key, self.scoped_presence_key]
        (reply,) = await self._call(self._eval("absent_from_now", keys, []))
        self._check(reply)
        return int(reply)

    async def index_owners(self) -> int:
        """Put every active Run in its owner's set if it is not (Runs written by an earlier
        version); how many were added. The append script keeps the sets after that."""
        (members,) = await self._call(("SMEMBERS", self._status_key("active")))
        self._check(members)
        members = list(members)
        added = 0
        for i in range(0, len(members), 500):
            args = [self.owner_key(""), self.prefix, *members[i : i + 500]]
            (reply,) = await self._call(self._eval("own", [self.presence_key], args))
            self._check(reply)
            added += int(reply)
        return added

    async def requeue(
        self, session_id: str, run_id: str, agent: str, entry_id: str, group: str
    ) -> None:
        """Give back a dispatch a node took (``entry_id`` on the agent's stream, read by
        ``group``): the Run gets a new entry at the stream's end if it still waits on
        that one; the old entry is acknowledged and deleted either way."""
        keys = [self._keys(session_id)[0], self.dispatch_stream(agent)]
        (reply,) = await self._call(
            self._eval("requeue", keys, [run_id, entry_id, session_id, group])
        )
        self._check(reply)

    async def ack_dispatch(self, agent: str, group: str, entry_id: str) -> None:
        """Acknowledge (for ``group``) and delete ``entry_id`` on the agent's dispatch stream.

        On the store's one command connection, like every other call: a thousand Runs
        starting at once share its round trips rather than open a connection each.
        """
        stream = self.dispatch_stream(agent)
        for reply in await self._call(
            ("XACK", stream, group, entry_id), ("XDEL", stream, entry_id)
        ):
            self._check(reply)

    # -- keys and arguments ----------------------------------------------------

    def _keys(self, session_id: str) -> list[str]:
        """The session's keys: meta, log, ids, runs, order."""
        keys = self._session_keys.get(session_id)
        if keys is None:
            if len(self._session_keys) >= 10_000:
                self._session_keys.clear()
            base = f"{self.prefix}{{{session_id}}}:"
            keys = [base + name for name in ("meta", "log", "ids", "runs", "order")]
            self._session_keys[session_id] = keys
        return keys

    def _status_key(self, status: str) -> str:
        return f"{self.prefix}status:{status}"

    def live_channel(self, session_id: str) -> bytes:
        """The pub/sub channel a session's entries are published on."""
        return f"{self.prefix}{{{session_id}}}:live".encode()

    def _run_args(self, session_id: str, runs: Sequence[RunRecord]) -> list[Any]:
        args: list[Any] = []
        for record in runs:
            if record.session_id != session_id:
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"Run {record.run_id!r} of {record.session_id!r} written with {session_id!r}",
                )
            args += [
                record.run_id,
                str(STATUSES.index(record.status) + 1),
                dumps(record.to_dict()),
                dumps([session_id, record.run_id]),
                self.dispatch_stream(record.agent),
                record.owner or "",
                self.owner_key(record.owner or ""),
            ]
        return args

    @staticmethod
    def _eval(name: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        return ("EVALSHA", SHA[name], len(keys), *keys, *args)

    # -- for the pub/sub listener ----------------------------------------------

    def new_connection(self) -> AbstractConnection:
        """A new, unconnected connection to this store's Redis, without redis-py's timeouts.

        The store times its round trips itself (one deadline per round trip,
        see ``_round_trip``) and the listener watches its connection for
        silence: redis-py's ``socket_timeout`` would instead wrap every send in
        a task of its own (``asyncio.wait_for``) and every reply read in a
        timer, the larger part of a round trip's cost on the relay.
        """
        kwargs = {**self._pool.connection_kwargs, "socket_timeout": None}
        return self._pool.connection_class(**kwargs)

    async def head(self, session_id: str) -> tuple[str | None, int]:
        """The channel's epoch (None if it does not exist) and newest serial."""
        (reply,) = await self._call(("HMGET", self._keys(session_id)[0], "e", "s"))
        self._check(reply)
        epoch, last = reply
        return (None if epoch is None else epoch.decode()), int(last or 0)

    async def since(
        self, session_id: str, after: int, limit: int
    ) -> tuple[str | None, list[StoredEntry]]:
        """The channel's epoch and up to ``limit`` stored entries after ``after``, read
        together (one script)."""
        keys = self._keys(session_id)
        (reply,) = await self._call(self._eval("since", keys[:2], [after, limit]))
        self._check(reply)
        epoch = None if reply[0] is None else reply[0].decode()
        pairs = reply[1:]
        return epoch, [
            StoredEntry(_serial_of(i), d) for i, d in zip(pairs[::2], pairs[1::2], strict=True)
        ]

    # -- the command line ------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the Redis store is closed")
        if self._writer is None:
            raise RunwireError(STORE_UNAVAILABLE, "the Redis store is not started")

    @staticmethod
    def _check(reply: Any) -> None:
        if isinstance(reply, RunwireError):
            raise reply

    async def _call(self, *commands: tuple[Any, ...], linger: bool = False) -> list[Any]:
        """Queue ``commands`` (in call order, before yielding) and await their replies.

        Unless they may ``linger``, they end a linger at once.

        A reply that is a Redis error comes back as a ``RunwireError`` in its
        place (``_check`` raises it); a broken connection raises
        ``RunwireError(STORE_UNAVAILABLE)``.
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        urgent = not linger
        self._queue.append(_Op(list(commands), future, loop.time(), urgent))
        self._queued += len(commands)
        self._urgent += urgent
        self._wake.set()
        full = self._full
        if full is not None and (urgent or self._queued >= LINGER_FULL) and not full.done():
            full.set_result(None)
        return await future

    async def _write(self) -> None:
        """Send queued commands in order, a pipeline per round trip, forever."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.linger_ms and self._queued < LINGER_FULL and not self._urgent:
                wait = self._queue[0].queued + self.linger_ms / 1000 - loop.time()
                if wait > 0:
                    await self._linger_for(loop, wait)
            batch: list[_Op] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].commands) <= _MAX_BATCH):
                op = self._queue.popleft()
                batch.append(op)
                size += len(op.commands)
                self._urgent -= op.urgent
            self._queued -= size
            try:
                await self._execute(batch)
            except asyncio.CancelledError:
                self._fail(batch, RunwireError(STORE_UNAVAILABLE, "the Redis store is closed"))
                raise

    async def _linger_for(self, loop: asyncio.AbstractEventLoop, wait: float) -> None:
        """Wait ``wait`` seconds, or until ``LINGER_FULL`` commands are queued."""
        full = self._full = loop.create_future()
        timer = loop.call_later(wait, _settle, full)
        try:
            await full
        finally:
            timer.cancel()
            self._full = None

    async def _execute(self, batch: list[_Op]) -> None:
        try:
            replies = await self._round_trip([c for op in batch for c in op.commands])
            if any(isinstance(reply, NoScriptError) for reply in replies):
                # Redis restarted and forgot the scripts: none of them ran, so run them again.
                await self._round_trip([("SCRIPT", "LOAD", text) for text in SCRIPTS.values()])
                again = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
                commands = [c for op in batch for c in op.commands]
                retried = await self._round_trip([commands[i] for i in again])
                for i, reply in zip(again, retried, strict=True):
                    replies[i] = reply
        except (RedisError, OSError) as exc:
            if self._conn is not None:
                await self._conn.disconnect(nowait=True)
            error = RunwireError(STORE_UNAVAILABLE, f"Redis at {self.where}: {exc}")
            self._fail(batch, error)
            if isinstance(exc, _NoReply):
                self._fail_waiting(error)
            return
        at = 0
        for op in batch:
            mine = replies[at : at + len(op.commands)]
            at += len(op.commands)
            if not op.future.done():
                op.future.set_result(
                    [
                        _refused(self.where, reply) if isinstance(reply, RedisError) else reply
                        for reply in mine
                    ]
                )

    def _fail_waiting(self, error: RunwireError) -> None:
        """Redis did not answer a round trip (hung, stopped): the calls that waited behind it
        a third of ``socket_timeout`` or more fail with it, rather than wait a whole timeout
        more on the next one. So no call waits much over ``socket_timeout`` (4/3 of it)."""
        cutoff = asyncio.get_running_loop().time() - self.socket_timeout / 3
        waited = [op for op in self._queue if op.queued <= cutoff]
        if not waited:
            return
        self._queue = deque(op for op in self._queue if op.queued > cutoff)
        for op in waited:
            self._queued -= len(op.commands)
            self._urgent -= op.urgent
        self._fail(waited, error)

    async def _round_trip(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        conn = self._conn
        assert conn is not None
        try:
            async with asyncio.timeout(self.socket_timeout):
                wire = self._wire
                if wire is None or wire.lost.done() or not conn.is_connected:
                    await conn.disconnect(nowait=True)
                    await connect(conn)
                    wire = self._wire = Wire().adopt(conn)
                self.round_trips += 1
                return await wire.request(commands)
        except TimeoutError:
            raise _NoReply(f"no reply within {self.socket_timeout:g} s") from None

    @staticmethod
    def _fail(ops: list[_Op], error: RunwireError) -> None:
        """Fail the calls of ``ops`` still waiting with ``error``."""
        for op in ops:
            if not op.future.done():
                op.future.set_exception(error)


class _NoReply(RedisError):
    """A round trip Redis did not answer within ``socket_timeout``."""
