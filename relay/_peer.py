"""``Peer``: one WebSocket connection on the relay and its bounded send queue.

Frames for a peer are queued, never awaited by whoever produces them, so one
slow reader cannot slow a channel down. The queue goes out in order, with
consecutive entries of one session folded into one ``deliver`` frame.

Writing: a peer with something queued asks the server's ``Flusher``. The flusher
writes every such peer's queue once per turn of the event loop, at the end of the turn
after the one that queued. So a publisher's ``ack``, queued a moment after the
``deliver`` of its own entry, leaves with it. Each peer gets one synchronous write
(``relay._wsconn``), with no task and no await per frame.

Only when the socket's buffer is full, or the connection is closing, does a drain task
take over and wait. When unsent bytes exceed ``send_queue_bytes`` the peer is closed
with ``SLOW_CONSUMER`` (4008), and its client resumes from the last serial it saw. The
queue exists only while something is queued, so an idle peer costs no empty ``deque``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from transport import _codec as codec
from transport._holds import AdmissionHold
from transport._runs import AGENT, Sender
from transport.errors import CloseCode, RunwireError

from ._wsconn import send_frames
from .auth import matches

if TYPE_CHECKING:
    from ._metrics import Metrics
    from .auth import Identity

__all__ = ["Flusher", "Peer", "in_scope"]

log = logging.getLogger("runwire.relay")

_APPEND_KIND = b'"kind":"response_append"'
"""How a streamed append's entry starts (its kind comes first: ``codec.dumps``)."""

_WRITE_BYTES = 256 * 1024
"""Frames queued together are written at once up to about this many bytes."""


class Flusher:
    """Writes the queues of the peers that asked, once per turn of the event loop.

    ``rollup_window`` (seconds): how long a peer whose queue holds only streamed appends
    (``response_append`` entries) waits before it asks (``Peer._put``).
    """

    __slots__ = ("_armed", "_dirty", "rollup_window")

    def __init__(self, rollup_window: float = 0.0) -> None:
        self._dirty: list[Peer] = []
        self._armed = False
        self.rollup_window = rollup_window

    def mark(self, peer: Peer) -> None:
        """Have ``peer``'s queue written at the end of the loop's next turn."""
        self._dirty.append(peer)
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._defer)

    def _defer(self) -> None:
        # What the turn that queued has scheduled (a publisher's ack) runs first.
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._armed = False
        dirty, self._dirty = self._dirty, []
        for peer in dirty:
            peer.write_queued()


class Peer:
    """The relay's side of one connection."""

    __slots__ = (
        "_drain",
        "_flusher",
        "_marked",
        "_queue",
        "_queued_bytes",
        "_rollup",
        "admission",
        "agent",
        "attached",
        "closed",
        "connection_id",
        "identity",
        "limit",
        "metrics",
        "sender",
        "senders",
        "ws",
    )

    def __init__(
        self,
        ws: ServerConnection,
        connection_id: str,
        limit: int,
        metrics: Metrics,
        flusher: Flusher,
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
        self.admission = AdmissionHold(time.monotonic)
        """The connection's running publishes and what its later publishes wait behind."""
        self.closed = False
        # Items: (session_id, entry bytes) for entries, (None, frame bytes) for frames;
        # None while nothing is queued.
        self._queue: deque[tuple[str | None, bytes]] | None = None
        self._queued_bytes = 0
        self._drain: asyncio.Task[None] | None = None
        self._flusher = flusher
        self._marked = False
        self._rollup: asyncio.TimerHandle | None = None  # holds streamed appends back

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

    def is_agent(self) -> bool:
        """True for an agent connection with the right to be one: ``role: "agent"`` and a
        token that grants ``agent`` somewhere (any, on an anonymous relay). Only these make
        their client id present, the presence that keeps an agent's Runs from ending
        ``AGENT_LOST``: a client of the same user claiming that client id does not."""
        if self.sender.role != "agent":
            return False
        return self.identity is None or self.identity.grants_anywhere(AGENT)

    def agent_scope(self) -> tuple[str, ...] | None:
        """The session-id patterns in which this connection may act as an agent (sorted,
        each once), or None for every session: an anonymous relay, or a pattern of stars
        only (not ``""``: that one matches no session id). ``can(session_id, AGENT)`` is
        True exactly where one of them matches; a Redis node marks its agents present per
        client id and scope (``relay._cluster``)."""
        if self.identity is None:
            return None
        patterns = sorted({pattern for pattern, caps in self.identity.grants if AGENT in caps})
        if any(pattern and not pattern.strip("*") for pattern in patterns):
            return None
        return tuple(patterns)

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
        self._put(None, codec.error_frame(error.to_wire(), req))

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
        if self._marked or self._drain is not None:
            return
        window = self._flusher.rollup_window
        if window and session_id is not None and _APPEND_KIND in data[:200]:
            if self._rollup is None:  # the window starts with the oldest append held
                loop = asyncio.get_running_loop()
                self._rollup = loop.call_later(window, self._roll_up)
            return
        self._marked = True
        self._flusher.mark(self)

    def _roll_up(self) -> None:
        """The rollup window of the oldest held append is over: have the queue written."""
        self._rollup = None
        if not self._marked and self._drain is None and not self.closed:
            self._marked = True
            self._flusher.mark(self)

    def write_queued(self) -> None:
        """Write the queue to the socket now (the ``Flusher`` calls this)."""
        self._marked = False
        if self._rollup is not None:  # what it held leaves now
            self._rollup.cancel()
            self._rollup = None
        queue = self._queue
        if self.closed or not queue or self._drain is not None:
            return
        ws = self.ws
        try:
            while queue and self._writable(ws):
                frames = self._take(queue)
                for frame in frames:
                    ws.protocol.send_text(frame)
                ws.send_data()  # one write on a RelayConnection
                self.metrics.frames_out.inc(len(frames))
        except Exception:  # never let a send problem escape unseen
            log.exception("send to %s failed", self.connection_id)
            self.closed = True
            self._queue = None
            ws.transport.abort()
            return
        if queue:  # the socket's buffer is full, or the connection is closing: wait for it
            self._drain = asyncio.get_running_loop().create_task(self._run_drain())
        else:
            self._queue = None  # drained: an idle peer holds no queue

    @staticmethod
    def _writable(ws: ServerConnection) -> bool:
        return ws.protocol.state is State.OPEN and not ws.paused and not ws.transport.is_closing()

    async def flushed(self) -> None:
        """Wait until everything queued so far was handed to the socket."""
        while self._queue and not self.closed:
            if self._drain is not None:
                await asyncio.shield(self._drain)
            else:
                await asyncio.sleep(0)  # the flusher writes it within two turns

    def close(self, code: int, reason: str) -> None:
        """Close the connection (asynchronously) and drop what is queued."""
        if self.closed:
            return
        self.closed = True
        self._queue = None
        self._queued_bytes = 0
        if self._rollup is not None:
            self._rollup.cancel()
            self._rollup = None
        if self._drain is not None:
            # A send stuck on a full socket buffer would hold up the close frame.
            self._drain.cancel()
        asyncio.get_running_loop().create_task(self.ws.close(code, reason[:120]))

    async def _run_drain(self) -> None:
        try:
            while self._queue and not self.closed:
                frames = self._take(self._queue)
                await send_frames(self.ws, frames)  # waits while the socket's buffer is full
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

    def _take(self, queue: deque[tuple[str | None, bytes]]) -> list[bytes]:
        """The next frames to write at once (about ``_WRITE_BYTES`` at most)."""
        frames = [self._next_frame(queue)]
        size = len(frames[0])
        while queue and size < _WRITE_BYTES:
            frames.append(self._next_frame(queue))
            size += len(frames[-1])
        return frames

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


def in_scope(scope: tuple[str, ...] | None, session_id: str) -> bool:
    """True if an agent connection of ``scope`` (``Peer.agent_scope``) may act as an agent
    in ``session_id``: what ``Peer.can(session_id, AGENT)`` says of that connection."""
    return scope is None or any(matches(pattern, session_id) for pattern in scope)
