"""``memory://``: channels and Run records in this process's memory.

For tests and throwaway relays: nothing survives the process, and every
channel keeps all its entries and ids (so its dedup window is its whole
history). Each call runs to completion without yielding before it returns, so
serials follow call order trivially. ``append`` passes the new entry to the
channel's subscribers, then yields once, like a store that waits for a disk,
so callers are exercised the same way.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from anyio.lowlevel import checkpoint

from transport._codec import splice_serial
from transport._runs import RunRecord
from transport.errors import (
    CONFLICT,
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
    Subscribers,
    Unsubscribe,
)

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Channel:
    epoch: str
    entries: list[bytes] = field(default_factory=list)  # entries[serial - 1]
    ids: dict[str, int] = field(default_factory=dict)  # entry id -> serial


class MemoryStore(Store):
    """A ``Store`` in memory (``memory://``); see ``relay.store._base`` for the contract."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._channels: dict[str, _Channel] = {}
        self._runs: dict[str, dict[str, RunRecord]] = {}
        self._subscribers = Subscribers()
        self._closed = False

    async def aclose(self) -> None:
        """Drop everything; later calls raise ``RunwireError(STORE_UNAVAILABLE)``."""
        self._closed = True
        self._channels.clear()
        self._runs.clear()
        self._subscribers.clear()

    async def healthy(self) -> bool:
        """True until ``aclose()``."""
        return not self._closed

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel (a new one gets a random epoch)."""
        self._check_open()
        channel = self._channels.get(session_id)
        if channel is None:
            channel = self._channels[session_id] = _Channel(epoch=secrets.token_hex(8))
        last = len(channel.entries)
        return ChannelInfo(session_id, channel.epoch, 1 if last else 0, last)

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

        Raises ``RunwireError(CONFLICT)`` if ``expect_last`` is given and is not
        the newest serial, ``RunwireError(INTERNAL_ERROR)`` if ``open_channel``
        was not called first. ``gone`` is not looked at: one relay uses this store,
        and it knows its agents' connections.
        """
        self._check_open()
        channel = self._channels.get(session_id)
        if channel is None:
            raise RunwireError(INTERNAL_ERROR, f"append to {session_id!r} before open_channel")
        serial = channel.ids.get(entry_id)
        if serial is not None:
            result = Appended(serial, channel.entries[serial - 1], duplicate=True)
        else:
            last = len(channel.entries)
            if expect_last is not None and expect_last != last:
                await checkpoint()
                raise RunwireError(
                    CONFLICT,
                    f"{session_id!r} is at serial {last}, not {expect_last}",
                    details={"last": last},
                )
            serial = last + 1
            stored = splice_serial(data, serial)
            channel.entries.append(stored)
            channel.ids[entry_id] = serial
            self._put(runs)
            result = Appended(serial, stored)
            self._subscribers.publish(session_id, StoredEntry(serial, stored))
        await checkpoint()
        return result

    async def subscribe(
        self, session_id: str, fn: OnEntry, *, on_reset: OnReset | None = None
    ) -> Unsubscribe:
        """Call ``fn`` with every entry appended to the channel through this store from now on.

        ``on_reset`` is never called: memory forgets nothing while open.
        """
        self._check_open()
        return self._subscribers.add(session_id, fn)

    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored entry with this id (``duplicate=True``), or None."""
        self._check_open()
        channel = self._channels.get(session_id)
        serial = channel.ids.get(entry_id) if channel is not None else None
        if channel is None or serial is None:
            return None
        return Appended(serial, channel.entries[serial - 1], duplicate=True)

    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (see the contract)."""
        self._check_open()
        if limit < 1:
            raise RunwireError(VALIDATION_ERROR, f"limit must be at least 1, not {limit}")
        channel = self._channels.get(session_id)
        entries = channel.entries if channel is not None else []
        # Serial s lives at index s - 1, so (after, before) is the slice [after, before - 1).
        lo = 0 if after is None else min(max(after, 0), len(entries))
        hi = len(entries) if before is None else min(max(before - 1, 0), len(entries))
        if hi <= lo:
            return []
        if after is not None:
            hi = min(hi, lo + limit)
        else:
            lo = max(lo, hi - limit)
        return [StoredEntry(lo + i + 1, data) for i, data in enumerate(entries[lo:hi])]

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written."""
        self._check_open()
        return list(self._runs.get(session_id, {}).values())

    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given)."""
        self._check_open()
        wanted = set(statuses)
        return [
            record
            for records in self._runs.values()
            for record in records.values()
            if record.status in wanted and (agent is None or record.agent == agent)
        ]

    def _put(self, runs: Sequence[RunRecord]) -> None:
        for record in runs:
            self._runs.setdefault(record.session_id, {})[record.run_id] = record

    def _check_open(self) -> None:
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the memory store is closed")
