"""``Channel``: one session on a relay node: its serials, its Runs, its subscribers.

A channel learns every entry from the store's live subscription, whoever appended
it: this node or, on Redis, another node. It takes entries in serial order, applies
each to the session's ``RunRegistry``, queues it to this node's subscribers and lets
the hub react. Nothing is delivered that the store does not hold durably.

``publish`` checks an entry against the Run rules as of the newest serial taken in,
then appends it with ``expect_last`` set to that serial. If another node appended in
between, the store refuses (``CONFLICT``) and the channel catches up and checks
again. The publishing node runs the rules once: its own entry is applied as planned
when it comes back. A repeated entry id is acknowledged with the original serial.

``attach`` reads the backlog up to the newest serial and joins the subscribers with
no await in between, so nothing is missed or sent twice. Where the store can lose a
channel's history, every read comes with its epoch, and another epoch resets the
channel (``EPOCH_MISMATCH``): its clients rebuild.

Besides subscribers, a channel has listeners (``listen``) and holds (``Channels.hold``).
The node forgets it only when it has none of these.

See docs/explanation/relay-internals.md ("A channel") for every step and why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from transport import checks, codec
from transport.errors import (
    CONFLICT,
    EPOCH_MISMATCH,
    STORE_UNAVAILABLE,
    UNAUTHORIZED,
    RunwireError,
)
from transport.frames import EntryBody, MessageEntry, ResponseAppend
from transport.policy import RELAY
from transport.runs import RunRecord, RunRegistry, Sender, rights_refusal

from .channel_listeners import Listeners, SerialWaiters
from .peer import Peer
from .store.base import ChannelInfo, Gone, OnEntry, OnReset, Store, StoredEntry, Unsubscribe

__all__ = ["Channel", "Committed", "MakeRegistry"]

log = logging.getLogger("runwire.relay")

Committed = Callable[["Channel", EntryBody, list[RunRecord]], None]
"""The hub's reaction to an entry this node took in (from any node)."""
MakeRegistry = Callable[[str, list[RunRecord]], RunRegistry]
"""Builds a session's registry from its records (the hub adds its policy and slots)."""

_APPEND_KIND = b'"kind":"response_append"'
_RETRIES = 20
_LOAD_ATTEMPTS = 10
"""Reads of a channel's head and Run records at load before taking them as they are."""


class Channel:
    """A relay node's state for one session.

    One per loaded session, so it keeps what an idle session needs and no
    more: slots, and no lock, listener list, early-entry buffer or waiter list
    until used.
    """

    __slots__ = (
        "_early",
        "_listeners",
        "_loaded",
        "_lock",
        "_make_registry",
        "_on_committed",
        "_planned",
        "_store_error",
        "_unsubscribe",
        "_waiters",
        "epoch",
        "first",
        "holds",
        "input_checks",
        "last",
        "registry",
        "reset",
        "session_id",
        "store",
        "subscribers",
    )

    def __init__(
        self,
        store: Store,
        session_id: str,
        on_entry: Committed,
        make_registry: MakeRegistry | None = None,
        input_checks: Sequence[checks.Check] = (),
    ) -> None:
        self.store = store
        self.input_checks = input_checks
        self.session_id = session_id
        self.epoch = ""
        self.first = 0
        self.last = 0
        self._make_registry: MakeRegistry = make_registry or (lambda sid, rs: RunRegistry(sid, rs))
        self.registry = self._make_registry(session_id, [])
        self.subscribers: set[Peer] = set()
        self._listeners: Listeners | None = None
        self.holds = 0
        """Users that keep the channel loaded without subscribing (see ``Hub.hold``)."""
        self._lock: asyncio.Lock | None = None
        self.reset = False
        self._on_committed = on_entry
        self._loaded = False
        self._early: list[StoredEntry] | None = None
        self._unsubscribe: Unsubscribe | None = None
        self._waiters: SerialWaiters | None = None
        self._store_error: RunwireError | None = None  # the last publish's store failure
        self._planned: tuple[int, bytes, list[RunRecord]] | None = None
        """The serial, stored bytes and planned changes of the append in progress: the entry
        is applied as planned when it comes back, not run through the Run rules again."""

    @property
    def listeners(self) -> list[OnEntry]:
        """The entry callbacks ``listen`` added (a copy)."""
        return [] if self._listeners is None else self._listeners.entry_callbacks

    @property
    def lock(self) -> asyncio.Lock:
        """The FIFO lock a publish holds (made when first needed)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def busy(self) -> bool:
        """True while a publish holds the lock."""
        return self._lock is not None and self._lock.locked()

    async def load(self) -> None:
        """Subscribe, then read the channel's head and Run records.

        The two are separate reads: an entry another node stores between them is in
        the records, and replaying it on top of them would apply it twice (a hand-over
        counted twice). So the head is read again after the records, and both are
        read again until it has not moved.
        """
        self._unsubscribe = await self.store.subscribe(
            self.session_id, self._on_entry, on_reset=self._on_reset
        )
        info, records = await _head_and_records(self.store, self.session_id)
        self.epoch, self.first, self.last = info.epoch, info.first, info.last
        self.registry = self._make_registry(self.session_id, records)
        self._loaded = True
        early, self._early = self._early, None
        for stored in early or ():
            self._on_entry(stored)

    def close(self) -> None:
        """Stop the store subscription; the store forgets the channel."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.store.close_channel(self.session_id)
        waiters, self._waiters = self._waiters, None
        if waiters is not None:
            waiters.fail(RunwireError(EPOCH_MISMATCH, "channel closed"))

    # ------------------------------------------------------------ entries --

    def _on_entry(self, stored: StoredEntry) -> None:
        if not self._loaded:
            if self._early is None:
                self._early = []
            self._early.append(stored)
            return
        if stored.serial <= self.last:
            return  # already taken in (our own append, or the head read at load)
        self.last = stored.serial
        if not self.first:
            self.first = stored.serial
        entry: EntryBody | None = None
        changes: list[RunRecord] = []
        if _APPEND_KIND not in stored.data[:200]:
            try:
                entry = codec.decode_entry(
                    codec.loads(stored.data, max_depth=codec.RELAY_FRAME_DEPTH)
                )
                planned = self._planned
                if planned is not None and planned[:2] == (stored.serial, stored.data):
                    changes = planned[2]  # this node's own append: as planned
                    self.registry.apply(changes)
                else:
                    changes = self.registry.replay(entry)
            except RunwireError as exc:
                log.warning(
                    "channel %s: unreadable entry %d: %s", self.session_id, stored.serial, exc
                )
        for peer in self.subscribers:
            peer.send_entry(self.session_id, stored.data)
        if self._listeners is not None:
            self._listeners.entry(stored)
        if entry is not None:
            self._on_committed(self, entry, changes)
        if self._waiters:
            self._waiters.wake(self.last)

    def listen(self, fn: OnEntry, on_reset: OnReset | None = None) -> Unsubscribe:
        """Call ``fn`` with each entry this channel takes in from now on, in serial order,
        and ``on_reset`` once if it resets (``_on_reset``: it takes in nothing more);
        returns the function that stops both (idempotent)."""
        if self._listeners is None:
            self._listeners = Listeners(self.session_id)
        return self._listeners.add(fn, on_reset)

    def _on_reset(self) -> None:
        """The store lost the channel's history: close its clients (they attach again and
        rebuild), tell its listeners and stop its subscription; the hub loads the channel
        afresh when next asked."""
        if self.reset:
            return
        log.warning("channel %s: the store lost its history; clients will reset", self.session_id)
        self.reset = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for peer in list(self.subscribers):
            peer.close(4009, "EPOCH_MISMATCH: history lost, attach again")
        if self._listeners is not None:
            self._listeners.reset()

    async def catch_up(self, serial: int) -> None:
        """Take in every entry up to ``serial`` now, reading the store if need be (raises
        ``EPOCH_MISMATCH`` as ``read_after`` does)."""
        while self.last < serial and await self._take_in_newer():
            pass

    async def _take_in_newer(self) -> bool:
        """Take in a page of what the store holds beyond ``last``; True if ``last`` moved
        (raises ``EPOCH_MISMATCH`` as ``read_after`` does)."""
        before = self.last
        for stored in await self.read_after(self.last, 1000):
            self._on_entry(stored)
        return self.last > before

    async def read_after(self, after: int, limit: int) -> list[StoredEntry]:
        """Up to ``limit`` stored entries after ``after``, of this channel's history.

        Where the store can lose a loaded channel (``Store.loses_channels``: Redis), they
        are read with the epoch they are of (``Store.since``). Another epoch than the
        channel's means the store lost this history, and may have made the session anew
        with serials this channel also has. Then the channel resets (``_on_reset``: its
        clients rebuild) and ``RunwireError(EPOCH_MISMATCH)`` is raised, as when an append
        finds out. That history's entries are never mixed into this one.
        """
        if not self.store.loses_channels:
            return await self.store.read(self.session_id, after=after, limit=limit)
        epoch, page = await self.store.since(self.session_id, after, limit)
        self._same_history(epoch)
        return page

    def _same_history(self, epoch: str | None) -> None:
        """Reset the channel and raise ``EPOCH_MISMATCH`` if ``epoch`` is not its own."""
        if epoch != self.epoch:
            self._on_reset()
            raise RunwireError(
                EPOCH_MISMATCH,
                f"the store lost the history of {self.session_id!r} (epoch {self.epoch})",
                details={"epoch": epoch},
            )

    async def _applied(self, serial: int) -> None:
        if self.last >= serial:
            return
        if self._waiters is None:
            self._waiters = SerialWaiters()
        waiter = self._waiters.wait_for(serial)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=1.0)
        except TimeoutError:
            await self.catch_up(serial)

    # ------------------------------------------------------------ publish --

    async def publish(
        self,
        entry: EntryBody,
        sender: Sender,
        now_ms: int,
        *,
        gone: Gone | None = None,
        admit: Callable[[str], None] | None = None,
    ) -> tuple[int, bool, list[RunRecord]]:
        """Store one entry (``_publish``).

        A publish that waited for the channel while the one before it failed
        ``STORE_UNAVAILABLE`` fails so too, at once, with ``details.waited``. Publishes to
        one session go one at a time. Each would otherwise wait a whole store timeout more
        on a Redis that does not answer.
        """
        seen = self._store_error

        def admit_first(entry_id: str) -> None:
            if admit is not None:
                admit(entry_id)  # first: a hold behind the same sender's refused publish
            failed = self._store_error
            if failed is not seen and failed is not None:
                raise RunwireError(
                    STORE_UNAVAILABLE,
                    f"{failed.message} (while this publish waited for the session)",
                    details={"waited": True},
                )

        try:
            return await self._publish(entry, sender, now_ms, gone=gone, admit=admit_first)
        except RunwireError as exc:
            if exc.code == STORE_UNAVAILABLE and not exc.details:
                # A copy without the traceback, which would keep this publish's frames alive.
                self._store_error = RunwireError(STORE_UNAVAILABLE, exc.message)
            raise

    async def _publish(
        self,
        entry: EntryBody,
        sender: Sender,
        now_ms: int,
        *,
        gone: Gone | None = None,
        admit: Callable[[str], None] | None = None,
    ) -> tuple[int, bool, list[RunRecord]]:
        """Store one entry (it reaches subscribers through the subscription).

        Returns ``(serial, duplicate, changed Run records)``. Raises
        ``RunwireError`` when an input check or the Run rules refuse the entry
        or the store fails; a refused queued message raises its refusal after
        the ``refused`` entry that replaces it was stored. ``gone``: the entry ends
        a Run for that agent's absence, and is stored only if it is still absent
        (``Store.append``); if not, ``RunwireError(CONFLICT)`` with
        ``details["present"]``, not retried. ``admit(entry_id)``, called once the channel
        is this publish's, may refuse it (raise) before anything is looked at.
        """
        async with self.lock:
            if admit is not None:
                admit(entry.id)
            refusal: RunwireError | None = None
            if self.input_checks and isinstance(entry, MessageEntry):
                # Checks never see a repeat (messages are few; streamed tokens are not checked).
                # A repeat is acknowledged only to a sender that may send such a message.
                denied = rights_refusal(entry, sender)
                if denied is not None:
                    raise denied
                found = await self.store.find(self.session_id, entry.id)
                if found is not None:
                    return found.serial, True, []
                refusal = await checks.first_refusal(self.input_checks, entry.message)
                if refusal is not None:
                    if entry.intent == "prompt":
                        raise refusal
                    entry, sender = checks.refusal_entry(entry, refusal), RELAY
            looked_ahead = False
            for _ in range(_RETRIES):
                try:
                    changes = self.registry.plan(entry, sender, now_ms)
                except RunwireError as exc:
                    denied = rights_refusal(entry, sender)
                    if denied is not None:
                        # Whatever the Run's state (ended, say), a sender without the right
                        # hears only that: a repeat's ack would tell it the session's ids.
                        raise denied from None
                    if _never_allowed(exc, entry, sender):
                        raise  # a repeat or not, this sender may not publish it
                    # Refused as of ``last``. Another node may have stored what makes it
                    # valid (the prompt of the Run an agent starts here): catch up, once.
                    if not looked_ahead:
                        looked_ahead = True
                        if await self._take_in_newer():
                            continue
                    # A repeat is acknowledged again even if the rules would now refuse it
                    # (a steer retried after its Run ended): look the id up before refusing.
                    found = await self.store.find(self.session_id, entry.id)
                    if found is None:
                        raise
                    if refusal is not None:
                        raise refusal from None
                    return found.serial, True, []
                stamped = self.registry.stamp(entry, sender, now_ms, changes)
                data = codec.encode_entry(stamped)
                urgent = not isinstance(stamped, ResponseAppend)  # appends are not replayed
                if urgent:  # expect_last: if stored at all, stored as the next serial
                    serial = self.last + 1
                    self._planned = (serial, codec.splice_serial(data, serial), changes)
                try:
                    appended = await self.store.append(
                        self.session_id,
                        entry.id,
                        data,
                        changes,
                        expect_last=self.last,
                        urgent=urgent,
                        gone=gone,
                    )
                except RunwireError as exc:
                    self._planned = None
                    self.registry.abandon(changes)
                    if exc.code == EPOCH_MISMATCH:
                        # The store lost the session under this node (Redis without
                        # persistence, or ``history_ttl``): this channel's state is stale.
                        self._on_reset()
                    if exc.code != CONFLICT or "present" in exc.details:
                        raise  # (an absent agent that came back: no retry changes that)
                    # Plan again as of the newest serial. Had another node stored this very
                    # entry meanwhile, the rules or the store's dedup would now say so.
                    await self.catch_up(int(exc.details.get("last", self.last + 1)))
                    continue
                except BaseException:
                    self._planned = None
                    self.registry.abandon(changes)
                    raise
                if appended.duplicate:  # the store de-duplicates by id: the plan was moot
                    self._planned = None
                    self.registry.abandon(changes)
                    if refusal is not None:
                        raise refusal
                    return appended.serial, True, []
                try:
                    await self._applied(appended.serial)
                finally:
                    self._planned = None
                if refusal is not None:
                    raise refusal
                return appended.serial, False, changes
        raise RunwireError(CONFLICT, "the session is too busy right now; retry")

    # ------------------------------------------------------------- attach --

    def subscribe(self, peer: Peer) -> None:
        """Deliver the entries this channel takes in from now on to ``peer``."""
        self.subscribers.add(peer)
        peer.attached.add(self.session_id)

    def detach(self, peer: Peer) -> None:
        """Stop delivering to ``peer``."""
        self.subscribers.discard(peer)
        peer.attached.discard(self.session_id)

    async def history(self, before: int, limit: int) -> tuple[list[StoredEntry], bool]:
        """Entries older than ``before`` and whether there are more.

        Where the store can lose a loaded channel, the page is checked against the epoch
        read after it (an epoch, once lost, never comes back): a page of another history
        resets the channel and raises ``EPOCH_MISMATCH``, as ``read_after`` does.
        """
        page = await self.store.read(self.session_id, before=before, limit=limit)
        if self.store.loses_channels:
            epoch, _ = await self.store.head(self.session_id)
            self._same_history(epoch)
        has_older = bool(page) and page[0].serial > self.first
        return page, has_older


async def _head_and_records(store: Store, session_id: str) -> tuple[ChannelInfo, list[RunRecord]]:
    """A session's head and Run records, read until the head did not move in between."""
    for attempt in range(_LOAD_ATTEMPTS):
        info = await store.open_channel(session_id)
        records = await store.runs(session_id)
        if await store.head(session_id) == (info.epoch, info.last):
            break
        if attempt == _LOAD_ATTEMPTS - 1:
            log.warning(
                "channel %s: appended to throughout %d loads; its Run records may be "
                "ahead of its head",
                session_id,
                _LOAD_ATTEMPTS,
            )
    return info, records


def _never_allowed(refusal: RunwireError, entry: EntryBody, sender: Sender) -> bool:
    """True when the rules refused ``entry`` for a right the sender lacks, by its token or
    its role, not for the state of the session. Then a repeat of a stored id is refused
    too, not acknowledged: a token with no right in the session would learn its ids."""
    if refusal.code != UNAUTHORIZED:
        return False
    return "needs" in refusal.details or rights_refusal(entry, sender) is not None
