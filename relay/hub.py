"""``Hub``: the relay's frame router over channels, the store and the dispatcher.

One ``Hub`` per server. ``handle(peer, raw)`` decodes a frame and answers it;
bad frames get an ``error`` frame with a stable code and change nothing.
Publishes run as tasks (at most ``max_inflight`` per connection), so a worker
streaming into many sessions is not held up by one session's store write;
channel locks are FIFO, so one connection's publishes to a channel keep their
order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from transport import codec
from transport.errors import (
    AGENT_LOST,
    INTERNAL_ERROR,
    NOT_ATTACHED,
    PROTOCOL_ERROR,
    RATE_LIMITED,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import (
    Ack,
    Attach,
    ClientFrame,
    Detach,
    EntryBody,
    ErrorBody,
    Hello,
    History,
    MessageEntry,
    Publish,
    RunEntry,
    Worker,
)
from transport.messages import new_id
from transport.runs import RunRecord, RunRegistry, Sender

from .channel import Channel
from .dispatch import Dispatcher
from .metrics import Metrics
from .options import RelayOptions
from .peer import Peer
from .store.base import Store

__all__ = ["Hub"]

log = logging.getLogger("runwire.relay")


def now_ms() -> int:
    """Wall-clock milliseconds, for entry timestamps."""
    return int(time.time() * 1000)


class Hub:
    """Routes frames of every connection of one relay."""

    def __init__(self, store: Store, options: RelayOptions, metrics: Metrics) -> None:
        self.store = store
        self.options = options
        self.metrics = metrics
        self.channels: dict[str, Channel] = {}
        self._loading: dict[str, asyncio.Future[Channel]] = {}
        self.peers: set[Peer] = set()
        self.dispatcher = Dispatcher(
            grace=options.agent_grace, expire=self._agent_lost, metrics=metrics
        )
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Time the Runs that were active when the relay last stopped."""
        for record in await self.store.runs_with_status(["active"]):
            self.dispatcher.start_timer(record)

    def close(self) -> None:
        """Stop timers and background tasks."""
        self.dispatcher.close()
        for task in self._tasks:
            task.cancel()

    # --------------------------------------------------------- connections --

    def hello(self, peer: Peer, frame: Hello) -> None:
        """Stamp the connection's identity; a returning client id stops its grace timers."""
        client_id = frame.client_id or peer.connection_id
        peer.sender = Sender(client_id=client_id, user_id=peer.sender.user_id, role=frame.role)
        self.peers.add(peer)
        self.dispatcher.client_back(client_id)

    def gone(self, peer: Peer) -> None:
        """Forget a closed connection."""
        self.peers.discard(peer)
        owned: list[RunRecord] = []
        client_id = peer.sender.client_id
        still_here = any(p.sender.client_id == client_id for p in self.peers)
        for session_id in list(peer.attached):
            channel = self.channels.get(session_id)
            if channel is None:
                continue
            channel.detach(peer)
            if not still_here and peer.sender.role == "agent":
                owned.extend(
                    r
                    for r in channel.registry.active()
                    if r.owner == client_id and r.status == "active"
                )
        self.dispatcher.peer_gone(peer, owned)

    # -------------------------------------------------------------- frames --

    async def handle(self, peer: Peer, raw: str | bytes) -> None:
        """Answer one frame (never raises for bad input)."""
        self.metrics.frames_in.inc()
        try:
            frame = codec.decode_client_frame(raw, max_bytes=self.options.max_frame_bytes)
        except RunwireError as exc:
            peer.send_error(exc, codec.request_id(raw))
            return
        try:
            await self._route(peer, frame)
        except RunwireError as exc:
            peer.send_error(exc, getattr(frame, "req", None))
        except Exception:
            log.exception("frame %s failed", frame.type)
            peer.send_error(
                RunwireError(INTERNAL_ERROR, "the relay failed on this request"),
                getattr(frame, "req", None),
            )

    async def _route(self, peer: Peer, frame: ClientFrame) -> None:
        if isinstance(frame, Publish):
            if peer.inflight >= self.options.max_inflight:
                raise RunwireError(RATE_LIMITED, "too many publishes waiting on this connection")
            peer.inflight += 1
            task = asyncio.get_running_loop().create_task(self._publish(peer, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(frame, Attach):
            channel = await self.channel(frame.session_id)
            await channel.attach(
                peer,
                frame.req,
                from_serial=frame.from_serial,
                epoch=frame.epoch,
                limit=min(frame.limit, self.options.history_page_max),
                backlog_max=self.options.backlog_max,
            )
        elif isinstance(frame, Detach):
            channel = self._attached(peer, frame.session_id)
            channel.detach(peer)
            peer.send_frame(codec.encode(Ack(req=frame.req)))
        elif isinstance(frame, History):
            channel = self._attached(peer, frame.session_id)
            entries, has_older = await channel.history(
                frame.before, min(frame.limit, self.options.history_page_max)
            )
            peer.send_frame(
                b'{"type":"page","req":'
                + codec.dumps(frame.req)
                + b',"session_id":'
                + codec.dumps(frame.session_id)
                + (b',"has_older":true' if has_older else b',"has_older":false')
                + b',"entries":['
                + b",".join(e.data for e in entries)
                + b"]}"
            )
        elif isinstance(frame, Worker):
            if peer.sender.role != "agent":
                raise RunwireError(VALIDATION_ERROR, "only agent connections register as workers")
            pending = await self.store.runs_with_status(["pending"], agent=frame.agent)
            peer.send_frame(codec.encode(Ack(req=frame.req)))
            self.dispatcher.add_worker(peer, frame.agent, pending)
        elif isinstance(frame, Hello):
            raise RunwireError(PROTOCOL_ERROR, "hello was already received")

    async def _publish(self, peer: Peer, frame: Publish) -> None:
        try:
            channel = self._attached(peer, frame.session_id)
            serial, duplicate = await channel.publish(frame.entry, peer.sender, now_ms())
            if duplicate:
                self.metrics.duplicates.inc()
            peer.send_frame(codec.encode(Ack(req=frame.req, serial=serial, duplicate=duplicate)))
        except RunwireError as exc:
            peer.send_error(exc, frame.req)
        except Exception:
            log.exception("publish failed")
            peer.send_error(
                RunwireError(INTERNAL_ERROR, "the relay failed on this publish"), frame.req
            )
        finally:
            peer.inflight -= 1

    def _attached(self, peer: Peer, session_id: str) -> Channel:
        channel = self.channels.get(session_id)
        if channel is None or session_id not in peer.attached:
            raise RunwireError(
                NOT_ATTACHED, f"attach to {session_id!r} first", details={"session_id": session_id}
            )
        return channel

    # ------------------------------------------------------------ channels --

    async def channel(self, session_id: str) -> Channel:
        """The loaded channel of a session (loading it once, however many ask at once)."""
        channel = self.channels.get(session_id)
        if channel is not None:
            return channel
        loading = self._loading.get(session_id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[Channel] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            info = await self.store.open_channel(session_id)
            registry = RunRegistry(session_id, await self.store.runs(session_id))
            channel = Channel(
                self.store, info, registry, self._committed, self.options.input_checks
            )
            self.channels[session_id] = channel
            self.metrics.channels.set(len(self.channels))
            future.set_result(channel)
            return channel
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            del self._loading[session_id]

    def _committed(self, channel: Channel, entry: EntryBody, changes: list[RunRecord]) -> None:
        self.metrics.published.inc()
        self.metrics.delivered.inc(len(channel.subscribers))
        for record in changes:
            new = isinstance(entry, MessageEntry) and entry.intent == "prompt"
            handed_back = isinstance(entry, RunEntry) and entry.status == "pending"
            self.dispatcher.run_changed(record, new=new or handed_back)

    async def _agent_lost(self, session_id: str, run_id: str) -> None:
        """End a Run whose agent did not come back within the grace period.

        A durable Run is not ended: it goes back to ``pending`` and the
        dispatcher hands it to another worker, which adopts it.
        """
        try:
            channel = await self.channel(session_id)
            record = channel.registry.get(run_id)
            if record is None or record.status != "active":
                return
            if any(p.sender.client_id == record.owner for p in self.peers):
                return
            entry = RunEntry(
                id=f"relay-{new_id()}",
                run_id=run_id,
                status="error",
                error=ErrorBody(
                    code=AGENT_LOST,
                    message="the agent went away and did not come back in time",
                    details={"grace_seconds": self.options.agent_grace},
                ),
            )
            if record.durable:
                entry = RunEntry(id=f"relay-{new_id()}", run_id=run_id, status="pending")
            await channel.publish(entry, Sender(client_id="relay", role="relay"), now_ms())
            if not record.durable:
                self.metrics.agent_lost.inc()
        except RunwireError as exc:
            log.warning("could not end run %s/%s: %s", session_id, run_id, exc)

    def stats(self) -> dict[str, Any]:
        """Numbers for ``/healthz``."""
        return {
            "connections": len(self.peers),
            "channels": len(self.channels),
            "workers": sum(len(w) for w in self.dispatcher.workers.values()),
        }
