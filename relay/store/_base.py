"""The store interface: durable channels and Run records, one per session.

Every store (memory, SQLite, Redis) implements ``Store`` and passes the same
conformance suite, ``tests/relay/store_conformance.py``. In short:

* ``open_channel`` loads or creates a channel; it comes before ``append``.
* ``append`` gives the next serial in call order and writes the entry with its
  changed Run records atomically. A repeated entry id writes nothing and returns
  the original with ``duplicate=True``.
* ``expect_last`` and ``gone`` make an append conditional: it raises ``CONFLICT``
  when the channel moved on, or when the agent it ends a Run for came back.
* ``read``, ``find``, ``head`` and ``since`` read entries; ``runs``, ``run`` and
  ``runs_with_status`` read Run records.
* ``subscribe`` delivers every entry appended from then on, in serial order, at
  most once each; ``on_reset`` says the channel's history was lost.
* A store that cannot write raises ``STORE_UNAVAILABLE``; a store that lost a
  channel raises ``EPOCH_MISMATCH`` from ``append``.

Each method's docstring gives its part of the contract in full. See
docs/explanation/stores.md for how each store meets it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transport._runs import RunRecord

__all__ = [
    "SERIAL_LIMIT",
    "Appended",
    "ChannelInfo",
    "Gone",
    "OnEntry",
    "OnReset",
    "Store",
    "StoredEntry",
    "Subscribers",
    "Unsubscribe",
    "read_position",
]

log = logging.getLogger("runwire.relay.store")

SERIAL_LIMIT = 2**53
"""Beyond every serial a store holds (and JavaScript's safe integers): where ``read``
positions are cut off, so SQLite (64-bit integers) and Redis (stream ids) can take them."""


def read_position(position: int | None) -> int | None:
    """A ``read`` position (``after`` / ``before``) cut off at ``SERIAL_LIMIT``: the
    same entries, in a number every store can take."""
    return None if position is None else min(position, SERIAL_LIMIT)


@dataclass(frozen=True)
class ChannelInfo:
    """A channel's epoch and serial range (``first`` is 0 and ``last`` 0 when empty)."""

    session_id: str
    epoch: str
    first: int
    last: int


@dataclass(frozen=True)
class StoredEntry:
    """One stored entry: its serial and its encoded JSON (serial included)."""

    serial: int
    data: bytes


@dataclass(frozen=True)
class Appended:
    """The result of ``append``."""

    serial: int
    data: bytes
    duplicate: bool = False


@dataclass(frozen=True)
class Gone:
    """What an append that ends a Run for its agent's absence requires (``append``'s
    ``gone``): the agent ``client_id`` still absent from the session ``grace`` seconds
    past its presence deadline there, as the AGENT_LOST sweep found it, when the append's
    turn comes."""

    client_id: str
    grace: float


OnEntry = Callable[[StoredEntry], None]
"""A subscriber: called on the event loop with each new entry of its channel."""
OnReset = Callable[[], None]
"""Called when a subscription ends because the channel's history was lost."""
Unsubscribe = Callable[[], None]
"""Ends a subscription (idempotent, synchronous)."""


class Store(ABC):
    """Durable channels and Run records; the contract is in docs/explanation/stores.md."""

    url: str = ""
    loses_channels: bool = False
    """True if the backend can forget a channel under a relay node that has it loaded (Redis
    without persistence, or with ``history_ttl``): the node then asks ``head`` where its
    loaded channel could mislead it."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections and files."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Flush and release everything."""

    async def claim(self) -> None:  # noqa: B027 - optional hook
        """Be this relay's alone, where only one relay may use the backend at a time (see
        the contract); raises ``RunwireError(STORE_UNAVAILABLE)`` if another has it."""

    @abstractmethod
    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel."""

    def close_channel(self, session_id: str) -> None:  # noqa: B027 - optional hook
        """The relay put the channel down: forget what is kept in memory for it.

        ``open_channel`` again before the next ``append`` to it. A relay node
        calls this when no one there watches the session any more, so a store's
        memory follows the sessions in use, not every session since it started.
        """

    @abstractmethod
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
        """Sequence, store and (with ``runs``) update Run records atomically.

        Raises ``RunwireError(CONFLICT)`` when ``expect_last`` is given and is
        not the channel's newest serial (see the contract). ``urgent`` says
        someone waits on this entry (a user's message, a cancel): a store that
        holds small batches back for company sends it at once. ``gone``: only if
        that agent is still absent (see the contract).
        """

    @abstractmethod
    async def subscribe(
        self, session_id: str, fn: OnEntry, *, on_reset: OnReset | None = None
    ) -> Unsubscribe:
        """Call ``fn`` with every entry appended to the channel from now on (see the contract)."""

    @abstractmethod
    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored (or being stored) entry with this id, within the dedup window."""

    @abstractmethod
    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (see the contract)."""

    @abstractmethod
    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session."""

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One Run record of a session, or None (stores that can should not read them all)."""
        return next((r for r in await self.runs(session_id) if r.run_id == run_id), None)

    @abstractmethod
    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given)."""

    async def head(self, session_id: str) -> tuple[str | None, int]:
        """The channel's epoch (None if there is none) and newest serial, as stored now.

        Never opens or creates the channel in a store whose backend can forget one:
        ``open_channel`` there also decides which epoch ``append`` expects. The
        default asks ``open_channel``, which is the same in a store that never
        forgets a channel it holds (memory, SQLite).
        """
        info = await self.open_channel(session_id)
        return info.epoch, info.last

    async def since(
        self, session_id: str, after: int, limit: int
    ) -> tuple[str | None, list[StoredEntry]]:
        """The channel's epoch (None if there is none) and up to ``limit`` stored entries
        after ``after``, of that epoch.

        A relay node reads so what it takes into a channel it has loaded, where the store
        may have lost the channel's history and made the session anew (``loses_channels``).
        The default reads the entries, then ``head``: an epoch, once lost, never comes
        back, so entries read before ``head`` showed an epoch are of that epoch. A store
        that can read both at once (Redis, in one script) does.
        """
        entries = await self.read(session_id, after=after, limit=limit)
        epoch, _ = await self.head(session_id)
        return epoch, entries

    async def healthy(self) -> bool:
        """True while the store can take writes."""
        return True


class Subscribers:
    """Live fan-out for a store that sees every append itself (memory, SQLite).

    ``add`` registers a subscriber; ``publish`` calls the channel's subscribers
    in the order they subscribed, logging (and swallowing) their exceptions.
    A loaded channel has one subscription here, so each is small: a slotted
    object in a list per channel (an unsubscribed one is removed from it).
    """

    def __init__(self) -> None:
        self._channels: dict[str, list[_Subscription]] = {}

    def add(self, session_id: str, fn: OnEntry) -> Unsubscribe:
        """Subscribe ``fn`` to a channel; returns the idempotent ``unsubscribe``."""
        sub = _Subscription(self._channels, session_id, fn)
        self._channels.setdefault(session_id, []).append(sub)
        return sub

    def publish(self, session_id: str, entry: StoredEntry) -> None:
        """Hand ``entry`` to every subscriber of its channel."""
        subs = self._channels.get(session_id)
        if not subs:
            return
        for sub in tuple(subs):
            fn = sub.fn
            if fn is None:
                continue  # unsubscribed by an earlier subscriber just now
            try:
                fn(entry)
            except Exception:
                log.exception("a subscriber of %r failed on serial %d", session_id, entry.serial)

    def clear(self) -> None:
        """Drop every subscription."""
        self._channels.clear()


class _Subscription:
    """One ``Subscribers.add``: calling it unsubscribes (idempotent)."""

    __slots__ = ("_channels", "fn", "session_id")

    def __init__(
        self, channels: dict[str, list[_Subscription]], session_id: str, fn: OnEntry
    ) -> None:
        self._channels = channels
        self.session_id = session_id
        self.fn: OnEntry | None = fn

    def __call__(self) -> None:
        if self.fn is None:
            return
        self.fn = None
        subs = self._channels.get(self.session_id)
        if subs is not None and self in subs:
            subs.remove(self)
            if not subs:
                del self._channels[self.session_id]
