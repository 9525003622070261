"""``Reactions``: the entries the relay publishes because of other entries.

When an entry changed Run records, the session may be due more entries: the cancels
of an interrupt, the end of a queued Run its sender cancelled, the next queued Run's
turn. ``RunRegistry.due()`` says which. ``Reactions`` publishes them in one place,
``_react``, right after the commit. Those entries have fixed ids and go through the
Run rules again, so a repeat on this node or another is a duplicate and a stale one
is refused.

When a Run leaves a slot of ``max_concurrent_runs``, every session with Runs waiting
for a slot is looked at, the one whose Run has waited longest first. A publish that
failed gives back the slot its plan held in the same way.

What the store did not take is tried again with backoff. The node that stored an
entry also passes the Runs it made pending to a worker (``published``).

See docs/explanation/runs.md for the lifecycle these entries drive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from transport._runs import RunRecord, SlotBook
from transport.errors import CONFLICT, STORE_UNAVAILABLE, RunwireError
from transport.frames import EntryBody, MessageEntry, RunEntry

from ._channel import Channel
from ._channels import Channels, oldest_waiting
from ._deadlines import Deadlines
from ._dispatch import Dispatcher
from ._metrics import Metrics

if TYPE_CHECKING:
    from ._cluster import RedisDispatcher
    from ._cluster_shards import ShardedDispatcher

__all__ = ["REACT_RETRY", "REACT_RETRY_MAX", "STORE_FAILURES", "Reactions", "now_ms"]

log = logging.getLogger("runwire.relay")

REACT_RETRY = 0.1
"""Seconds before the relay tries again to publish entries the store did not take."""
REACT_RETRY_MAX = 5.0
"""The longest wait between two such tries (the wait doubles from ``REACT_RETRY``)."""
STORE_FAILURES = frozenset({STORE_UNAVAILABLE, CONFLICT})
"""Codes that say the store did not take an entry, not that the rules refused it."""

Spawn = Callable[[Coroutine[Any, Any, None]], None]
"""Runs a coroutine in a task the hub cancels when it closes."""


def now_ms() -> int:
    """Wall-clock milliseconds, for entry timestamps."""
    return int(time.time() * 1000)


class Reactions:
    """Publishes what sessions are due after their entries, and gives out free slots."""

    def __init__(
        self,
        channels: Channels,
        dispatcher: Dispatcher | RedisDispatcher | ShardedDispatcher,
        *,
        deadlines: Deadlines,
        slots: SlotBook,
        metrics: Metrics,
        spawn: Spawn,
    ) -> None:
        self.channels = channels
        self.dispatcher = dispatcher
        self.deadlines = deadlines
        self.slots = slots
        self.metrics = metrics
        self._spawn = spawn
        self._reacting: set[str] = set()
        self._again: set[str] = set()

    def reacting(self, session_id: str) -> bool:
        """True while this node publishes entries the session is due."""
        return session_id in self._reacting

    async def published(self, entry: EntryBody, changes: list[RunRecord]) -> None:
        """After this node stored an entry: pass the Runs it made pending to a worker.

        Only the node that stored the entry does this, so a Run goes out once.
        """
        self.metrics.published.inc()
        for record in changes:
            if record.terminal:  # counted here: only the node that stored the end does this
                code = (record.error or {}).get("code", "") if record.status == "error" else ""
                self.metrics.runs_ended.labels(record.status, str(code)).inc()
                duration = max(0, record.updated_ts - record.created_ts) / 1000
                self.metrics.run_duration.observe(duration)
            if record.status == "pending" and (
                (isinstance(entry, MessageEntry) and entry.intent == "prompt")
                or (isinstance(entry, RunEntry) and entry.status == "pending")
            ):
                await self.dispatcher.run_created(record)

    def committed(self, channel: Channel, entry: EntryBody, changes: list[RunRecord]) -> None:
        """React to an entry this node took in, whichever node published it."""
        self.metrics.delivered.inc(len(channel.subscribers))
        freed = False
        for record in changes:
            self.dispatcher.run_changed(record)
            self.deadlines.follow(record)
            freed = freed or record.terminal or record.status == "suspended"
        if freed and self.slots.limit is not None:
            self.give_turns(channel)
        elif changes:
            self.react_soon(channel)

    def give_turns(self, channel: Channel | None = None) -> None:
        """A slot came free: sessions with Runs waiting for one take their turns oldest
        first, one after the other, each waiting for its channel's lock. So a younger Run
        in another session cannot take the slot first. ``channel``: the session whose
        entry freed it, which reacts to that entry too."""
        waiting = self.channels.waiting_for_a_slot()
        if channel is not None and channel not in waiting:
            waiting.append(channel)
        if not waiting:
            return
        waiting.sort(key=oldest_waiting)
        self._spawn(self.react_in_turn(waiting))

    def slot_given_back(self, entry: EntryBody) -> None:
        """A publish failed: the slot its plan may have held for a Run is free again.

        That is a prompt, or an owner's resume, the store refused. No entry frees the
        slot, so the Runs waiting for one are told here. Otherwise a resume due meanwhile
        would wait for the next Run to end.
        """
        takes_slot = isinstance(entry, RunEntry) or (
            isinstance(entry, MessageEntry) and entry.intent == "prompt"
        )
        if takes_slot and self.slots.limit is not None and self.slots.free():
            self.give_turns()

    async def react_in_turn(self, channels: list[Channel]) -> None:
        """React to each of ``channels`` in turn."""
        for channel in channels:
            session_id = channel.session_id
            if session_id in self._reacting:
                self._again.add(session_id)
                continue
            self._reacting.add(session_id)
            await self._react(channel)

    def react_soon(self, channel: Channel) -> None:
        """Publish what ``channel`` is due, once the current publish let go of it."""
        session_id = channel.session_id
        if session_id in self._reacting:
            self._again.add(session_id)
            return
        self._reacting.add(session_id)
        self._spawn(self._react(channel))

    async def _react(self, channel: Channel) -> None:
        """The one place the relay publishes entries because of others.

        An entry the rules refuse is no longer due and is dropped. One the store did not
        take is still due: the channel stays loaded and the round is tried again. The
        wait backs off from ``REACT_RETRY`` to ``REACT_RETRY_MAX`` seconds, until the store
        takes it or the rules say it is no longer due.
        """
        session_id = channel.session_id
        delay = REACT_RETRY
        rounds = 0
        try:
            while rounds < 1000:
                self._again.discard(session_id)
                due = False
                for entry, sender in channel.registry.due():
                    try:
                        _, duplicate, changes = await channel.publish(entry, sender, now_ms())
                        if not duplicate:
                            await self.published(entry, changes)
                    except RunwireError as exc:
                        due = due or exc.code in STORE_FAILURES
                        log.debug("relay entry %s not published: %s", entry.id, exc)
                if due and not channel.reset and self.channels.loaded.get(session_id) is channel:
                    log.info(
                        "relay entries of %s still due; trying again in %.1fs", session_id, delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, REACT_RETRY_MAX)
                    continue
                rounds += 1
                if session_id not in self._again:
                    return
        except Exception:
            log.exception("publishing the relay's entries for %s failed", session_id)
        finally:
            self._reacting.discard(session_id)
            self.channels.release(channel)
