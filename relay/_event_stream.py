"""``GET /v1/sessions/{id}/events``: a session's entries as Server-Sent Events.

A request that accepts ``text/event-stream`` (every ``EventSource``) gets a
response that stays open (``EventStream.follow``). It carries batches of
events, one after another, each written as the channel takes entries in. It
also carries the last id again every ``STREAM_BEAT`` seconds so that proxies
see it alive. Any other
request gets one batch (``EventStream.one_batch``): what is there after its
position, or what arrives within ``wait`` seconds.

A batch carries every entry after the position (the ``Last-Event-ID`` header,
else the ``from`` query parameter, else the head: only new entries), at most
``limit`` of them, and ends with ``id: <serial>@<epoch>``: no gap, no
duplicate, no mix of two histories. A position the channel cannot continue
from (of another epoch, beyond its head, or trimmed by the store) gets
``event: reset`` and the stream starts over from the oldest entry stored. A
waiting request listens on the channel under ``Hub.hold``, which releases it
when the request ends, so waiting pins no session. The text of the events is
``relay._sse``'s; the rules are in ``docs/reference/protocol/http.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from transport.errors import RunwireError

from ._channel import Channel
from ._http_front import Exchange
from ._http_message import response
from ._http_models import float_param, int_param, position, shape
from ._hub import Hub
from ._sse import ag_ui_block, entry_block, opening, reset_block, resume_id
from .auth import Identity

__all__ = ["MAX_WAIT", "STREAM_BEAT", "Batch", "EventStream"]

log = logging.getLogger("runwire.relay")

MAX_WAIT = 25.0
"""The longest a one-batch request waits for a new entry (seconds)."""
STREAM_BEAT = 15.0
"""An open event stream sends its last id at least this often (seconds): proxies see it alive."""
EVENT_STREAM = "text/event-stream; charset=utf-8"


@dataclass(frozen=True)
class Batch:
    """Events of a stream: ``body`` from position ``start`` (after a reset: where it starts
    over) to ``last``, of ``epoch``."""

    body: bytes
    start: int
    last: int
    epoch: str | None


class EventStream:
    """The event streams of one relay: answers them, and ends them when it stops."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.store = hub.store
        self.options = hub.options
        self.closing = False
        self._wakers: set[asyncio.Event] = set()
        self._streams: set[asyncio.Task[Any]] = set()

    def close(self) -> None:
        """The relay is stopping: waiting requests answer now, new ones do not wait, and open
        event streams end."""
        self.closing = True
        for waker in self._wakers:
            waker.set()
        for task in self._streams:
            task.cancel()

    async def one_batch(
        self,
        exchange: Exchange,
        session_id: str,
        query: dict[str, list[str]],
        identity: Identity | None,
    ) -> None:
        """Answer one batch: what is after the position, waiting up to ``wait`` seconds."""
        limit = min(int_param(query, "limit", 100, 1, 1000), self.options.history_page_max)
        wait = float_param(query, "wait", 15.0, 0.0, MAX_WAIT)
        form = shape(query)
        if identity is not None:
            # Not past the token's expiry: what is stored after it is not the token's to
            # read (a WebSocket connection is closed 4003 at that moment). The next
            # request, with the expired token, gets 401 TOKEN_EXPIRED.
            wait = max(0.0, min(wait, identity.expires_at - time.time()))
        after, epoch = self.position(exchange, query)
        batch = await self.batch(session_id, after, epoch, limit, wait, exchange.lost, form)
        reply = response(200, opening(batch.start) + batch.body, EVENT_STREAM, cors=True)
        reply.headers["Cache-Control"] = "no-cache"
        exchange.respond(reply)

    async def follow(
        self,
        exchange: Exchange,
        session_id: str,
        query: dict[str, list[str]],
        identity: Identity | None,
    ) -> None:
        """Serve the stream that stays open: each batch is written as the channel takes it
        in, until the client hangs up, the token expires or the relay stops."""
        limit = min(int_param(query, "limit", 100, 1, 1000), self.options.history_page_max)
        form = shape(query)
        after, epoch = self.position(exchange, query)
        head = response(200, b"", EVENT_STREAM, cors=True)
        head.headers["Cache-Control"] = "no-cache"
        head.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        exchange.start(head)
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        try:
            await self._follow(exchange, session_id, identity, limit, after, epoch, form)
        except Exception:
            log.exception("the event stream of %s failed", session_id)
        finally:
            exchange.end()
            if task is not None:
                self._streams.discard(task)

    async def _follow(
        self,
        out: Exchange,
        session_id: str,
        identity: Identity | None,
        limit: int,
        after: int | None,
        epoch: str | None,
        form: str,
    ) -> None:
        first = True
        while not (self.closing or out.closed):
            wait = 0.0 if first else STREAM_BEAT
            if identity is not None:
                left = identity.expires_at - time.time()
                if left <= 0:
                    return  # the client comes back with a fresh token (else 401)
                wait = min(wait, left)
            try:
                batch = await self.batch(session_id, after, epoch, limit, wait, out.lost, form)
            except RunwireError as exc:
                # The store is down, say: end; the client comes back and is told why.
                log.info("ending the event stream of %s: %s", session_id, exc.code)
                return
            start = opening(batch.start) if first else b""
            if not out.send(start + batch.body):
                return
            first = False
            after, epoch = batch.last, batch.epoch

    @staticmethod
    def position(exchange: Exchange, query: dict[str, list[str]]) -> tuple[int | None, str | None]:
        """Where a stream resumes: ``Last-Event-ID``, else ``from``, else the head (None)."""
        header = exchange.request.header("Last-Event-ID")
        if header is not None and header.strip():
            return position("Last-Event-ID", header.strip())
        text = query.get("from")
        return position("from", text[-1]) if text and text[-1] else (None, None)

    async def batch(
        self,
        session_id: str,
        after: int | None,
        epoch: str | None,
        limit: int,
        wait: float,
        lost: asyncio.Future[None] | None,
        form: str = "entries",
    ) -> Batch:
        """The entries after ``after`` (of ``epoch``), waiting up to ``wait`` seconds when
        there are none yet, as events: a reset first if the position cannot be continued
        from, then each entry, then the id ``<serial>@<epoch>`` to resume from."""
        blocks: list[bytes] = []
        async with self.hub.hold(session_id) as channel:
            if after is None:
                after = channel.last
            expected = channel.epoch if epoch is None else epoch
            # A position the channel cannot simply continue from: ask the store below.
            odd = expected != channel.epoch or not channel.first - 1 <= after <= channel.last
            if not odd and channel.last <= after and wait > 0:
                await self._wait(lost, channel, wait)
            entries = await self.store.read(session_id, after=after, limit=limit)
            now: str | None = channel.epoch
            head = channel.last
            if odd or self.store.loses_channels:
                # Read after the entries: they are of the epoch expected if the store
                # still has it (an epoch, once lost, never comes back). Not
                # ``open_channel``, which would make a session the store lost anew under
                # the loaded channel (its publishes would then expect that new epoch, at
                # serials it never took in).
                now, head = await self.store.head(session_id)
            if (
                (now != expected and (after or now is not None))
                or after > head
                or (entries and entries[0].serial != after + 1)
            ):
                # Not the history the position is in (the store lost it), beyond its
                # head, or trimmed since: start over from the oldest entry stored.
                entries = await self.store.read(session_id, after=0, limit=limit)
                first = entries[0].serial if entries else 0
                after = max(first - 1, 0)
                reset = {"epoch": now, "head": head, "first": first}
                blocks.append(reset_block(after, reset))
        start = after
        if form == "ag-ui":
            blocks.extend(ag_ui_block(e.serial, e.data, session_id) for e in entries)
        else:
            blocks.extend(entry_block(e.serial, e.data) for e in entries)
        last = entries[-1].serial if entries else after
        if now is not None:
            blocks.append(resume_id(last, now))
        return Batch(b"".join(blocks), start, last, now)

    async def _wait(
        self, lost: asyncio.Future[None] | None, channel: Channel, timeout: float
    ) -> None:
        """Until the channel takes in an entry or resets (the store lost its history), the
        client hangs up (``lost``), the relay stops, or ``timeout`` seconds pass."""
        if self.closing or channel.reset:
            return
        woke = asyncio.Event()
        stop = channel.listen(lambda _stored: woke.set(), on_reset=woke.set)
        self._wakers.add(woke)

        def hung_up(_: object) -> None:
            woke.set()

        if lost is not None:
            lost.add_done_callback(hung_up)
        try:
            async with asyncio.timeout(timeout):
                await woke.wait()
        except TimeoutError:
            pass
        finally:
            stop()
            self._wakers.discard(woke)
            if lost is not None:
                lost.remove_done_callback(hung_up)
