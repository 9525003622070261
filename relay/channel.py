"""``Channel``: one session on the relay: its serials, its Runs, its subscribers.

Every change to a channel happens under its lock, in this order: drop a
repeated entry id, run the input checks on a message entry (a refused prompt
stops here; a refused queued message is replaced by a ``refused`` entry that
names it, stored in its place, and the publisher then gets the refusal),
check the entry against the Run rules, stamp it with the publisher's
identity and the time, store it (the store assigns the serial and
writes the changed Run records in the same transaction), acknowledge the
publisher, queue the entry to every subscriber, then let the hub react
(dispatch a new Run, settle timers). The lock is held through the store's
write, so subscribers get entries in serial order with no gap; writes of
different channels still share commits (the SQLite store's group commit).

Attaching takes the lock too: the subscriber is added and its backlog (or the
newest page) read in one step, so nothing published meanwhile is missed or
sent twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from transport import checks, codec
from transport.errors import RunwireError
from transport.frames import EntryBody, MessageEntry
from transport.runs import RunRecord, RunRegistry, Sender

from .store.base import ChannelInfo, Store, StoredEntry

if TYPE_CHECKING:
    from .peer import Peer

__all__ = ["Channel", "Committed"]

Committed = Callable[["Channel", EntryBody, list[RunRecord]], Awaitable[None] | None]
RELAY = Sender(client_id="relay", role="relay")


class Channel:
    """The relay's state for one session."""

    def __init__(
        self,
        store: Store,
        info: ChannelInfo,
        registry: RunRegistry,
        on_committed: Committed,
        input_checks: Sequence[checks.Check] = (),
    ) -> None:
        self.store = store
        self.input_checks = input_checks
        self.session_id = info.session_id
        self.epoch = info.epoch
        self.first = info.first
        self.last = info.last
        self.registry = registry
        self.subscribers: set[Peer] = set()
        self.lock = asyncio.Lock()
        self._on_committed = on_committed

    async def publish(self, entry: EntryBody, sender: Sender, now_ms: int) -> tuple[int, bool]:
        """Store and fan out one entry; returns ``(serial, duplicate)``.

        Raises ``RunwireError`` when the Run rules refuse it or the store fails.
        """
        async with self.lock:
            found = await self.store.find(self.session_id, entry.id)
            if found is not None:
                return found.serial, True
            refusal = None
            if self.input_checks and isinstance(entry, MessageEntry):
                refusal = await checks.first_refusal(self.input_checks, entry.message)
                if refusal is not None:
                    if entry.intent == "prompt":
                        raise refusal
                    entry, sender = checks.refusal_entry(entry, refusal), RELAY
                    if await self.store.find(self.session_id, entry.id) is not None:
                        raise refusal
            changes = self.registry.plan(entry, sender, now_ms)
            stamped = entry.model_copy(
                update={
                    "serial": None,
                    "ts": now_ms,
                    "user_id": sender.user_id,
                    "client_id": sender.client_id,
                }
            )
            try:
                appended = await self.store.append(
                    self.session_id, entry.id, codec.encode_entry(stamped), changes
                )
            except RunwireError:
                # The store may or may not hold the write; read back the truth.
                self.registry = RunRegistry(self.session_id, await self._safe_runs())
                raise
            if appended.duplicate:
                if refusal is not None:
                    raise refusal
                return appended.serial, True
            self.registry.apply(changes)
            self.last = appended.serial
            if not self.first:
                self.first = appended.serial
            for peer in self.subscribers:
                peer.send_entry(self.session_id, appended.data)
            result = self._on_committed(self, stamped, changes)
            if result is not None:
                await result
            if refusal is not None:
                raise refusal
            return appended.serial, False

    async def _safe_runs(self) -> list[RunRecord]:
        try:
            return await self.store.runs(self.session_id)
        except RunwireError:
            return list(self.registry.runs.values())

    async def attach(
        self,
        peer: Peer,
        req: int | str,
        *,
        from_serial: int | None,
        epoch: str | None,
        limit: int,
        backlog_max: int,
    ) -> None:
        """Subscribe ``peer`` and queue its ``attached`` frame, atomically.

        With ``from_serial`` of this epoch the frame carries everything after it;
        otherwise (or when more than ``backlog_max`` were missed, or the history
        it needs was trimmed) the newest page, and ``reset`` tells a resuming
        client to rebuild rather than leave a silent gap.
        """
        async with self.lock:
            resume = from_serial is not None and (epoch is None or epoch == self.epoch)
            if resume and from_serial is not None:
                if from_serial > self.last or self.last - from_serial > backlog_max:
                    resume = False
                elif self.first and from_serial < self.first - 1:
                    resume = False
            reset = from_serial is not None and not resume
            entries: list[StoredEntry] = []
            if resume and from_serial is not None:
                after = from_serial
                while after < self.last:
                    page = await self.store.read(self.session_id, after=after, limit=1000)
                    if not page:
                        break
                    entries.extend(e for e in page if e.serial <= self.last)
                    after = page[-1].serial
                has_older = from_serial >= self.first > 0 or bool(
                    entries and entries[0].serial > self.first
                )
            else:
                if self.last:
                    page = await self.store.read(self.session_id, before=self.last + 1, limit=limit)
                    entries = [e for e in page if e.serial <= self.last]
                has_older = bool(entries) and entries[0].serial > self.first
            peer.send_frame(
                b'{"type":"attached","req":'
                + codec.dumps(req)
                + b',"session_id":'
                + codec.dumps(self.session_id)
                + b',"epoch":'
                + codec.dumps(self.epoch)
                + b',"head":%d,"has_older":%s,"reset":%s,"entries":['
                % (self.last, b"true" if has_older else b"false", b"true" if reset else b"false")
                + b",".join(e.data for e in entries)
                + b"]}"
            )
            self.subscribers.add(peer)
            peer.attached.add(self.session_id)

    def detach(self, peer: Peer) -> None:
        """Stop delivering to ``peer``."""
        self.subscribers.discard(peer)
        peer.attached.discard(self.session_id)

    async def history(self, before: int, limit: int) -> tuple[list[StoredEntry], bool]:
        """Entries older than ``before`` and whether there are more."""
        page = await self.store.read(self.session_id, before=before, limit=limit)
        has_older = bool(page) and page[0].serial > self.first
        return page, has_older
