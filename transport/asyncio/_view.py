"""``View``: one session's conversation as an SDK sees it, the same class in both SDKs.

A ``View`` is what ``session.view`` is in the client SDK and in the agent SDK.
It reads a ``transport._mirror.SessionMirror`` and reports each change to
``on()`` callbacks and ``events()`` iterators. Its methods are those of the
API contract: ``messages()``, ``runs()``, ``has_older()``, ``load_older()``,
``on()``, ``events()``, ``branches()`` and ``select_branch()``.

A session never feeds the view directly. It holds a ``ViewFeed``, which owns
the mirror and the view: the session passes each relay frame to the feed, and
the feed folds it and reports the events it caused. Events go first to the
session's own hooks, then to the callbacks of their kind, then to every open
``events()`` iterator.

``MessageEvent.shown`` says whether an event's message is in ``messages()``.
So a UI that upserts shown messages and drops the rest shows ``messages()``.

A view can be write-only: the view of a client connected with
``subscribe=False`` is never fed. Its reading methods and event subscriptions
raise ``RunwireError(NOT_ATTACHED)`` at once instead of showing nothing.

docs/explanation/views.md explains how a view attaches, resumes and rebuilds.
"""

from __future__ import annotations

import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from .._mirror import Attachment, Folded, SessionMirror
from .._tree import ConversationTree, RunInfo, TreeEvent, ViewMessage
from ..errors import NOT_ATTACHED, PROTOCOL_ERROR, VALIDATION_ERROR, RunwireError
from ..frames import Attach, Attached, History, Page, RelayFrame

__all__ = [
    "EVENT_KINDS",
    "Event",
    "EventStream",
    "FetchOlder",
    "UnknownViewEvent",
    "View",
    "ViewFeed",
]

EVENT_KINDS = ("message", "run", "delivery")
Event = TreeEvent
Callback = Callable[[Any], object]
FetchOlder = Callable[[History], Awaitable[Page]]
"""``fetch_older(request)``: send a ``history`` frame and return the relay's ``page``."""


class UnknownViewEvent(RunwireError, ValueError):
    """``view.on()`` got an event name it does not know (code ``VALIDATION_ERROR``)."""


class EventStream:
    """An async iterator over a view's events, with its own unbounded buffer.

    Ends (``StopAsyncIteration``) once the session closes and the buffer is
    drained. ``aclose()`` stops it early. A stream nobody references any more
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
        self.end()

    def push(self, event: Event) -> None:
        """Buffer one event (the view calls this)."""
        if not self._closed:
            self._buffer.append(event)
            if self._wake is not None:
                self._wake.set()

    def end(self) -> None:
        """End the stream once its buffer is drained (the view calls this on close)."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()


class ViewFeed:
    """The session's side of a ``View``: it feeds relay frames in and reports events.

    ``event_hooks`` run for each event before the user's callbacks.
    ``entry_hooks`` run for each live entry folded, before its events are
    reported (the agent tells its Runs what changed for them).
    """

    def __init__(
        self,
        session_id: str,
        fetch_older: FetchOlder,
        *,
        readable: bool = True,
        logger: logging.Logger | None = None,
    ) -> None:
        self.log = logger or logging.getLogger("runwire.view")
        self.mirror = SessionMirror(session_id, logger=self.log)
        self.readable = readable
        self.fetch_older = fetch_older
        self.callbacks: dict[str, list[Callback]] = {kind: [] for kind in EVENT_KINDS}
        self.streams: weakref.WeakSet[EventStream] = weakref.WeakSet()
        self.event_hooks: list[Callable[[Event], None]] = []
        self.entry_hooks: list[Callable[[Folded], None]] = []
        self.closed = False
        self._changed: anyio.Event | None = None
        self._older_lock: anyio.Lock | None = None
        self.view = View(self)

    # --------------------------------------------------------- frames in --

    def attach(self, limit: int) -> Attach:
        """The attach frame to send (``SessionMirror.attach``)."""
        return self.mirror.attach(limit)

    async def request_attach(
        self, limit: int, send: Callable[[Attach], Awaitable[RelayFrame]]
    ) -> Attachment:
        """Attach with ``send`` (which sends a frame and returns the reply) and take it in.

        Raises what ``send`` raises, or ``PROTOCOL_ERROR`` for a reply that is
        not ``attached``; the held entries are dropped then. Report the result
        with ``take_attachment`` (or step by step) before the next await.
        """
        frame = self.mirror.attach(limit)
        try:
            reply = await send(frame)
            if not isinstance(reply, Attached):
                raise RunwireError(PROTOCOL_ERROR, f"expected attached, got {reply.type}")
        except BaseException:
            self.mirror.attach_failed()
            raise
        return self.mirror.attached(reply)

    def attach_failed(self) -> None:
        """The attach got no answer; see ``SessionMirror.attach_failed``."""
        self.mirror.attach_failed()

    def attached(self, reply: Attached) -> Attachment:
        """Take in an ``attached`` frame; report it with ``take_attachment`` or step by step."""
        return self.mirror.attached(reply)

    def take_attachment(self, attachment: Attachment) -> None:
        """Report an attachment: its entries, what a reset removed, then the held entries."""
        self.take(attachment.folded)
        self.dispatch(attachment.removed)
        self.take(attachment.held)

    def deliver(self, entries: Iterable[dict[str, Any]]) -> None:
        """Take in a ``deliver`` frame's entries (held while an attach runs)."""
        self.take(self.mirror.deliver(entries))

    def take(self, folded: Iterable[Folded]) -> None:
        """Report each folded entry's events, one entry at a time."""
        for item in folded:
            for hook in self.entry_hooks:
                hook(item)
            self.dispatch(item.events)
        self.notify()  # entries that raise no event (a refused cancel) still wake waiters

    async def load_older(self, limit: int) -> int:
        """Fetch and merge the page before the oldest serial held; how many entries it had."""
        if limit < 1:
            raise RunwireError(VALIDATION_ERROR, "limit must be at least 1")
        if self._older_lock is None:
            self._older_lock = anyio.Lock()
        async with self._older_lock:
            request = self.mirror.history(limit)
            if request is None:
                return 0
            reply = await self.fetch_older(request)
            self.dispatch(self.mirror.page(reply))
            return len(reply.entries)

    def close(self) -> None:
        """The session closed: end every ``events()`` iterator and wake every waiter."""
        self.closed = True
        for stream in list(self.streams):
            stream.end()
        self.streams.clear()
        self.notify()

    # ------------------------------------------------------------ events --

    def dispatch(self, events: Iterable[Event] | None) -> None:
        """Report ``events`` in order: hooks, then callbacks of their kind, then streams."""
        if not events:
            return
        for event in events:
            for hook in self.event_hooks:
                hook(event)
            for callback in list(self.callbacks.get(event.kind, ())):
                try:
                    callback(event)
                except Exception:
                    self.log.exception("a view %r callback failed", event.kind)
            if self.streams:  # a WeakSet: iterating one costs, even when empty
                for stream in list(self.streams):
                    stream.push(event)
        self.notify()

    def notify(self) -> None:
        """Wake what waits in ``wait_change()``."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def wait_change(self) -> None:
        """Wait until the next batch of events (or the close)."""
        if self.closed:
            return
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()


class View:
    """The conversation of one session as this SDK sees it (``session.view``)."""

    def __init__(self, feed: ViewFeed) -> None:
        self._feed = feed
        self.session_id = feed.mirror.session_id

    # ------------------------------------------------------------ reading --

    @property
    def readable(self) -> bool:
        """False for the view of a write-only session (``connect(..., subscribe=False)``):
        it is never fed, and every reading method raises ``NOT_ATTACHED``."""
        return self._feed.readable

    def _check_readable(self, what: str) -> None:
        if not self._feed.readable:
            raise write_only_error(self.session_id, what)

    @property
    def mirror(self) -> SessionMirror:
        """The state the view reads (read it; the session feeds it)."""
        return self._feed.mirror

    @property
    def tree(self) -> ConversationTree:
        """The underlying conversation tree (read it; do not fold into it)."""
        self._check_readable("view.tree")
        return self._feed.mirror.tree

    @property
    def newest_serial(self) -> int | None:
        """The newest serial this view holds (what a resume starts after)."""
        return self._feed.mirror.newest_serial

    @property
    def oldest_serial(self) -> int | None:
        """The oldest serial this view holds (what ``load_older`` pages before)."""
        return self._feed.mirror.oldest_serial

    def messages(self) -> list[ViewMessage]:
        """The active branch of the conversation, oldest first."""
        self._check_readable("view.messages()")
        return self._feed.mirror.tree.messages()

    def runs(self) -> list[RunInfo]:
        """Every Run the view knows, with its status."""
        self._check_readable("view.runs()")
        return self._feed.mirror.tree.runs()

    def run(self, run_id: str) -> RunInfo | None:
        """One Run, or None if the view has not seen it."""
        self._check_readable("view.run()")
        return self._feed.mirror.tree.run(run_id)

    def waiting(self) -> list[ViewMessage]:
        """Prompts of queued Runs (not yet in ``messages()``), oldest first."""
        self._check_readable("view.waiting()")
        return self._feed.mirror.tree.waiting()

    def has_older(self) -> bool:
        """True while the session has entries older than the view holds."""
        self._check_readable("view.has_older()")
        return self._feed.mirror.has_older

    def branches(self, message_id: str) -> list[str]:
        """Ids of a message's alternatives (its siblings, itself included), oldest first."""
        self._check_readable("view.branches()")
        return self._feed.mirror.tree.branches(message_id)

    def select_branch(self, message_id: str) -> None:
        """Show the branch through ``message_id``.

        Reports ``MessageEvent(op="removed")`` for each message it takes out of
        ``messages()``, then ``op="added"`` for each it brings in, in path order.
        """
        self._check_readable("view.select_branch()")
        self._feed.dispatch(self._feed.mirror.select_branch(message_id))

    async def load_older(self, limit: int = 50) -> int:
        """Fetch the page before the oldest entry the view holds and merge it.

        Returns how many entries the page had (0 when there is nothing older).
        Reports only the events the merge caused. Raises ``RunwireError`` if
        the relay refuses or the session is closed, and ``NOT_ATTACHED`` at
        once for a write-only session.
        """
        self._check_readable("view.load_older()")
        return await self._feed.load_older(limit)

    # ------------------------------------------------------------ events --

    def on(self, event: str, callback: Callable[[Any], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for each ``"message"``, ``"run"`` or ``"delivery"`` event.

        Returns a function that unsubscribes. Raises ``RunwireError(VALIDATION_ERROR)``,
        also a ``ValueError``, for another event name, ``NOT_ATTACHED`` for a write-only session. A
        callback that raises is logged and skipped.
        """
        self._check_readable("view.on()")
        if event not in self._feed.callbacks:
            raise UnknownViewEvent(
                VALIDATION_ERROR,
                f"unknown view event {event!r}; expected one of {', '.join(EVENT_KINDS)}",
            )
        callbacks = self._feed.callbacks[event]
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
        if self._feed.closed:
            stream.end()
        else:
            self._feed.streams.add(stream)
        return stream

    def __repr__(self) -> str:
        if not self._feed.readable:
            return f"<View {self.session_id!r} write-only>"
        return f"<View {self.session_id!r} newest={self.newest_serial}>"


def write_only_error(session_id: str, what: str) -> RunwireError:
    """The ``NOT_ATTACHED`` error for reading a session connected with ``subscribe=False``."""
    return RunwireError(
        NOT_ATTACHED,
        f"{what} reads session {session_id!r}, which was connected with subscribe=False"
        " (write-only: it publishes without attaching and never sees the session's entries)",
        details={"session_id": session_id, "subscribe": False},
    )
