"""``Channel``: one session on a relay node: its serials, its Runs, its subscribers.

Theory of operation
-------------------
A channel learns every entry from the store's live subscription
(``Store.subscribe``), whoever appended it: this node or, on Redis, another
node. ``_on_entry`` takes entries in serial order, replays each into the
channel's ``RunRegistry`` (so every node holds the same Run state), queues it
to this node's subscribers and lets the hub react. Nothing is delivered that
the store does not hold durably.

Publishing first runs the input checks on a message entry (a refused prompt
stops there; a refused queued message is replaced by a ``refused`` entry that
names it, published by the relay in its place, and the publisher then gets
the refusal), then checks the entry against the Run rules as of the newest
serial this node has taken in (``last``), then appends with
``expect_last=last``: if another node appended in between, the store refuses
(``CONFLICT``), the channel catches up from the store and checks again. An
entry the rules refuse is likewise checked again after taking in whatever the
store holds beyond ``last``: an agent may start a Run here as soon as its
prompt, published through another node, is acknowledged, before pub/sub
brought the prompt here. One node's publishes to a channel go through a FIFO
lock, so a connection's entries keep their order; different channels still
share the store's commits.

A repeated entry id (a client retrying after a reconnect) is acknowledged
with the original serial, never refused. The common case costs one store
call: the append itself answers a repeat (``duplicate=True``, whatever
``expect_last`` says) and the channel drops its plan. The store is asked
(``find``) first only where an answer is needed without appending: when the
Run rules refuse the entry (a steer retried after its Run ended must still
get its ack), and before the input checks, which never see a repeat.

Attaching reads the backlog (or the newest page) up to ``last`` and joins the
subscribers with no await in between, so nothing is missed or sent twice.

Where the store can lose a loaded channel's history (``Store.loses_channels``:
Redis without persistence, or ``history_ttl``) and another node may already
have made the session anew, every read of entries into the channel or for an
attach (``_read_after``) comes with the epoch the entries are of. Another
epoch than the channel's resets it (``_on_reset``), exactly as an append that
gets ``EPOCH_MISMATCH`` does: its clients are closed to rebuild, its
listeners told, and the read raises ``EPOCH_MISMATCH``, never taking one
history's entries into another.

Besides connections, a channel has *listeners* (``listen``): plain callbacks
told of each entry it takes in, and of its reset (the HTTP API's event stream
waits on one), and
*holds* (``Hub.hold``) that keep it loaded while someone uses it without
subscribing. The hub forgets a channel only when it has neither.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

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

from .store.base import Gone, OnEntry, OnReset, Store, StoredEntry, Unsubscribe

if TYPE_CHECKING:
    from .peer import Peer

__all__ = ["Channel", "Committed", "entries_size", "newest_within"]

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
        self._listeners: list[tuple[OnEntry, OnReset | None]] | None = None
        self.holds = 0
        """Users that keep the channel loaded without subscribing (see ``Hub.hold``)."""
        self._lock: asyncio.Lock | None = None
        self.reset = False
        self._on_committed = on_entry
        self._loaded = False
        self._early: list[StoredEntry] | None = None
        self._unsubscribe: Unsubscribe | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] | None = None
        self._store_error: RunwireError | None = None  # the last publish's store failure

    @property
    def listeners(self) -> list[OnEntry]:
        """The entry callbacks ``listen`` added (a copy)."""
        return [fn for fn, _ in self._listeners or ()]

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
        for attempt in range(_LOAD_ATTEMPTS):
            info = await self.store.open_channel(self.session_id)
            records = await self.store.runs(self.session_id)
            if await self.store.head(self.session_id) == (info.epoch, info.last):
                break
            if attempt == _LOAD_ATTEMPTS - 1:
                log.warning(
                    "channel %s: appended to throughout %d loads; its Run records may be "
                    "ahead of its head",
                    self.session_id,
                    _LOAD_ATTEMPTS,
                )
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
        for _, waiter in waiters or ():
            if not waiter.done():
                waiter.set_exception(RunwireError(EPOCH_MISMATCH, "channel closed"))

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
                changes = self.registry.replay(entry)
            except RunwireError as exc:
                log.warning(
                    "channel %s: unreadable entry %d: %s", self.session_id, stored.serial, exc
                )
        for peer in self.subscribers:
            peer.send_entry(self.session_id, stored.data)
        for listener, _ in list(self._listeners or ()):
            try:
                listener(stored)
            except Exception:
                log.exception("channel %s: a listener failed", self.session_id)
        if entry is not None:
            self._on_committed(self, entry, changes)
        if self._waiters:
            ready = [w for s, w in self._waiters if s <= self.last]
            self._waiters = [(s, w) for s, w in self._waiters if s > self.last] or None
            for waiter in ready:
                if not waiter.done():
                    waiter.set_result(None)

    def listen(self, fn: OnEntry, on_reset: OnReset | None = None) -> Unsubscribe:
        """Call ``fn`` with each entry this channel takes in from now on, in serial order,
        and ``on_reset`` once if it resets (``_on_reset``: it takes in nothing more);
        returns the function that stops both (idempotent)."""
        if self._listeners is None:
            self._listeners = []
        listener = (fn, on_reset)
        self._listeners.append(listener)

        def stop() -> None:
            if self._listeners is not None and listener in self._listeners:
                self._listeners.remove(listener)
                if not self._listeners:
                    self._listeners = None

        return stop

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
        for _, on_reset in list(self._listeners or ()):
            if on_reset is None:
                continue
            try:
                on_reset()
            except Exception:
                log.exception("channel %s: a listener failed on reset", self.session_id)

    async def _catch_up(self, serial: int) -> None:
        """Take in every entry up to ``serial`` now, reading the store if need be (raises
        ``EPOCH_MISMATCH`` as ``_read_after`` does)."""
        while self.last < serial and await self._take_in_newer():
            pass

    async def _take_in_newer(self) -> bool:
        """Take in a page of what the store holds beyond ``last``; True if ``last`` moved
        (raises ``EPOCH_MISMATCH`` as ``_read_after`` does)."""
        before = self.last
        for stored in await self._read_after(self.last, 1000):
            self._on_entry(stored)
        return self.last > before

    async def _read_after(self, after: int, limit: int) -> list[StoredEntry]:
        """Up to ``limit`` stored entries after ``after``, of this channel's history.

        Where the store can lose a loaded channel (``Store.loses_channels``: Redis), they
        are read with the epoch they are of (``Store.since``). Another epoch than the
        channel's means the store lost this history (and maybe made the session anew, with
        serials this channel also has): the channel resets (``_on_reset``: its clients
        rebuild) and ``RunwireError(EPOCH_MISMATCH)`` is raised, as when an append finds
        out, rather than mix that history's entries into this one.
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
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append((serial, waiter))
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=1.0)
        except TimeoutError:
            await self._catch_up(serial)

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
        """Store one entry (``_publish``). A publish that waited for the channel while the
        one before it failed ``STORE_UNAVAILABLE`` fails so too, at once: publishes to one
        session go one at a time, and each would otherwise wait a whole store timeout more
        on a Redis that does not answer (``details.waited``)."""
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
                try:
                    appended = await self.store.append(
                        self.session_id,
                        entry.id,
                        codec.encode_entry(stamped),
                        changes,
                        expect_last=self.last,
                        urgent=not isinstance(stamped, ResponseAppend),
                        gone=gone,
                    )
                except RunwireError as exc:
                    self.registry.abandon(changes)
                    if exc.code == EPOCH_MISMATCH:
                        # The store lost the session under this node (Redis without
                        # persistence, or ``history_ttl``): this channel's state is stale.
                        self._on_reset()
                    if exc.code != CONFLICT or "present" in exc.details:
                        raise  # (an absent agent that came back: no retry changes that)
                    # Plan again as of the newest serial. Had another node stored this very
                    # entry meanwhile, the rules or the store's dedup would now say so.
                    await self._catch_up(int(exc.details.get("last", self.last + 1)))
                    continue
                except BaseException:
                    self.registry.abandon(changes)
                    raise
                if appended.duplicate:  # the store de-duplicates by id: the plan was moot
                    self.registry.abandon(changes)
                    if refusal is not None:
                        raise refusal
                    return appended.serial, True, []
                await self._applied(appended.serial)
                if refusal is not None:
                    raise refusal
                return appended.serial, False, changes
        raise RunwireError(CONFLICT, "the session is too busy right now; retry")

    # ------------------------------------------------------------- attach --

    async def attach(
        self,
        peer: Peer,
        req: int | str,
        *,
        from_serial: int | None,
        epoch: str | None,
        limit: int,
        backlog_max: int,
        max_bytes: int | None = None,
    ) -> None:
        """Subscribe ``peer`` and queue its ``attached`` frame, atomically.

        With ``from_serial`` of this epoch the frame carries everything after it;
        otherwise (or when more than ``backlog_max`` were missed, or the history
        it needs was trimmed) the newest page, and ``reset`` tells a resuming
        client to rebuild rather than leave a silent gap. ``max_bytes`` bounds the
        entries the frame carries: a backlog bigger than that is answered as one too
        long (``reset``), and the newest page keeps only its newest entries that fit
        (``has_older`` then says there are more), so the frame never by itself
        overflows the peer's send queue. A ``from_serial`` beyond
        what this node has taken in (the client saw it through another node) is
        caught up from the store first, so it resumes rather than resets.

        Raises ``RunwireError(EPOCH_MISMATCH)``, subscribing nobody, when the channel
        reset meanwhile: the store lost its history, which its reads (``_read_after``)
        or its subscription found out. Attach to the session loaded again then.
        """
        if (
            from_serial is not None
            and (epoch is None or epoch == self.epoch)
            and from_serial > self.last
        ):
            # The client saw entries this node has not taken in yet (stored through
            # another node, pub/sub still on its way): take them in from the store first.
            await self._catch_up(from_serial)
        head = self.last
        resume = from_serial is not None and (epoch is None or epoch == self.epoch)
        if resume and from_serial is not None:
            if from_serial > head or head - from_serial > backlog_max:
                resume = False
            elif self.first and from_serial < self.first - 1:
                resume = False
        entries: list[StoredEntry] = []
        if resume and from_serial is not None:
            entries, fits = await self._read_to_last([], from_serial, max_bytes)
            resume = fits
        if not resume:
            page, covered = await self._newest_page(limit)
            entries, _ = await self._read_to_last(page, covered, None)
            entries = newest_within(entries, max_bytes)
        reset = from_serial is not None and not resume
        if self.reset:
            raise RunwireError(EPOCH_MISMATCH, f"the store lost the history of {self.session_id!r}")
        if resume:
            has_older = bool(from_serial and from_serial >= self.first > 0)
        else:
            oldest = entries[0].serial if entries else self.last + 1
            has_older = self.last > 0 and oldest > self.first
        peer.send_frame(
            codec.attached_frame(
                req,
                self.session_id,
                self.epoch,
                self.last,
                has_older=has_older,
                reset=reset,
                entries=[e.data for e in entries],
            )
        )
        self.subscribers.add(peer)
        peer.attached.add(self.session_id)

    async def _newest_page(self, limit: int) -> tuple[list[StoredEntry], int]:
        """The newest ``limit`` entries up to ``last`` and the serial they cover up to."""
        head = self.last
        if not head:
            return [], 0
        # Serials are dense from the oldest stored on.
        page = await self._read_after(max(head - limit, 0), limit)
        entries = [e for e in page if e.serial <= head]
        return entries, entries[-1].serial if entries else head

    async def _read_to_last(
        self, entries: list[StoredEntry], covered: int, max_bytes: int | None
    ) -> tuple[list[StoredEntry], bool]:
        """``entries`` and then every entry after ``covered`` up to ``last``, reading until
        nothing new arrived during the last read (so the caller can join with no await).

        Returns the entries and True, or, as soon as they would pass ``max_bytes`` (when
        given), what was read so far and False.
        """
        size = entries_size(entries)
        while covered < self.last:
            page = await self._read_after(covered, 1000)
            page = [e for e in page if e.serial <= self.last]
            if not page:
                break
            entries.extend(page)
            covered = page[-1].serial
            size += entries_size(page)
            if max_bytes is not None and size > max_bytes:
                return entries, False
        return entries, True

    def detach(self, peer: Peer) -> None:
        """Stop delivering to ``peer``."""
        self.subscribers.discard(peer)
        peer.attached.discard(self.session_id)

    async def history(self, before: int, limit: int) -> tuple[list[StoredEntry], bool]:
        """Entries older than ``before`` and whether there are more.

        Where the store can lose a loaded channel, the page is checked against the epoch
        read after it (an epoch, once lost, never comes back): a page of another history
        resets the channel and raises ``EPOCH_MISMATCH``, as ``_read_after`` does.
        """
        page = await self.store.read(self.session_id, before=before, limit=limit)
        if self.store.loses_channels:
            epoch, _ = await self.store.head(self.session_id)
            self._same_history(epoch)
        has_older = bool(page) and page[0].serial > self.first
        return page, has_older


def entries_size(entries: Sequence[StoredEntry]) -> int:
    """The bytes ``entries`` take in a frame (each with its separating comma)."""
    return sum(len(e.data) + 1 for e in entries)


def newest_within(entries: list[StoredEntry], max_bytes: int | None) -> list[StoredEntry]:
    """The newest of ``entries`` (oldest first) that together take at most ``max_bytes``."""
    if max_bytes is None or entries_size(entries) <= max_bytes:
        return entries
    size = 0
    start = len(entries)
    while start and size + len(entries[start - 1].data) + 1 <= max_bytes:
        start -= 1
        size += len(entries[start].data) + 1
    return entries[start:]


def _never_allowed(refusal: RunwireError, entry: EntryBody, sender: Sender) -> bool:
    """True when the rules refused ``entry`` for a right the sender lacks (its token's, or
    its role's), not for the state of the session: then a repeat of a stored id is refused
    too, not acknowledged (a token with no right in the session would learn its ids)."""
    if refusal.code != UNAUTHORIZED:
        return False
    return "needs" in refusal.details or rights_refusal(entry, sender) is not None
