"""The store interface: durable channels and Run records, one per session.

Every store (memory, SQLite, Redis) implements ``Store`` and passes the same
conformance suite (``tests/relay/store_conformance.py``).

Contract
--------
* ``open_channel(session_id)`` loads (or creates, with a fresh random epoch) a
  channel and returns its ``ChannelInfo``. It must be awaited once before
  ``append`` is called for that session (the relay does so on attach/publish).
* ``append(session_id, entry_id, data, runs)`` assigns the next serial of the
  channel *in call order* (the append's place in line is fixed before the call
  first yields, so two appends to one channel started in order get serials in
  that order),
  writes the entry and the changed Run records atomically, and returns once the
  write is durable. A repeated ``entry_id`` (within the dedup window, at least
  the newest 10,000 ids of the channel) writes nothing and returns the original
  serial and data with ``duplicate=True``.
* ``find(session_id, entry_id)`` returns what ``append`` would return for a
  repeat of that id (``duplicate=True``), or None; the relay asks it before it
  checks an entry against the Run rules, so a retried prompt is acknowledged
  again rather than refused as a second Run.
* ``data`` is the encoded entry without its serial; what the store returns and
  reads back is the entry with its serial spliced in (``codec.splice_serial``).
* ``read(session_id, after=, before=, limit=)`` returns stored entries in
  ascending serial order: ``after`` gives the oldest ``limit`` entries newer than
  it; ``before`` (or neither) gives the newest ``limit`` entries older than it.
* Run records are written only through ``append`` (atomically with their entry)
  or ``put_runs`` (the relay's own bookkeeping), and read with ``runs()`` and
  ``runs_with_status()``.
* A store that cannot write raises ``RunwireError(STORE_UNAVAILABLE)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from transport.runs import RunRecord

__all__ = ["Appended", "ChannelInfo", "Store", "StoredEntry"]


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


class Store(ABC):
    """Durable channels and Run records (see the module docstring for the contract)."""

    url: str = ""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections and files."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Flush and release everything."""

    @abstractmethod
    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel."""

    @abstractmethod
    async def append(
        self,
        session_id: str,
        entry_id: str,
        data: bytes,
        runs: Sequence[RunRecord] = (),
    ) -> Appended:
        """Sequence, store and (with ``runs``) update Run records atomically."""

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

    @abstractmethod
    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given)."""

    @abstractmethod
    async def put_runs(self, runs: Sequence[RunRecord]) -> None:
        """Write Run records without an entry."""

    async def healthy(self) -> bool:
        """True while the store can take writes."""
        return True
