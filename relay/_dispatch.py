"""``Dispatcher``: which worker runs which Run, and what happens when one goes away.

This is the dispatcher of a single relay. On Redis, ``relay._cluster.RedisDispatcher``
takes its place with the same methods.

A new Run goes to a connected worker of its agent name that has the ``agent`` right in
its session: the one with the fewest Runs sent to it and not yet started. A new Run is
one whose prompt was stored with status ``pending``, or a queued Run whose turn came.
With no worker connected, the Run waits in the store for the first worker of that name.

A worker that disconnects before it starts a Run sent to it loses that Run: the Run
goes to another worker, or waits for one.

An agent connection that disconnects leaves its active Runs ``agent_grace`` seconds.
If a connection with the same client id comes back in time, the Runs go on. Otherwise
the relay ends each ``error`` with ``AGENT_LOST``, so every device stops streaming and
every steering outcome resolves. A durable Run goes back to ``pending`` instead and is
sent out again, ``adopted`` and with its last checkpoint. A relay that restarts treats
the active Runs it finds in the store the same way.

See docs/explanation/runs.md ("A Run never hangs").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from transport import _codec as codec
from transport._runs import AGENT, RunRecord
from transport.frames import Dispatch

from ._metrics import Metrics
from ._peer import Peer, in_scope

__all__ = ["Dispatcher", "Expire", "RunKey", "discharge", "enlist", "hand_to_worker"]

log = logging.getLogger("runwire.relay")

RunKey = tuple[str, str]
"""A Run by (session id, run id)."""
Expire = Callable[[str, str], Coroutine[Any, Any, None]]
"""Ends a Run whose agent did not come back in time (``Hub.agent_lost``)."""


class Dispatcher:
    """Workers by agent name, Runs handed out, and grace timers."""

    needs_pending = True
    """``add_worker`` wants the stored Runs waiting for a worker (read from the store)."""

    def __init__(self, *, grace: float, expire: Expire, metrics: Metrics) -> None:
        self.grace = grace
        self.metrics = metrics
        self._expire = expire
        self.workers: dict[str, list[Peer]] = {}
        self.assigned: dict[RunKey, Peer] = {}
        self.waiting: dict[RunKey, RunRecord] = {}
        self.timers: dict[RunKey, tuple[str, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ workers --

    def add_worker(self, peer: Peer, agent: str, pending: list[RunRecord]) -> None:
        """Register ``peer`` for ``agent`` and share out the waiting Runs no live worker holds."""
        enlist(self.workers, peer, agent, self.metrics)
        for record in pending:
            key = (record.session_id, record.run_id)
            if key not in self.assigned or self.assigned[key].closed:
                self.waiting[key] = record
        for key, record in list(self.waiting.items()):
            holder = self.assigned.get(key)
            # A Run a live worker holds (handed to it, not started yet) stays with it.
            if record.agent == agent and (holder is None or holder.closed):
                self._hand_out(record)

    def peer_gone(self, peer: Peer, owned_active: list[RunRecord]) -> None:
        """React to a closed connection: re-dispatch its unstarted Runs, time its active ones."""
        for key in discharge(self.workers, self.assigned, peer, self.metrics):
            record = self.waiting.get(key)
            if record is not None:
                self._hand_out(record)
        for record in owned_active:
            self.start_timer(record)

    def client_back(self, client_id: str, *, scope: tuple[str, ...] | None = None) -> None:
        """An agent connection with ``client_id`` arrived: the grace timers of its Runs in
        the sessions it may act as an agent in stop: those ``scope`` matches
        (``Peer.agent_scope``: the patterns its token grants ``agent`` in; None, every
        session)."""
        for key, (owner, handle) in list(self.timers.items()):
            if owner == client_id and in_scope(scope, key[0]):
                handle.cancel()
                del self.timers[key]

    # --------------------------------------------------------------- runs --

    async def run_created(self, record: RunRecord) -> None:
        """A new Run was stored by this node: hand it to a worker (or keep it waiting)."""
        key = (record.session_id, record.run_id)
        self.waiting[key] = record
        self._hand_out(record)

    def run_changed(self, record: RunRecord) -> None:
        """Follow a Run record an entry changed (on any node)."""
        key = (record.session_id, record.run_id)
        if record.status != "pending":
            self.waiting.pop(key, None)
            self.assigned.pop(key, None)
        if record.terminal:
            timer = self.timers.pop(key, None)
            if timer is not None:
                timer[1].cancel()

    def start_timer(self, record: RunRecord) -> None:
        """Give an owner-less active Run ``grace`` seconds before it ends ``AGENT_LOST``."""
        key = (record.session_id, record.run_id)
        if key in self.timers or record.owner is None:
            return
        loop = asyncio.get_running_loop()
        handle = loop.call_later(self.grace, self._fire, key)
        self.timers[key] = (record.owner, handle)

    def _fire(self, key: RunKey) -> None:
        self.timers.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._expire(*key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _hand_out(self, record: RunRecord) -> None:
        hand_to_worker(self.workers.get(record.agent, []), self.assigned, record, self.metrics)

    def close(self) -> None:
        """Cancel every timer."""
        for _, handle in self.timers.values():
            handle.cancel()
        self.timers.clear()


def enlist(workers: dict[str, list[Peer]], peer: Peer, agent: str, metrics: Metrics) -> None:
    """Count ``peer`` among the workers of ``agent`` (once, however often it asks)."""
    peer.agent = agent
    mine = workers.setdefault(agent, [])
    if peer not in mine:
        mine.append(peer)
        metrics.workers.inc()


def discharge(
    workers: dict[str, list[Peer]], assigned: dict[RunKey, Peer], peer: Peer, metrics: Metrics
) -> list[RunKey]:
    """Take ``peer`` off the workers of every agent name it served; a connection may
    serve several. Returns the Runs sent to it, now unassigned.

    A name with no worker left is forgotten. Agent names come and go, and a relay that
    kept an empty list for each would grow with every name it ever served.
    """
    if peer.agent is not None:
        for agent, mine in list(workers.items()):
            if peer in mine:
                mine.remove(peer)
                metrics.workers.dec()
                if not mine:
                    del workers[agent]
    keys = [key for key, holder in assigned.items() if holder is peer]
    for key in keys:
        del assigned[key]
    return keys


def hand_to_worker(
    workers: list[Peer], assigned: dict[RunKey, Peer], record: RunRecord, metrics: Metrics
) -> Peer | None:
    """Send ``record``'s Run to the least loaded of ``workers`` allowed to take it.

    A worker may take Runs of sessions its token gives it ``agent`` on. A Run
    the relay handed back (its agent went away) goes out ``adopted`` with its
    last checkpoint. Records the choice in ``assigned`` and returns the
    worker, or None when none can.
    """
    eligible = [w for w in workers if not w.closed and w.can(record.session_id, AGENT)]
    if not eligible:
        return None
    load: dict[int, int] = {}
    for holder in assigned.values():
        load[id(holder)] = load.get(id(holder), 0) + 1
    worker = min(eligible, key=lambda w: load.get(id(w), 0))
    assigned[(record.session_id, record.run_id)] = worker
    metrics.dispatched.inc()
    worker.send_frame(
        codec.encode(
            Dispatch(
                session_id=record.session_id,
                run_id=record.run_id,
                agent=record.agent,
                message_id=record.prompt_id,
                adopted=True if record.adoptions else None,
                checkpoint=_checkpoint(record),
            )
        )
    )
    return worker


def _checkpoint(record: RunRecord) -> dict[str, Any] | None:
    """The Run's last checkpoint, with what it paused on (``pause``) once it paused."""
    if record.pause is None:
        return record.checkpoint
    return {**(record.checkpoint or {}), "pause": record.pause.to_dict()}
