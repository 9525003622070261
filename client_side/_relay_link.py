"""``RelayLink``: what a ``ClientSession`` says to the relay over its ``Connection``.

Each time the connection comes up, the link attaches the session's view: the
first time for the newest page, later from the newest serial the view holds.
It passes the relay's ``deliver`` frames to the view's ``ViewFeed``, publishes
entries and fetches older pages.

The session reads and drives the link through ``ClientSession.link``. That
attribute is internal to the SDK: tests use it to put a scripted connection in
place of a real one.

docs/explanation/views.md explains attaching and resuming.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from transport.asyncio.connection import CONNECTION_CLOSED, Connection
from transport.asyncio.view import ViewFeed
from transport.errors import NOT_ATTACHED, PROTOCOL_ERROR, RunwireError
from transport.frames import Ack, Deliver, EntryBody, History, Page, Publish, RelayFrame
from transport.frames import Error as ErrorFrame
from transport.mirror import Attachment

from .deliveries import write_only_refused

__all__ = ["RelayLink"]

log = logging.getLogger("runwire.client")


class RelayLink:
    """Attaches, folds deliveries, publishes and fetches pages for one client session."""

    def __init__(
        self,
        conn: Connection,
        feed: ViewFeed,
        *,
        subscribe: bool,
        history_limit: int,
        attached: Callable[[Attachment], None],
        closed: Callable[[], bool],
    ) -> None:
        self.conn = conn
        """The connection requests go over (a test may put a scripted one here)."""
        self.feed = feed
        self.session_id = feed.mirror.session_id
        self.subscribe = subscribe
        self.history_limit = history_limit
        self._attached = attached  # told each attachment, before the next await
        self._closed = closed  # True once the session was closed

    async def publish(self, entry: EntryBody, slot: int | None = None) -> Ack:
        """Publish ``entry`` in its place in the connection's lane: ``slot`` (taken with
        ``Connection.reserve()`` when the user acted, for a publish made from a task), or
        now. Returns the relay's ack, which carries the entry's serial."""
        if self._closed():
            if slot is not None:
                self.conn.release(slot)
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        try:
            reply = await self.conn.request(
                Publish(req=0, session_id=self.session_id, entry=entry), slot=slot
            )
        except RunwireError as exc:
            if exc.code == NOT_ATTACHED and not self.subscribe:
                raise write_only_refused(self.session_id, exc) from None
            raise
        if not isinstance(reply, Ack) or reply.serial is None:
            raise RunwireError(PROTOCOL_ERROR, f"expected an ack with a serial, got {reply.type}")
        return reply

    async def fetch_older(self, request: History) -> Page:
        """Send a ``history`` frame and return the relay's ``page``."""
        if self._closed():
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        reply = await self.conn.request(request)
        if not isinstance(reply, Page):
            raise RunwireError(PROTOCOL_ERROR, f"expected a page, got {reply.type}")
        return reply

    async def on_connect(self, conn: Connection) -> None:
        """Attach the view over ``conn``, which just came up (nothing, for a write-only session)."""
        if not self.subscribe:
            return  # write-only: publishes go unattached
        attachment = await self.feed.request_attach(
            self.history_limit, lambda frame: conn.request(frame, wait_ready=False)
        )
        self._attached(attachment)  # no await: deliver frames held meanwhile fold last

    def on_frame(self, frame: RelayFrame) -> None:
        """Take one frame the relay sent unasked: a ``deliver``, or an ``error`` to log."""
        try:
            if isinstance(frame, Deliver):
                if frame.session_id != self.session_id:
                    return
                self.feed.deliver(frame.entries)
            elif isinstance(frame, ErrorFrame):
                log.warning(
                    "relay reported on session %s: %s %s",
                    frame.session_id,
                    frame.error.code,
                    frame.error.message,
                )
        except Exception:  # a bug here must not take the connection's reader down
            log.exception("handling a %s frame failed", frame.type)
