"""``SessionMirror``: what one SDK holds of a session, kept without I/O.

Both SDKs attach to a session, resume it after a reconnect, page back through
its history and rebuild it when the relay lost it. The mirror holds the state
this needs: the epoch, the newest and oldest serial held, whether older entries
exist, the ``deliver`` entries that wait while an attach runs, and the
``ConversationTree``.

A driver asks the mirror for the frame to send (``attach()``, ``history()``)
and feeds it what the relay answered (``attached()``, ``deliver()``,
``page()``). Each of these returns what folded and the tree events it caused.
Live entries fold one at a time as the driver iterates, so each entry's events
can be reported before the next entry folds. A serial the mirror holds is
skipped, so an overlapping resume or a repeated frame never folds twice.

An ``attached`` frame with ``reset: true`` starts a new epoch. The mirror
rebuilds the tree from the page and reports, after the page's events, what the
rebuilt tree no longer shows (``ConversationTree.removed_since``).

docs/explanation/views.md explains why the SDKs keep a mirror and how it
resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ._tree import ConversationTree, TreeEvent
from .frames import Attach, Attached, History, Page

__all__ = ["Attachment", "Folded", "SessionMirror"]

log = logging.getLogger("runwire.mirror")


@dataclass(slots=True)
class Folded:
    """One entry the mirror took in, with the events its fold caused.

    ``read`` is False for an entry the tree could not read: its serial is held,
    so it is not asked for again, but it changed nothing and caused no event.
    """

    entry: dict[str, Any]
    events: list[TreeEvent]
    read: bool = True


@dataclass(slots=True)
class Attachment:
    """What an ``attached`` frame did to the mirror.

    ``first`` is true for the first attach, ``reset`` for a new epoch. Use the
    rest in order: iterate ``folded`` (the frame's entries) to the end, report
    ``removed`` (after a reset, what the rebuilt tree no longer shows), then
    iterate ``held`` (the ``deliver`` entries that waited for the attach).
    Live entries fold as the iteration reaches them; a reset's page is folded
    whole before its events are reported.
    """

    first: bool
    reset: bool
    head: int
    folded: Iterator[Folded]
    held: Iterator[Folded]
    removed: list[TreeEvent] = field(default_factory=list)


class SessionMirror:
    """A session's entries as one SDK holds them: serial bookkeeping and the tree."""

    def __init__(self, session_id: str, *, logger: logging.Logger | None = None) -> None:
        self.session_id = session_id
        self._log = logger or log
        self.tree = ConversationTree()
        self.epoch: str | None = None
        self.newest_serial: int | None = None
        self.oldest_serial: int | None = None
        self.has_older = False
        self._attaching = False
        self._held: list[dict[str, Any]] = []

    @property
    def attaching(self) -> bool:
        """True from ``attach()`` until its ``attached()`` or ``attach_failed()``."""
        return self._attaching

    @property
    def resumes(self) -> bool:
        """True once an attach succeeded: the next attach resumes from the newest serial."""
        return self.epoch is not None

    def attach(self, limit: int) -> Attach:
        """The attach frame to send now; ``deliver`` entries are held until it is answered.

        A first attach asks for the newest page of ``limit`` entries. Later ones
        resume after the newest serial held, naming the epoch the relay gave.
        """
        self._attaching = True
        self._held = []
        return Attach(
            req=0,
            session_id=self.session_id,
            limit=limit,
            from_serial=self.newest_serial if self.resumes else None,
            epoch=self.epoch,
        )

    def attach_failed(self) -> None:
        """The attach got no ``attached`` frame: drop the held entries.

        The next attach resumes from the newest serial held, so nothing is lost.
        """
        self._attaching = False
        self._held = []

    def attached(self, reply: Attached) -> Attachment:
        """Take in an ``attached`` frame; see ``Attachment`` for what it returns."""
        first = not self.resumes
        held, self._held = self._held, []
        self._attaching = False
        if reply.reset and not first:
            self._log.warning("session %s: the relay lost history; rebuilding", self.session_id)
            folded, removed = self._rebuild(reply)
            return Attachment(first, True, reply.head, iter(folded), self._fold_each(held), removed)
        if first:
            self.has_older = reply.has_older
        self.epoch = reply.epoch
        return Attachment(first, False, reply.head, self._fold_attach(reply), self._fold_each(held))

    def deliver(self, entries: Iterable[dict[str, Any]]) -> Iterator[Folded]:
        """Take in a ``deliver`` frame's entries; held (nothing folds) while an attach runs."""
        if self._attaching:
            self._held.extend(entries)
            return iter(())
        return self._fold_each(list(entries))

    def history(self, limit: int) -> History | None:
        """The history frame for the page before the oldest serial held; None if none is older."""
        if not self.has_older or self.oldest_serial is None:
            return None
        return History(req=0, session_id=self.session_id, before=self.oldest_serial, limit=limit)

    def page(self, reply: Page) -> list[TreeEvent]:
        """Merge a ``page`` frame (the answer to ``history()``); the events the merge caused."""
        entries = reply.entries
        self.has_older = reply.has_older
        serials = [s for s in (_serial(e) for e in entries) if s is not None]
        if serials:
            oldest = self.oldest_serial
            self.oldest_serial = min(serials) if oldest is None else min(oldest, *serials)
        return self.tree.fold_older(e for e in entries if _serial(e) is not None)

    def select_branch(self, message_id: str) -> list[TreeEvent]:
        """Show the branch through ``message_id``; the events it caused."""
        return self.tree.select_branch(message_id)

    def _fold_attach(self, reply: Attached) -> Iterator[Folded]:
        yield from self._fold_each(reply.entries)
        if self.newest_serial is None:
            self.newest_serial = reply.head

    def _fold_each(self, entries: Iterable[dict[str, Any]]) -> Iterator[Folded]:
        for entry in entries:
            folded = self._fold_one(entry)
            if folded is not None:
                yield folded

    def _fold_one(self, entry: dict[str, Any]) -> Folded | None:
        """Fold one entry if it is newer than the mirror holds."""
        serial = _serial(entry)
        if serial is None:
            self._log.warning("session %s: skipping an entry without a serial", self.session_id)
            return None
        if self.newest_serial is not None and serial <= self.newest_serial:
            return None
        self.newest_serial = serial
        if self.oldest_serial is None:
            self.oldest_serial = serial
        try:
            return Folded(entry, self.tree.fold(entry))
        except Exception as exc:  # bad data from the other end must not end the connection
            self._log.warning(
                "session %s: skipping an entry the view cannot read: %s", self.session_id, exc
            )
            return Folded(entry, [], read=False)

    def _rebuild(self, reply: Attached) -> tuple[list[Folded], list[TreeEvent]]:
        """A new epoch: fold the page into a new tree; what folded and what left."""
        old = self.tree
        self.tree = ConversationTree()
        self.newest_serial = None
        self.oldest_serial = None
        self.has_older = reply.has_older
        self.epoch = reply.epoch
        folded = list(self._fold_each(reply.entries))
        if self.newest_serial is None:
            self.newest_serial = reply.head
        return folded, self.tree.removed_since(old)

    def __repr__(self) -> str:
        return f"<SessionMirror {self.session_id!r} epoch={self.epoch} newest={self.newest_serial}>"


def _serial(entry: dict[str, Any]) -> int | None:
    serial = entry.get("serial")
    return serial if isinstance(serial, int) and not isinstance(serial, bool) else None
