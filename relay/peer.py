"""``Peer``: one WebSocket connection on the relay and its bounded send queue.

Frames for a peer are queued, never awaited by whoever produces them, so one
slow reader cannot slow a channel down. A drain task sends the queue in order,
folding consecutive entries of one session into one ``deliver`` frame. When
unsent bytes exceed ``send_queue_bytes`` the peer is closed with
``SLOW_CONSUMER`` (4008); its client resumes from the last serial it saw.
The queue and its drain task exist only while something is queued, so an idle
peer costs neither a task nor an empty ``deque`` (about 760 bytes).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from transport import codec
from transport.errors import CloseCode, RunwireError
from transport.runs import Sender

from .wsconn import send_frames

if TYPE_CHECKING:
    from .auth import Identity
    from .metrics import Metrics

__all__ = ["Peer"]

log = logging.getLogger("runwire.relay")

_WRITE_BYTES = 256 * 1024
"""Frames queued together are written at once up to about this many bytes."""


class Peer:
    """The relay's side of one connection."""

    __slots__ = (
        "_drain",
        "_queue",
        "_queued_bytes",
        "agent",
        "attached",
        "closed",
        "connection_id",
        "identity",
        "inflight",
        "limit",
        "metrics",
        "sender",
        "senders",
        "ws",
    )

    def __init__(
        self, ws: ServerConnection, connection_id: str, limit: int, metrics: Metrics
    ) -> None:
        self.ws = ws
        self.connection_id = connection_id
        self.limit = limit
        self.metrics = metrics
        self.sender = Sender(client_id=connection_id)
        self.identity: Identity | None = None
        """The verified token; ``None`` on an anonymous relay (every right)."""
        self.senders: dict[str, Sender] | None = None
        """Per-session copies of ``sender`` with the token's capabilities (made when first
        asked for; an anonymous connection needs none)."""
        self.agent: str | None = None
        self.attached: set[str] = set()
        self.inflight = 0
        self.closed = False
        # Items: (session_id, entry bytes) for entries, (None, frame bytes) for frames;
        # None while nothing is queued.
        self._queue: deque[tuple[str | None, bytes]] | None = None
        self._queued_bytes = 0
        self._drain: asyncio.Task[None] | None = None

    def stamp(self, sender: Sender) -> None:
        """Set the connection's identity (at ``hello``), forgetting the per-session copies."""
        self.sender = sender
        self.senders = None

    def sender_for(self, session_id: str) -> Sender:
        """The connection's identity with its capabilities in ``session_id``."""
        if self.identity is None:
            return self.sender  # anonymous: every right everywhere, no copy needed
        if self.senders is None:
            self.senders = {}
        sender = self.senders.get(session_id)
        if sender is None:
            caps = self.identity.caps(session_id)
            sender = Sender(
                client_id=self.sender.client_id,
                user_id=self.sender.user_id,
                role=self.sender.role,
                caps=caps,
            )
            if len(self.senders) >= 1024:
                self.senders.clear()
            self.senders[session_id] = sender
        return sender

    def can(self, session_id: str, capability: str) -> bool:
        """True if the connection holds ``capability`` in ``session_id``."""
        return self.sender_for(session_id).can(capability)

    def send_frame(self, frame: bytes) -> None:
        """Queue a whole frame."""
        self._put(None, frame)

    def send_entry(self, session_id: str, entry: bytes) -> None:
        """Queue one entry of an attached session (sent inside a ``deliver`` frame)."""
        self._put(session_id, entry)

    def send_error(self, error: RunwireError, req: int | str | None = None) -> None:
        """Queue an ``error`` frame."""
        self.metrics.errors.labels(error.code).inc()
        frame: dict[str, object] = {"type": "error", "error": error.to_wire()}
        if req is not None:
            frame["req"] = req
        self._put(None, codec.dumps(frame))

    def _put(self, session_id: str | None, data: bytes) -> None:
        if self.closed:
            return
        if self._queue is None:
            self._queue = deque()
        self._queue.append((session_id, data))
        self._queued_bytes += len(data)
        if self._queued_bytes > self.limit:
            self.metrics.slow_consumers.inc()
            self.close(CloseCode.SLOW_CONSUMER, "SLOW_CONSUMER: send queue full, resume")
            return
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_task(self._run_drain())

    async def flushed(self) -> None:
        """Wait until everything queued so far was handed to the socket."""
        while self._drain is not None:
            await asyncio.shield(self._drain)

    def close(self, code: int, reason: str) -> None:
        """Close the connection (asynchronously) and drop what is queued."""
        if self.closed:
            return
        self.closed = True
        self._queue = None
        self._queued_bytes = 0
        if self._drain is not None:
            # A send stuck on a full socket buffer would hold up the close frame.
            self._drain.cancel()
        asyncio.get_running_loop().create_task(self.ws.close(code, reason[:120]))

    async def _run_drain(self) -> None:
        try:
            # Let what is already scheduled run first: a publisher's ack is queued right
            # after the deliver of its own entry, and both then leave in one write.
            await asyncio.sleep(0)
            while self._queue and not self.closed:
                # Everything queued now goes out in one write (see relay.wsconn).
                frames = [self._next_frame(self._queue)]
                size = len(frames[0])
                while self._queue and size < _WRITE_BYTES:
                    frames.append(self._next_frame(self._queue))
                    size += len(frames[-1])
                await send_frames(self.ws, frames)
                self.metrics.frames_out.inc(len(frames))
        except ConnectionClosed:
            self.closed = True
        except Exception:  # never let a send problem escape unseen
            log.exception("send to %s failed", self.connection_id)
            self.closed = True
        finally:
            self._drain = None
            if not self._queue:
                self._queue = None  # drained: an idle peer holds no queue

    def _next_frame(self, queue: deque[tuple[str | None, bytes]]) -> bytes:
        session_id, data = queue.popleft()
        self._queued_bytes -= len(data)
        if session_id is None:
            return data
        entries = [data]
        size = len(data)
        # Fold following entries of the same session into one deliver frame.
        while queue and queue[0][0] == session_id and size < 256 * 1024:
            _, more = queue.popleft()
            self._queued_bytes -= len(more)
            size += len(more)
            entries.append(more)
        return codec.deliver_frame(session_id, entries)
