"""``View``: a client's live picture of one session's conversation.

Theory of operation
-------------------
The view owns a ``transport.tree.ConversationTree`` and is fed by its
session: the entries of each ``attached`` frame and each ``deliver`` frame
fold into the tree in serial order, and every event the tree reports goes, in
order, to the session's own bookkeeping (steering outcomes), then to the
``on()`` callbacks of its kind, then to every open ``events()`` iterator.

Every change of ``messages()`` is reported (``transport.tree`` explains the
order): a fork or a rollback that leaves the shown turn behind, a refusal, a
``select_branch`` report ``MessageEvent(op="removed")`` for what left and
``op="added"`` for what joined; ``MessageEvent.shown`` says whether each
event's message is in ``messages()``, so a UI that upserts shown messages and
drops the rest shows exactly ``messages()``.

Serials the view already holds are skipped before they reach the tree, so a
resume that overlaps what the view has (or a frame that arrives twice) never
shows a message twice. A ``reset`` (the relay lost the history the view
resumed from) rebuilds the tree from the page the relay sent; once the page
folded, it reports its events, then ``MessageEvent(op="removed")`` for each
message the view showed and no longer does and ``RunEvent(op="removed")`` for
each Run it no longer knows (``ConversationTree.removed_since``).

``load_older()`` asks the relay for the page before the oldest serial the
view holds and merges it (``fold_older``); only events the merge caused are
reported (``op="removed"`` for messages the merge took out of ``messages()``).

Write-only. The view of a session connected with ``subscribe=False`` is never
fed: every reading method and event subscription raises
``RunwireError(NOT_ATTACHED)`` at once instead of showing an empty
conversation or waiting for events that never come.
"""

from __future__ import annotations

import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from transport.errors import NOT_ATTACHED, VALIDATION_ERROR, RunwireError
from transport.tree import (
    ConversationTree,
    DeliveryEvent,
    MessageEvent,
    RunEvent,
    RunInfo,
    ViewMessage,
)

__all__ = ["EVENT_KINDS", "Event", "EventStream", "View"]

log = logging.getLogger("runwire.client")

EVENT_KINDS = ("message", "run", "delivery")
Event = MessageEvent | RunEvent | DeliveryEvent
Callback = Callable[[Any], object]
FetchOlder = Callable[[int, int], Awaitable[tuple[list[dict[str, Any]], bool]]]


class EventStream:
    """An async iterator over a view's events, with its own unbounded buffer.

    Ends (``StopAsyncIteration``) once the session closes and the buffer is
    drained. ``aclose()`` stops it early; a stream nobody references any more
    stops receiving.
    """

    def __init__(self) -> None:
        self._buffer: deque[Event] = deque()
        self._wake: anyio.Event | None = None
        self._closed = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._wake = anyio.Event()
            await self._wake.wait()
        return self._buffer.popleft()

    async def aclose(self) -> None:
        """Stop receiving; what is buffered is dropped."""
        self._buffer.clear()
        self._end()

    def _push(self, event: Event) -> None:
        if not self._closed:
            self._buffer.append(event)
            if self._wake is not None:
                self._wake.set()

    def _end(self) -> None:
        self._closed = True
        if self._wake is not None:
            self._wake.set()


class View:
    """The conversation of one session as this client sees it (``session.view``)."""

    def __init__(self, session_id: str, fetch_older: FetchOlder) -> None:
        self.session_id = session_id
        self._fetch_older = fetch_older
        self._tree = ConversationTree()
        self._newest: int | None = None
        self._oldest: int | None = None
        self._has_older = False
        self._callbacks: dict[str, list[Callback]] = {kind: [] for kind in EVENT_KINDS}
        self._streams: weakref.WeakSet[EventStream] = weakref.WeakSet()
        self._hooks: list[Callable[[Event], None]] = []
        self._changed: anyio.Event | None = None
        self._older_lock: anyio.Lock | None = None
        self._closed = False
        self._write_only = False

    # ------------------------------------------------------------ reading --

    @property
    def readable(self) -> bool:
        """False for the view of a write-only session (``connect(..., subscribe=False)``):
        it is never fed, and every reading method raises ``NOT_ATTACHED``."""
        return not self._write_only

    def _check_readable(self, what: str) -> None:
        if self._write_only:
            raise _write_only_error(self.session_id, what)

    @property
    def tree(self) -> ConversationTree:
        """The underlying conversation tree (read it; do not fold into it)."""
        self._check_readable("view.tree")
        return self._tree

    @property
    def newest_serial(self) -> int | None:
        """The newest serial this view holds (what a resume starts after)."""
        return self._newest

    @property
    def oldest_serial(self) -> int | None:
        """The oldest serial this view holds (what ``load_older`` pages before)."""
        return self._oldest

    def messages(self) -> list[ViewMessage]:
        """The active branch of the conversation, oldest first."""
        self._check_readable("view.messages()")
        return self._tree.messages()

    def runs(self) -> list[RunInfo]:
        """Every Run the view knows, with its status."""
        self._check_readable("view.runs()")
        return self._tree.runs()

    def run(self, run_id: str) -> RunInfo | None:
        """One Run, or None if the view has not seen it."""
        self._check_readable("view.run()")
        return self._tree.run(run_id)

    def waiting(self) -> list[ViewMessage]:
        """Prompts of queued Runs (not yet in ``messages()``), oldest first."""
        self._check_readable("view.waiting()")
        return self._tree.waiting()

    def has_older(self) -> bool:
        """True while the session has entries older than the view holds."""
        self._check_readable("view.has_older()")
        return self._has_older

    def branches(self, message_id: str) -> list[str]:
        """Ids of a message's alternatives (its siblings, itself included), oldest first."""
        self._check_readable("view.branches()")
        return self._tree.branches(message_id)

    def select_branch(self, message_id: str) -> None:
        """Show the branch through ``message_id``.

        Reports ``MessageEvent(op="removed")`` for each message it takes out of
        ``messages()``, then ``op="added"`` for each it brings in (in path order).
        """
        self._check_readable("view.select_branch()")
        self._dispatch(self._tree.select_branch(message_id))

    async def load_older(self, limit: int = 50) -> int:
        """Fetch the page before the oldest entry the view holds and merge it.

        Returns how many entries the page had (0 when there is nothing older).
        Raises ``RunwireError`` if the relay refuses or the session is closed,
        ``NOT_ATTACHED`` at once for a write-only session.
        """
        self._check_readable("view.load_older()")
        if limit < 1:
            raise RunwireError(VALIDATION_ERROR, "limit must be at least 1")
        if self._older_lock is None:
            self._older_lock = anyio.Lock()
        async with self._older_lock:
            if not self._has_older or self._oldest is None:
                return 0
            entries, has_older = await self._fetch_older(self._oldest, limit)
            self._has_older = has_older
            serials = [s for s in (_serial(e) for e in entries) if s is not None]
            if serials:
                self._oldest = min(self._oldest, *serials)
            self._dispatch(self._tree.fold_older(entries))
            return len(entries)

    # ------------------------------------------------------------ events --

    def on(self, event: str, callback: Callable[[Any], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for each ``"message"``, ``"run"`` or ``"delivery"`` event.

        Returns a function that unsubscribes. Raises ``RunwireError(VALIDATION_ERROR)``
        for another event name, ``NOT_ATTACHED`` for a write-only session. A
        callback that raises is logged and skipped.
        """
        self._check_readable("view.on()")
        if event not in self._callbacks:
            raise RunwireError(
                VALIDATION_ERROR,
                f"unknown view event {event!r}; expected one of {', '.join(EVENT_KINDS)}",
            )
        callbacks = self._callbacks[event]
        callbacks.append(callback)

        def unsubscribe() -> None:
            try:
                callbacks.remove(callback)
            except ValueError:
                pass

        return unsubscribe

    def events(self) -> EventStream:
        """An async iterator of every event from now on; ends when the session closes.

        Raises ``RunwireError(NOT_ATTACHED)`` for a write-only session (no event ever comes).
        """
        self._check_readable("view.events()")
        stream = EventStream()
        if self._closed:
            stream._end()
        else:
            self._streams.add(stream)
        return stream

    # ------------------------------------------------- fed by the session --

    def _fold_live(self, entries: Iterable[dict[str, Any]]) -> None:
        """Fold entries newer than the view holds, in order; report their events."""
        for entry in entries:
            self._dispatch(self._fold_one(entry))
        self._notify()  # entries that raise no event (a refused cancel) still wake waiters

    def _fold_one(self, entry: dict[str, Any]) -> list[Event]:
        """Fold one entry if it is newer than the view holds; the events it caused."""
        serial = _serial(entry)
        if serial is not None:
            if self._newest is not None and serial <= self._newest:
                return []
            self._newest = serial
            if self._oldest is None:
                self._oldest = serial
        try:
            return self._tree.fold(entry)
        except RunwireError as exc:
            log.warning("session %s: skipping an entry the view cannot read: %s", self, exc)
            return []

    def _attached(self, entries: list[dict[str, Any]], head: int, has_older: bool) -> None:
        """A first attach: the newest page."""
        self._has_older = has_older
        self._fold_live(entries)
        if self._newest is None:
            self._newest = head

    def _resumed(self, entries: list[dict[str, Any]], head: int) -> None:
        """A resume: everything after the newest serial the view held."""
        self._fold_live(entries)
        if self._newest is None:
            self._newest = head

    def _reset(self, entries: list[dict[str, Any]], head: int, has_older: bool) -> None:
        """The relay lost the history the view resumed from: rebuild from the page.

        Reports the events of folding the page (as a first attach does), then
        what the rebuilt view no longer shows: ``MessageEvent(op="removed")``
        and ``RunEvent(op="removed")`` (``ConversationTree.removed_since``).
        Everything is reported once the whole page folded.
        """
        old = self._tree
        self._tree = ConversationTree()
        self._newest = None
        self._oldest = None
        self._has_older = has_older
        events: list[Event] = []
        for entry in entries:
            events.extend(self._fold_one(entry))
        if self._newest is None:
            self._newest = head
        events.extend(self._tree.removed_since(old))
        self._dispatch(events)
        self._notify()

    def _close(self) -> None:
        self._closed = True
        for stream in list(self._streams):
            stream._end()
        self._streams.clear()
        self._notify()

    def _dispatch(self, events: Iterable[Event] | None) -> None:
        if not events:
            return
        for event in events:
            for hook in self._hooks:
                hook(event)
            for callback in list(self._callbacks.get(event.kind, ())):
                try:
                    callback(event)
                except Exception:
                    log.exception("a view %r callback failed", event.kind)
            if self._streams:  # a WeakSet: iterating one costs, even when empty
                for stream in list(self._streams):
                    stream._push(event)
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def _wait_change(self) -> None:
        """Wait until the next batch of events (or the close)."""
        if self._closed:
            return
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def __repr__(self) -> str:
        if self._write_only:
            return f"<View {self.session_id!r} write-only>"
        return f"<View {self.session_id!r} newest={self._newest}>"


def _write_only_error(session_id: str, what: str) -> RunwireError:
    """The ``NOT_ATTACHED`` error for reading a session connected with ``subscribe=False``."""
    return RunwireError(
        NOT_ATTACHED,
        f"{what} reads session {session_id!r}, which was connected with subscribe=False"
        " (write-only: it publishes without attaching and never sees the session's entries)",
        details={"session_id": session_id, "subscribe": False},
    )


def _serial(entry: dict[str, Any]) -> int | None:
    serial = entry.get("serial")
    return serial if isinstance(serial, int) and not isinstance(serial, bool) else None
