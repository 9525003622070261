"""``Liveness``: agents that went away and Runs that ran past their deadline.

An agent connection makes its client id present. While one is present, its active
Runs go on. When the last one goes, the dispatcher times the grace period
(``agent_grace``). A Run whose agent did not come back in time ends ``error`` with
``AGENT_LOST``. A durable Run goes back to ``pending`` instead, and another worker
adopts it.

Only agent connections count, and only in sessions where their token grants
``agent``. A client of the same user that claims the agent's client id does not keep
the agent's Runs going.

A Run past its deadline ends ``cancelled`` with ``RUN_TIMEOUT``. The Run rules check
the deadline again when that end is stored.

See docs/explanation/runs.md ("A Run never hangs") for the guarantees.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from transport import logcontext
from transport._policy import RELAY
from transport._runs import AGENT, RunRecord, relay_entry_id, timeout_entry
from transport.errors import AGENT_LOST, CONFLICT, RunwireError
from transport.frames import EntryBody, ErrorBody, RunEntry
from transport.messages import new_id

from ._channel import Channel
from ._deadlines import Deadlines
from ._dispatch import Dispatcher
from ._metrics import Metrics
from ._peer import Peer
from ._reactions import REACT_RETRY_MAX, STORE_FAILURES, now_ms
from .store._base import Gone, Store

if TYPE_CHECKING:
    from ._cluster import RedisDispatcher
    from ._cluster_shards import ShardedDispatcher

__all__ = ["LOST_LOG_EVERY", "LOST_LOG_KEEP", "Liveness"]

log = logging.getLogger("runwire.relay")

LOST_LOG_EVERY = 60.0
"""Seconds between two warnings that one Run's AGENT_LOST end (or hand-over) failed."""
LOST_LOG_KEEP = 10_000
"""How many Runs' failed ends are remembered for that before the old ones are forgotten."""

Hold = Callable[[str], AbstractAsyncContextManager[Channel]]
"""Keeps a session's channel loaded for a block (``Channels.hold``)."""
Published = Callable[[EntryBody, list[RunRecord]], Coroutine[Any, Any, None]]
"""What follows an entry this node stored (``Reactions.published``)."""


class Liveness:
    """The agent connections present on this node, and the ends of lost or late Runs."""

    def __init__(
        self,
        store: Store,
        dispatcher: Dispatcher | RedisDispatcher | ShardedDispatcher,
        *,
        hold: Hold,
        published: Published,
        deadlines: Deadlines,
        metrics: Metrics,
        agent_grace: float,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self._hold = hold
        self._published = published
        self.deadlines = deadlines
        self.metrics = metrics
        self.agent_grace = agent_grace
        self.present: dict[str, set[Peer]] = {}
        """Client id -> its agent connections on this node."""
        self._lost_failures: dict[tuple[str, str], tuple[float, int]] = {}
        """Runs whose AGENT_LOST end failed: when it was last logged, how many since."""

    def arrived(self, peer: Peer) -> None:
        """An agent connection said hello: its client id is present."""
        self.present.setdefault(peer.sender.client_id, set()).add(peer)
        self.dispatcher.client_back(peer.sender.client_id, scope=peer.agent_scope())

    def left(self, peer: Peer) -> bool:
        """An agent connection closed. True if no connection left vouches for every
        session this one did: its Runs elsewhere must be timed (``owner_left``)."""
        client_id = peer.sender.client_id
        others = self.present.get(client_id)
        if others is not None:
            others.discard(peer)
            if not others:
                del self.present[client_id]
        return client_id not in self.present or any(
            _grants(p) != _grants(peer) for p in self.present[client_id]
        )

    def vouched(self, client_id: str, session_id: str) -> bool:
        """True if an agent connection of ``client_id`` may act as one in ``session_id``:
        the owner of a Run there is present, and the Run does not end ``AGENT_LOST``."""
        return any(p.can(session_id, AGENT) for p in self.present.get(client_id, ()))

    async def owner_left(self, client_id: str) -> None:
        """Time every active Run of an agent that has no connection left."""
        try:
            active = await self.store.runs_with_status(["active"])
        except RunwireError as exc:
            log.warning("cannot look up the Runs of %r, gone: %s", client_id, exc)
            return
        for record in active:
            if record.owner == client_id and not self.vouched(client_id, record.session_id):
                self.dispatcher.start_timer(record)  # not if it came back meanwhile

    async def agent_lost(self, session_id: str, run_id: str) -> None:
        """End a Run whose agent did not come back within the grace period.

        A durable Run is not ended: it goes back to ``pending`` and the dispatcher passes
        it to another worker, which adopts it. The session is held only for this: a node
        that sweeps (on Redis, any node) does not keep a session none of its clients watch.
        """
        key = (session_id, run_id)
        try:
            async with self._hold(session_id) as channel:
                with logcontext.bind(session_id=session_id, run_id=run_id):
                    await self._end_lost(channel, run_id)
        except RunwireError as exc:
            self._log_failure(key, exc)
        else:
            self._lost_failures.pop(key, None)

    def _log_failure(self, key: tuple[str, str], exc: RunwireError) -> None:
        """The sweep on Redis tries again every heartbeat while an end fails: one warning
        per Run per ``LOST_LOG_EVERY`` seconds, with how many were not logged."""
        now = time.monotonic()
        last, missed = self._lost_failures.get(key, (None, 0))
        if last is not None and now - last < LOST_LOG_EVERY:
            self._lost_failures[key] = (last, missed + 1)
            return
        if len(self._lost_failures) >= LOST_LOG_KEEP:
            self._lost_failures = {
                k: v for k, v in self._lost_failures.items() if now - v[0] < LOST_LOG_EVERY
            }
            if len(self._lost_failures) >= LOST_LOG_KEEP:
                self._lost_failures.clear()
        self._lost_failures[key] = (now, 0)
        more = f" ({missed} more failures since the last warning)" if missed else ""
        log.warning("could not end run %s/%s: %s%s", key[0], key[1], exc, more)

    async def _end_lost(self, channel: Channel, run_id: str) -> None:
        """End an active Run whose owner is not connected here, or pass it to another
        worker if durable, if the store still finds the owner gone when the end's turn comes.

        The sweep that found the owner gone and this end are apart: a session to load, a
        lock to wait for. An agent that came back meanwhile through another node is marked
        present in the store. The store then stores nothing (``Gone``), in the same step
        that would store the end, and the Run goes on.
        """
        record = channel.registry.get(run_id)
        if record is None or record.status != "active" or record.owner is None:
            return
        if self.vouched(record.owner, channel.session_id):
            return
        gone = Gone(record.owner, self.agent_grace)
        try:
            if record.durable:
                await self._pass_on(channel, record, gone)
            else:
                await self._lose(channel, record, gone)
        except RunwireError as exc:
            if exc.code != CONFLICT or "present" not in exc.details:
                raise
            log.info(
                "run %s/%s goes on: its agent %r came back",
                channel.session_id,
                run_id,
                record.owner,
            )

    async def _pass_on(self, channel: Channel, record: RunRecord, gone: Gone) -> None:
        """Put a durable Run back to ``pending``, not ended: another worker adopts it. The
        entry's id is the same on every node, so a second sweep of the same loss is a
        duplicate."""
        entry = RunEntry(
            id=relay_entry_id(record.run_id, "adopt", str(record.adoptions + 1)),
            run_id=record.run_id,
            status="pending",
        )
        _, duplicate, changes = await channel.publish(entry, RELAY, now_ms(), gone=gone)
        if not duplicate:
            await self._published(entry, changes)

    async def _lose(self, channel: Channel, record: RunRecord, gone: Gone) -> None:
        """End a Run ``error`` / ``AGENT_LOST``."""
        lost = RunEntry(
            id=f"relay-{new_id()}",
            run_id=record.run_id,
            status="error",
            error=ErrorBody(
                code=AGENT_LOST,
                message="the agent went away and did not come back in time",
                details={"grace_seconds": self.agent_grace},
            ),
        )
        await channel.publish(lost, RELAY, now_ms(), gone=gone)
        self.metrics.agent_lost.inc()

    async def time_out(self, session_id: str, run_id: str) -> None:
        """End an active Run whose deadline passed: ``cancelled``, ``RUN_TIMEOUT``.

        The rules check the deadline again when the end is stored: a Run that was paused
        or ended meanwhile is left as it is. An end the store did not take is tried again
        in ``REACT_RETRY_MAX`` seconds.
        """
        deadline = 0
        try:
            async with self._hold(session_id) as channel:
                record = channel.registry.get(run_id)
                if record is None or record.status != "active" or record.deadline_ms is None:
                    return
                deadline = record.deadline_ms
                early = (deadline - now_ms()) / 1000
                if early > 0:  # the loop's clock ran ahead of the wall clock
                    await asyncio.sleep(early)
                entry = timeout_entry(record)
                _, duplicate, _ = await channel.publish(entry, RELAY, max(now_ms(), deadline))
                if not duplicate:
                    self.metrics.run_timeouts.inc()
        except RunwireError as exc:
            if exc.code in STORE_FAILURES and deadline:
                self.deadlines.again(session_id, run_id, deadline, REACT_RETRY_MAX)
            log.warning("could not end run %s/%s at its deadline: %s", session_id, run_id, exc)


def _grants(peer: Peer) -> object:
    """What a connection's token grants (``None``: everything, on an anonymous relay)."""
    return None if peer.identity is None else peer.identity.grants
