"""Live fan-out for ``RedisStore``: one pub/sub connection per store, gap-free delivery.

The append script publishes ``<epoch> <entry>`` on the session's channel. A node
subscribes a channel on Redis only while some local ``subscribe`` wants it, over
one connection owned by two tasks. The *reader* connects, again and again with
backoff while Redis is away, and passes every reply to the deliverer as it is
read. A *watchdog* sends a ping after ``IDLE_PING`` seconds of silence and drops
the connection after three. The *deliverer* is the only task that sends on the
connection and the only one that delivers, one item at a time.

Each subscription keeps the serial it delivered last. A message with the next
serial is delivered at once and an older one is dropped. A newer one means
pub/sub lost something, since it is at-most-once: the missing entries are read
from the stream first. After a reconnect every channel is subscribed again and
filled from the stream in the same way. Entries trimmed from the stream before
they could be read end the subscription with ``on_reset``, as does a message of
another epoch: Redis lost the channel.

When this node's own append returns, its entry goes straight to the local
subscriptions just before it, without waiting for the pub/sub echo.

See docs/explanation/stores.md for how the stores work.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from transport.errors import STORE_UNAVAILABLE, RunwireError

from ._base import OnEntry, OnReset, StoredEntry, Unsubscribe
from ._redis_wire import Wire, pack

__all__ = ["Listener", "Source", "connect", "stop"]

log = logging.getLogger("runwire.relay.store")

_SERIAL = re.compile(rb'\{"serial":(\d+)')
_PAGE = 1000
"""Entries read from the stream per round trip while filling a gap."""
IDLE_PING = 5.0
"""Seconds of silence after which the watchdog has a ping sent; after three it reconnects."""
_RETRY_FILL = 0.5
"""Seconds before a fill that failed (Redis briefly away) is tried again."""


async def connect(conn: AbstractConnection) -> None:
    """Connect ``conn`` (redis-py leaves ``connect`` unannotated)."""
    await cast(Any, conn).connect()


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end.

    Cancels again until it does: on Python 3.11 ``asyncio.wait_for`` (which
    redis-py wraps around every send) swallows a cancellation that arrives as
    its inner call finishes.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.1)
    if not task.cancelled() and task.exception() is not None:
        log.error("%s ended with an error", task.get_name(), exc_info=task.exception())


class Source(Protocol):
    """What a ``Listener`` needs of its store (``RedisStore`` has it)."""

    @property
    def where(self) -> str:
        """Redis's address, for messages."""

    @property
    def socket_timeout(self) -> float:
        """Seconds a connect with its handshake may take."""

    @property
    def sharded(self) -> bool:
        """True to subscribe with ``SSUBSCRIBE`` (Redis 7 and later)."""

    def live_channel(self, session_id: str) -> bytes:
        """The pub/sub channel of a session."""

    def new_connection(self) -> AbstractConnection:
        """A new, unconnected connection to Redis."""

    async def locate(self) -> None:
        """In Cluster mode, look up the master to connect to."""

    async def head(self, session_id: str) -> tuple[str | None, int]:
        """The channel's epoch and newest serial."""

    async def since(
        self, session_id: str, after: int, limit: int
    ) -> tuple[str | None, list[StoredEntry]]:
        """The channel's epoch and up to ``limit`` stored entries after ``after``."""


@dataclass(eq=False)
class _Sub:
    fn: OnEntry
    on_reset: OnReset | None
    epoch: str | None = None
    last: int | None = None  # None until started: nothing is delivered before
    active: bool = True


@dataclass(eq=False)
class _Channel:
    session_id: str
    name: bytes
    subs: list[_Sub] = field(default_factory=list)
    confirmed: asyncio.Event = field(default_factory=asyncio.Event)


class Listener:
    """The pub/sub side of one ``RedisStore`` (see the module docstring)."""

    def __init__(self, store: Source) -> None:
        self._store = store
        self._channels: dict[str, _Channel] = {}
        self._by_name: dict[bytes, _Channel] = {}
        self._inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._conn: Wire | None = None  # the connection the deliverer was told of
        self._states: dict[bytes, str] = {}  # "subscribing" | "subscribed" | "unsubscribing"
        self._tasks: list[asyncio.Task[None]] = []
        self._handling = False  # the deliverer is at an item
        self._heard = 0  # replies read on the pub/sub connection, for the watchdog
        self._closing = False
        self.filled = 0
        """Entries delivered from the stream rather than from pub/sub."""

    def start(self) -> None:
        """Start the reader and deliverer tasks."""
        self._tasks = [
            asyncio.create_task(self._read(), name="runwire-redis-pubsub-reader"),
            asyncio.create_task(self._deliver(), name="runwire-redis-pubsub-deliverer"),
        ]

    async def aclose(self) -> None:
        """Stop both tasks, drop every subscription and close the connection."""
        self._closing = True
        for task in self._tasks:
            await stop(task)
        self._tasks = []
        for channel in self._channels.values():
            for sub in channel.subs:
                sub.active = False
        self._channels.clear()
        self._by_name.clear()

    # -- the store's side --------------------------------------------------------

    async def subscribe(
        self, session_id: str, fn: OnEntry, on_reset: OnReset | None, timeout: float
    ) -> Unsubscribe:
        """Subscribe ``fn``; returns once Redis confirmed the channel and its head is known."""
        channel = self._channels.get(session_id)
        if channel is None:
            name = self._store.live_channel(session_id)
            channel = self._channels[session_id] = self._by_name[name] = _Channel(session_id, name)
            self._inbox.put_nowait(("reconcile",))
        sub = _Sub(fn, on_reset)
        channel.subs.append(sub)
        try:
            try:
                async with asyncio.timeout(timeout):
                    await channel.confirmed.wait()
            except TimeoutError:
                raise RunwireError(
                    STORE_UNAVAILABLE, f"Redis at {self._store.where}: pub/sub is not connected"
                ) from None
            epoch, last = await self._store.head(session_id)
        except BaseException:
            self._drop(channel, sub)
            raise
        self._inbox.put_nowait(("start", channel, sub, epoch, last))
        return lambda: self._drop(channel, sub)

    def offer(self, session_id: str, epoch: str, serial: int, data: bytes) -> None:
        """Deliver this node's own append to local subscriptions that are just before it."""
        channel = self._channels.get(session_id)
        if channel is None:
            return
        for sub in list(channel.subs):
            if not sub.active or sub.last is None or serial != sub.last + 1:
                continue
            if sub.epoch is None and sub.last == 0:
                sub.epoch = epoch
            if sub.epoch == epoch:
                self._call(channel, sub, serial, data)

    # -- reader ----------------------------------------------------------------

    async def _read(self) -> None:
        delay = 0.05
        while not self._closing:
            conn = self._store.new_connection()
            wire: Wire | None = None
            watchdog: asyncio.Task[None] | None = None
            try:
                try:
                    async with asyncio.timeout(self._store.socket_timeout):
                        await self._store.locate()  # Cluster mode: the slot's master now
                        conn = self._store.new_connection()
                        await connect(conn)
                except TimeoutError:
                    raise RedisError("no reply while connecting") from None
                wire = Wire(self._on_read).adopt(conn)
                self._inbox.put_nowait(("connected", wire))
                delay = 0.05
                watchdog = asyncio.create_task(self._watch(wire), name="runwire-redis-pubsub-watch")
                await wire.lost
                if not self._closing:
                    log.warning("Redis pub/sub at %s: the connection ended", self._store.where)
            except (RedisError, OSError) as exc:
                log.warning("Redis pub/sub at %s: %s", self._store.where, exc)
            finally:
                if watchdog is not None:
                    watchdog.cancel()
                if wire is not None:
                    self._inbox.put_nowait(("disconnected", wire))
                await conn.disconnect(nowait=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _on_read(self, wire: Wire, reply: Any) -> None:
        """A reply read on ``wire``: a message delivered at once while the deliverer is idle
        (the fast path), anything else queued for the deliverer."""
        self._heard += 1
        if (
            not self._handling
            and wire is self._conn
            and self._inbox.empty()
            and isinstance(reply, list)
            and len(reply) >= 3
            and reply[0] in (b"message", b"smessage")
        ):
            channel = self._by_name.get(reply[1])
            if channel is not None and self._take(channel, reply[2]):
                self._inbox.put_nowait(("fill", channel))
        else:
            self._inbox.put_nowait(("reply", wire, reply))

    async def _watch(self, wire: Wire) -> None:
        """Ping ``wire`` after ``IDLE_PING`` seconds of silence; drop it after three such.

        Reads wait without a timer of their own (a timer per message was a
        large part of a message's cost), so silence is found here instead.
        """
        silent, heard = 0, self._heard
        while True:
            await asyncio.sleep(IDLE_PING)
            if self._heard != heard:
                silent, heard = 0, self._heard
                continue
            silent += 1
            if silent >= 3:
                log.warning("Redis pub/sub at %s: no reply to PING", self._store.where)
                wire.close()  # the reader sees the connection end: it connects again
                return
            self._inbox.put_nowait(("ping", wire))

    # -- deliverer -------------------------------------------------------------

    async def _deliver(self) -> None:
        while True:
            item = await self._inbox.get()
            self._handling = True
            try:
                await self._handle(item)
            except Exception:
                log.exception("Redis pub/sub at %s: failed on %r", self._store.where, item[0])
            finally:
                self._handling = False

    async def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "reply":
            if item[1] is self._conn:
                await self._on_reply(item[2])
        elif kind == "start":
            _, channel, sub, epoch, last = item
            if sub.active:
                sub.epoch, sub.last = epoch, last
                await self._fill(channel, [sub])
        elif kind == "fill":
            wanted: _Channel = item[1]
            if self._channels.get(wanted.session_id) is wanted:
                await self._fill(wanted, wanted.subs)
        elif kind == "reconcile":
            self._reconcile()
        elif kind == "connected":
            self._conn, self._states = item[1], {}
            self._reconcile()
        elif kind == "disconnected":
            if item[1] is self._conn:
                self._conn, self._states = None, {}
                for each in self._channels.values():
                    each.confirmed.clear()
        elif kind == "ping" and item[1] is self._conn:
            self._send("PING")

    async def _on_reply(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return  # PONG and the like
        kind, name = reply[0], reply[1]
        if kind in (b"message", b"smessage"):
            channel = self._by_name.get(name)
            if channel is not None:
                await self._on_message(channel, reply[2])
        elif kind in (b"subscribe", b"ssubscribe"):
            self._states[name] = "subscribed"
            channel = self._by_name.get(name)
            if channel is None:
                self._reconcile()
            else:
                channel.confirmed.set()
                await self._fill(channel, channel.subs)  # whatever the outage missed
        elif kind in (b"unsubscribe", b"sunsubscribe"):
            self._states.pop(name, None)
            if name in self._by_name:
                self._reconcile()

    def _reconcile(self) -> None:
        """Subscribe what local subscribers want and unsubscribe the rest."""
        if self._conn is None:
            return
        sharded = self._store.sharded
        add: list[bytes] = []
        for name, channel in self._by_name.items():
            state = self._states.get(name)
            if state is None:
                add.append(name)
                self._states[name] = "subscribing"
            elif state == "subscribed":
                channel.confirmed.set()  # re-subscribed locally before it was dropped
        drop = [n for n, state in self._states.items() if state == "subscribed"]
        drop = [name for name in drop if name not in self._by_name]
        for name in drop:
            self._states[name] = "unsubscribing"
        if add:
            self._send("SSUBSCRIBE" if sharded else "SUBSCRIBE", *add)
        if drop:
            self._send("SUNSUBSCRIBE" if sharded else "UNSUBSCRIBE", *drop)

    def _send(self, *command: bytes | str) -> None:
        if self._conn is not None:
            self._conn.write(pack([command]))  # a broken connection: the reader connects again

    async def _on_message(self, channel: _Channel, payload: bytes) -> None:
        behind = self._take(channel, payload)
        if behind:
            await self._fill(channel, behind)

    def _take(self, channel: _Channel, payload: bytes) -> list[_Sub]:
        """Deliver a message to the subscriptions it is next for; returns those behind it."""
        raw_epoch, _, data = payload.partition(b" ")
        match = _SERIAL.match(data)
        if match is None:
            log.warning("Redis pub/sub: a message on %r without a serial", channel.name)
            return []
        epoch, serial = raw_epoch.decode(), int(match[1])
        behind: list[_Sub] = []
        for sub in list(channel.subs):
            if not sub.active or sub.last is None:
                continue
            if sub.epoch is None and sub.last == 0:
                sub.epoch = epoch  # subscribed before the channel existed
            if sub.epoch != epoch:
                self._reset(channel, sub)
            elif serial == sub.last + 1:
                self._call(channel, sub, serial, data)
            elif serial > sub.last + 1:
                behind.append(sub)
        return behind

    async def _fill(self, channel: _Channel, subs: list[_Sub]) -> None:
        """Deliver to ``subs`` every stored entry after their ``last``."""
        while True:
            subs = [sub for sub in subs if sub.active and sub.last is not None]
            if not subs:
                return
            after = min(sub.last for sub in subs if sub.last is not None)
            try:
                epoch, entries = await self._store.since(channel.session_id, after, _PAGE)
            except RunwireError as exc:
                log.warning("Redis at %s: cannot fill %r: %s", self._store.where, channel.name, exc)
                asyncio.get_running_loop().call_later(
                    _RETRY_FILL, self._inbox.put_nowait, ("fill", channel)
                )
                return
            for sub in subs:
                if sub.epoch is None and sub.last == 0 and epoch is not None:
                    sub.epoch = epoch
                if sub.epoch != epoch:
                    self._reset(channel, sub)
            for stored in entries:
                serial = stored.serial
                for sub in subs:
                    if not sub.active or sub.last is None or serial <= sub.last:
                        continue
                    if serial != sub.last + 1:
                        log.warning(
                            "Redis: entries %d-%d of %r were trimmed before they could be "
                            "delivered",
                            sub.last + 1,
                            serial - 1,
                            channel.session_id,
                        )
                        self._reset(channel, sub)  # a gap it cannot fill: rebuild, not skip
                        continue
                    self.filled += 1
                    self._call(channel, sub, serial, stored.data)
            if len(entries) < _PAGE:
                return

    def _call(self, channel: _Channel, sub: _Sub, serial: int, data: bytes) -> None:
        sub.last = serial
        try:
            sub.fn(StoredEntry(serial, data))
        except Exception:
            log.exception("a subscriber of %r failed on serial %d", channel.session_id, serial)

    def _reset(self, channel: _Channel, sub: _Sub) -> None:
        log.warning("Redis lost the history of %r: ending its subscription", channel.session_id)
        self._drop(channel, sub)
        if sub.on_reset is not None:
            try:
                sub.on_reset()
            except Exception:
                log.exception("on_reset of a subscriber of %r failed", channel.session_id)

    def _drop(self, channel: _Channel, sub: _Sub) -> None:
        if not sub.active:
            return
        sub.active = False
        channel.subs.remove(sub)
        if not channel.subs and self._channels.get(channel.session_id) is channel:
            del self._channels[channel.session_id]
            del self._by_name[channel.name]
            self._inbox.put_nowait(("reconcile",))
