"""The command connection of ``RedisStore``: calls queued in order, sent as pipelines.

Every call queues its commands before it first yields. One task sends what is
queued as one pipeline, a round trip counted in ``round_trips``, and gives each
caller its replies. So calls are sequenced in call order, and a hundred
concurrent appends cost a few round trips, not a hundred.

A small batch may *linger* for ``linger_ms`` so that calls of several sessions
share a round trip; an urgent call ends a linger at once. A Redis or socket
error fails the calls of that round trip with ``STORE_UNAVAILABLE``, and the
next call connects again. In Cluster mode a command refused with ``MOVED`` and
the like is sent again to the slot's master, looked up anew.

See docs/explanation/stores.md for the linger, the timeouts and the failures.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import (
    BusyLoadingError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
)

from transport.errors import STORE_UNAVAILABLE, RunwireError

from ._redis_cluster import RETRYABLE, ClusterMap
from ._redis_live import connect, stop
from ._redis_lua import SCRIPTS
from ._redis_wire import Wire

__all__ = [
    "CONNECT_TIMEOUT",
    "LINGER_FULL",
    "LINGER_MS",
    "SOCKET_TIMEOUT",
    "Pipeline",
    "check",
]

_MAX_BATCH = 1000
"""Commands sent in one round trip at most."""
LINGER_MS = 2.0
"""Default ``linger_ms``: how long a small batch waits for company before it is sent."""
LINGER_FULL = 32
"""Queued commands that end the linger at once (a batch worth sending as it is)."""
SOCKET_TIMEOUT = 1.5
"""The default bound of one round trip (seconds): a Redis that does not answer in it is
unavailable (a publish fails ``STORE_UNAVAILABLE`` and the SDK retries)."""
CONNECT_TIMEOUT = 1.0
"""The default bound of a TCP connect to Redis (seconds)."""


def check(reply: Any) -> None:
    """Raise a reply that is an error (``Pipeline.call`` puts a ``RunwireError`` in its place)."""
    if isinstance(reply, RunwireError):
        raise reply


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


class Pipeline:
    """One command connection to Redis, shared by every call of a store, in call order.

    ``start()`` starts the task that sends; ``call()`` raises
    ``RunwireError(STORE_UNAVAILABLE)`` before it and after ``aclose()``.
    ``linger_ms`` may be changed at any time; it applies from the next batch.
    """

    def __init__(
        self,
        new_connection: Callable[[], AbstractConnection],
        *,
        where: str,
        socket_timeout: float,
        linger_ms: float,
        cluster: ClusterMap | None = None,
    ) -> None:
        self.where = where
        """Redis's address, for messages."""
        self.socket_timeout = socket_timeout
        """Seconds a round trip (or a connect with its handshake) may take."""
        self.linger_ms = linger_ms
        self.round_trips = 0
        """Pipelines sent so far."""
        self.wire: Wire | None = None
        """The connection's replies, once connected."""
        self._new_connection = new_connection
        self._map = cluster
        self._queue: deque[_Op] = deque()
        self._queued = 0  # commands in the queue
        self._urgent = 0  # urgent calls in the queue
        self._wake = asyncio.Event()
        self._full: asyncio.Future[None] | None = None  # ends a linger early
        self._conn: AbstractConnection | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def running(self) -> bool:
        """Started and not closed."""
        return self._writer is not None and not self._closed

    @property
    def closed(self) -> bool:
        """``aclose()`` was called."""
        return self._closed

    def start(self) -> None:
        """Start sending (connecting at the first round trip)."""
        if self._writer is None and not self._closed:
            self._conn = self._new_connection()
            self._writer = asyncio.create_task(self._write(), name="runwire-redis-commands")

    def check_open(self) -> None:
        """Raise ``RunwireError(STORE_UNAVAILABLE)`` unless started and not closed."""
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the Redis store is closed")
        if self._writer is None:
            raise RunwireError(STORE_UNAVAILABLE, "the Redis store is not started")

    async def aclose(self) -> None:
        """Fail queued calls, stop sending and disconnect. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            await stop(self._writer)
        self._fail(list(self._queue), RunwireError(STORE_UNAVAILABLE, "the Redis store is closed"))
        self._queue.clear()
        self._queued = 0
        self._urgent = 0
        if self._conn is not None:
            await self._conn.disconnect(nowait=True)

    async def call(self, *commands: tuple[Any, ...], linger: bool = False) -> list[Any]:
        """Queue ``commands`` (in call order, before yielding) and await their replies.

        Unless they may ``linger``, they end a linger at once.

        A reply that is a Redis error comes back as a ``RunwireError`` in its
        place (``check`` raises it); a broken connection raises
        ``RunwireError(STORE_UNAVAILABLE)``.
        """
        self.check_open()
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
            if self._map is not None:
                await self._follow(batch, replies)
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

    async def _follow(self, batch: list[_Op], replies: list[Any]) -> None:
        """Cluster mode: send again the commands Redis did not run because the slot moved
        or had no master (``RETRYABLE``), to the slot's master as looked up anew. It tries
        a few times over about four seconds; a failover with a short node timeout takes
        two or three."""
        commands = [c for op in batch for c in op.commands]
        for attempt in range(8):
            again = [i for i, reply in enumerate(replies) if isinstance(reply, RETRYABLE)]
            if not again:
                return
            if self._conn is not None:
                await self._conn.disconnect(nowait=True)
            if attempt:
                await asyncio.sleep(0.05 * 2 ** min(attempt, 4))
            retried = await self._round_trip([commands[i] for i in again])
            for i, reply in zip(again, retried, strict=True):
                replies[i] = reply

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
                wire = self.wire
                if wire is None or wire.lost.done() or not conn.is_connected:
                    await conn.disconnect(nowait=True)
                    if self._map is not None:
                        await self._map.locate(self.socket_timeout)
                        conn = self._conn = self._new_connection()
                    await connect(conn)
                    wire = self.wire = Wire().adopt(conn)
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
