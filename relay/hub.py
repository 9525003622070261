"""``Hub``: the relay's frame router over channels, the store and the dispatcher.

One ``Hub`` per server. ``handle(peer, raw)`` decodes a frame and answers it;
bad frames get an ``error`` frame with a stable code and change nothing.
Publishes run as tasks (at most ``max_inflight`` per connection), so a worker
streaming into many sessions is not held up by one session's store write;
channel locks are FIFO, so one connection's publishes to a channel keep their
order. One more is refused ``RATE_LIMITED`` (``details.retry_after``), and so
is every later publish of the connection until the refused one comes again
(``_check_rate``): a client that sends its refused publishes again in order is
never overtaken by its own later ones. Likewise a publish its store refused
(``STORE_UNAVAILABLE``) holds the connection's later publishes to that session
(``_store_hold``, checked under the channel's lock, so also those already waiting
for it): they are refused the same way until it comes again.

Rights. Every frame is checked against the connection's token for its
session: ``attach`` needs ``subscribe``, ``worker`` needs ``agent`` somewhere
(and a worker is only handed Runs of sessions where it has it); what a publish
needs is the Run rules' business (``transport.runs``), fed the connection's
capabilities in that session. Refusals are ``UNAUTHORIZED`` and change nothing.
A publish needs an attach, except from a token that grants rights in the
session but not ``subscribe`` (``publish`` alone, say: a back end that posts
prompts): it cannot attach, so its publishes are taken unattached, as the HTTP
API takes them, and it reads nothing (no ``deliver``, no ``history``).

Consequences. When an entry changed Run records, the relay publishes what the
rules say it owes the session (``RunRegistry.due()``: the cancels of an
interrupt, the end of a queued Run its sender cancelled, the next queued Run's
turn), in one place: ``_react``, right after the commit. Those entries have
deterministic ids and go through the rules again, so a repeat (on this node
or another) is a duplicate and a stale one is refused. When a Run leaves a
slot of ``max_concurrent_runs`` (or a publish that failed gives back the slot its
plan held), every session with queued Runs, or Runs owed their resume, is looked
at, the one whose Run has waited longest first (at start too).
What the store did not take is tried again with backoff, and a session that
loads owing entries (its node stopped in between) has them published then.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from transport import codec, logcontext, tracing
from transport.errors import (
    AGENT_LOST,
    CONFLICT,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    NOT_ATTACHED,
    PROTOCOL_ERROR,
    RATE_LIMITED,
    STORE_UNAVAILABLE,
    UNAUTHORIZED,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import (
    MAX_RUN_TIMEOUT,
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
from transport.policy import RELAY
from transport.runs import (
    AGENT,
    SUBSCRIBE,
    Policy,
    RunRecord,
    RunRegistry,
    Sender,
    SlotBook,
    relay_entry_id,
    timeout_entry,
)

from .channel import Channel, newest_within
from .deadlines import Deadlines
from .dispatch import Dispatcher
from .metrics import Metrics
from .options import RelayOptions
from .peer import Peer
from .store.base import Gone, Store

if TYPE_CHECKING:
    from .auth import Identity
    from .cluster import RedisDispatcher

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
        self._present: dict[str, set[Peer]] = {}  # client id -> its agent connections
        self._lost_failures: dict[tuple[str, str], tuple[float, int]] = {}
        """Runs whose AGENT_LOST end failed: when it was last logged, how many since."""
        self.dispatcher: Dispatcher | RedisDispatcher
        if store.url.startswith(("redis://", "rediss://", "redis+cluster://", "rediss+cluster://")):
            from .cluster import RedisDispatcher
            from .store.redis import RedisStore

            assert isinstance(store, RedisStore)
            self.dispatcher = RedisDispatcher(
                store, grace=options.agent_grace, expire=self._agent_lost, metrics=metrics
            )
        else:
            self.dispatcher = Dispatcher(
                grace=options.agent_grace, expire=self._agent_lost, metrics=metrics
            )
        most = options.max_run_seconds
        if most is not None and not 0 < most <= MAX_RUN_TIMEOUT:
            raise ValueError(f"max_run_seconds must be more than 0 and at most a year, not {most}")
        self.policy = Policy(
            multitask=options.multitask,
            thread_access=options.thread_access,
            max_run_seconds=options.max_run_seconds,
        )
        self.deadlines = Deadlines(self._time_out)
        self.slots = SlotBook(options.max_concurrent_runs)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reacting: set[str] = set()
        self._again: set[str] = set()
        # Bound once: every channel shares them (a bound method per channel costs 64 bytes).
        self._on_committed = self._committed
        self._make_registry = self._registry

    async def start(self) -> None:
        """Time the Runs that were active when the relay last stopped; give queued Runs
        whose turn came their turn and paused Runs whose questions were settled their resume.

        A single relay also holds ``max_concurrent_runs`` slots for the Runs still going
        on. A node of several does not: it counts the Runs of the sessions it loads
        (``SlotBook.replace_session``), and would never see another node's Runs end.
        """
        if isinstance(self.dispatcher, Dispatcher):
            going_on = await self.store.runs_with_status(["pending", "active"])
            self.slots.sync(going_on)
            for record in going_on:
                if record.status == "active":
                    self.dispatcher.start_timer(record)
                    self.deadlines.follow(record)
        else:
            self.dispatcher.start()
        queued = await self.store.runs_with_status(["queued"])
        # A paused Run whose questions were settled (the answer stored) when the relay
        # stopped before it published the resume: owed too, whether or not anyone comes back
        # to the session (the answer came over HTTP, its device left).
        owed = [r for r in await self.store.runs_with_status(["suspended"]) if r.resume_owed]
        loaded = [
            await self.channel(session_id, react=False)
            for session_id in dict.fromkeys(r.session_id for r in [*queued, *owed])
        ]
        # What they owe is published session after session, the oldest Run waiting for a
        # slot first (as when a slot frees), or a younger queued Run of another session
        # could take the slot an older resume waits for.
        owing = sorted((c for c in loaded if c.registry.due()), key=_oldest_waiting)
        if owing:
            self._spawn(self._react_in_turn(owing))

    def close(self) -> None:
        """Stop timers and background tasks."""
        self.dispatcher.close()
        self.deadlines.close()
        for task in self._tasks:
            task.cancel()

    @property
    def page_bytes(self) -> int:
        """The most bytes of entries one ``attached`` or ``page`` frame carries: half the
        send queue, so a reply never by itself closes its reader ``SLOW_CONSUMER``."""
        return max(1, self.options.send_queue_bytes // 2)

    # --------------------------------------------------------- connections --

    def hello(self, peer: Peer, frame: Hello) -> None:
        """Stamp the connection's identity; a returning agent (``Peer.is_agent``) stops the
        grace timers of its client id's Runs.

        With a token, the user id is its ``sub`` and the client id its
        ``client_id`` claim, else the one the client asked for (or a new one)
        scoped to the user (``user/...``), so no client can take another
        user's client id.
        """
        client_id, user_id = _stamped(peer.identity, frame.client_id or peer.connection_id)
        peer.stamp(Sender(client_id=client_id, user_id=user_id, role=frame.role))
        self.peers.add(peer)
        if peer.is_agent():
            # Only agent connections count: a client of the same user that claims the
            # agent's client id would keep a lost agent's Runs from ending AGENT_LOST.
            # And only in sessions where its token grants 'agent' (a fresh token may
            # cover fewer sessions than the one the agent started its Runs with).
            self._present.setdefault(client_id, set()).add(peer)
            self.dispatcher.client_back(client_id, scope=peer.agent_scope())

    def sender(self, identity: Identity | None, claimed: str, session_id: str) -> Sender:
        """A client's identity for one request without a connection (the HTTP API): stamped
        from its token exactly as ``hello`` stamps a connection's, with its capabilities in
        ``session_id`` (every right, and no user, on an anonymous relay)."""
        client_id, user_id = _stamped(identity, claimed)
        caps = None if identity is None else identity.caps(session_id)
        return Sender(client_id=client_id, user_id=user_id, role="client", caps=caps)

    def gone(self, peer: Peer) -> None:
        """Forget a closed connection."""
        owned: list[RunRecord] = []
        client_id = peer.sender.client_id
        agent = peer.is_agent()
        self.peers.discard(peer)
        others = self._present.get(client_id)
        if agent and others is not None:
            others.discard(peer)
            if not others:
                del self._present[client_id]
        for session_id in list(peer.attached):
            channel = self.channels.get(session_id)
            if channel is None:
                continue
            channel.detach(peer)
            if agent and not self._vouched(client_id, session_id):
                owned.extend(
                    r
                    for r in channel.registry.active()
                    if r.owner == client_id and r.status == "active"
                )
            self.release(channel)
        self.dispatcher.peer_gone(peer, owned)
        if (
            agent
            and isinstance(self.dispatcher, Dispatcher)
            and (
                client_id not in self._present
                or any(_grants(p) != _grants(peer) for p in self._present[client_id])
            )
        ):
            # Its Runs in sessions this connection never attached (a Redis node's sweep
            # finds those by itself), when no connection left vouches for all of them.
            self._spawn(self._owner_left(client_id))

    def _vouched(self, client_id: str, session_id: str) -> bool:
        """True if an agent connection of ``client_id`` may act as one in ``session_id``:
        the owner of a Run there is present, and the Run does not end ``AGENT_LOST``."""
        return any(p.can(session_id, AGENT) for p in self._present.get(client_id, ()))

    async def _owner_left(self, client_id: str) -> None:
        """Time every active Run of an agent that has no connection left."""
        try:
            active = await self.store.runs_with_status(["active"])
        except RunwireError as exc:
            log.warning("cannot look up the Runs of %r, gone: %s", client_id, exc)
            return
        for record in active:
            if record.owner == client_id and not self._vouched(client_id, record.session_id):
                self.dispatcher.start_timer(record)  # not if it came back meanwhile

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task that ``aclose`` cancels."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            where = {"session_id": getattr(frame, "session_id", None)}
            log.exception("frame %s failed", frame.type, extra=where)
            peer.send_error(
                RunwireError(INTERNAL_ERROR, "the relay failed on this request"),
                getattr(frame, "req", None),
            )

    async def _route(self, peer: Peer, frame: ClientFrame) -> None:
        if isinstance(frame, Publish):
            self._check_rate(peer, frame.session_id, frame.entry.id)
            peer.inflight += 1
            self._spawn(self._publish(peer, frame))
        elif isinstance(frame, Attach):
            if not peer.can(frame.session_id, SUBSCRIBE):
                raise RunwireError(
                    UNAUTHORIZED,
                    f"the token does not grant 'subscribe' in {frame.session_id!r}",
                    details={"session_id": frame.session_id, "needs": SUBSCRIBE},
                )
            try:
                await self._attach(peer, frame)
            except RunwireError as exc:
                if exc.code != EPOCH_MISMATCH:
                    raise
                # The channel found that the store lost its history and reset: attach to
                # the session as the store has it now (a resume then gets ``reset``).
                await self._attach(peer, frame)
        elif isinstance(frame, Detach):
            channel = self._attached(peer, frame.session_id)
            channel.detach(peer)
            peer.send_frame(codec.encode(Ack(req=frame.req)))
            self.release(channel)
        elif isinstance(frame, History):
            channel = self._attached(peer, frame.session_id)
            entries, has_older = await channel.history(
                frame.before, min(frame.limit, self.options.history_page_max)
            )
            fitting = newest_within(entries, self.page_bytes)
            has_older = has_older or len(fitting) < len(entries)
            entries = fitting
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
            if peer.identity is not None and not peer.identity.grants_anywhere(AGENT):
                raise RunwireError(
                    UNAUTHORIZED, "the token grants 'agent' in no session", details={"needs": AGENT}
                )
            pending = (
                await self.store.runs_with_status(["pending"], agent=frame.agent)
                if self.dispatcher.needs_pending
                else []
            )
            peer.send_frame(codec.encode(Ack(req=frame.req)))
            self.dispatcher.add_worker(peer, frame.agent, pending)
        elif isinstance(frame, Hello):
            raise RunwireError(PROTOCOL_ERROR, "hello was already received")

    def _store_hold(self, peer: Peer, session_id: str, entry_id: str) -> None:
        """Refuse (``STORE_UNAVAILABLE``, ``details.held``) a publish of ``peer`` to the
        session behind one of its publishes there that the store refused, until that one
        comes again (or ``STORE_HOLD`` passed): those already on their way when it was
        refused (several in flight) are not stored before it if the store is back at once,
        and a client that sends its refused publishes again in order keeps its order."""
        hold = peer.store_held.get(session_id)
        if hold is None:
            return
        held, until = hold
        if held == entry_id or time.monotonic() >= until:
            del peer.store_held[session_id]  # its retry came (or it never did): as usual
            return
        raise RunwireError(
            STORE_UNAVAILABLE,
            "an earlier publish of this connection to this session was not stored; "
            "send it again first",
            details={"held": held},
        )

    def _check_rate(self, peer: Peer, session_id: str, entry_id: str) -> None:
        """Raise ``RATE_LIMITED`` for a publish over ``max_inflight``, or one behind such.

        The first publish refused (``peer.held``) holds the connection: every later one
        is refused too until it comes again (the same entry id to the same session: ids
        are unique per session only) or ``RATE_LIMIT_HOLD`` passed, so a client that sends
        its refused publishes again in order keeps its order.
        """
        held = peer.held
        key = (session_id, entry_id)
        if held is not None and (held == key or time.monotonic() >= peer.held_until):
            peer.held = held = None  # its retry came (or it never did): handled as usual
        if held is None and peer.inflight < self.options.max_inflight:
            return
        if held is None:
            peer.held = held = key
            peer.held_until = time.monotonic() + RATE_LIMIT_HOLD
            message = "too many publishes waiting on this connection"
        else:
            message = "an earlier publish of this connection was refused; send it again first"
        raise RunwireError(
            RATE_LIMITED,
            message,
            details={
                "retry_after": RATE_LIMIT_RETRY_AFTER,
                "limit": self.options.max_inflight,
                "held": held[1],
            },
        )

    async def _attach(self, peer: Peer, frame: Attach) -> None:
        """Attach ``peer`` to the session's channel (``Channel.attach``: raises
        ``EPOCH_MISMATCH`` if the channel reset meanwhile, the next one is loaded afresh)."""
        async with self.hold(frame.session_id) as channel:
            await channel.attach(
                peer,
                frame.req,
                from_serial=frame.from_serial,
                epoch=frame.epoch,
                limit=min(frame.limit, self.options.history_page_max),
                backlog_max=self.options.backlog_max,
                max_bytes=self.page_bytes,
            )

    async def _publish(self, peer: Peer, frame: Publish) -> None:
        channel: Channel | None = None
        started = time.perf_counter()
        try:
            sender = peer.sender_for(frame.session_id)
            if frame.session_id not in peer.attached and _write_only(sender):
                # A token that may write here but not read (it cannot attach): published
                # as the HTTP API does, the channel held for the publish alone.
                async with self.hold(frame.session_id) as held:
                    serial, duplicate = await self.publish(held, frame.entry, sender, peer=peer)
            else:
                channel = self._attached(peer, frame.session_id)
                serial, duplicate = await self.publish(channel, frame.entry, sender, peer=peer)
            peer.send_frame(codec.encode(Ack(req=frame.req, serial=serial, duplicate=duplicate)))
            self.metrics.publish_ack.observe(time.perf_counter() - started)
        except RunwireError as exc:
            peer.send_error(exc, frame.req)
        except Exception:
            log.exception("publish failed")
            peer.send_error(
                RunwireError(INTERNAL_ERROR, "the relay failed on this publish"), frame.req
            )
        finally:
            peer.inflight -= 1
            if channel is not None:
                # The peer may have detached or gone meanwhile: the publish (``busy``)
                # kept the channel loaded then, so let go of it now if nobody else is here.
                self.release(channel)

    async def publish(
        self, channel: Channel, entry: EntryBody, sender: Sender, *, peer: Peer | None = None
    ) -> tuple[int, bool]:
        """Store one entry under the Run rules as ``sender`` and hand out the Runs it made
        pending: the one publish path of WebSocket and HTTP clients. Returns ``(serial,
        duplicate)``; raises ``RunwireError`` when the rules refuse it or the store fails.

        ``peer``: the connection it came on. An entry of it the store refused
        (``STORE_UNAVAILABLE``) holds its later publishes to the session (``_store_hold``).
        """
        session_id = channel.session_id
        if tracing.ENABLED and isinstance(entry, MessageEntry):
            carrier = tracing.carrier_of(entry.message.metadata)
            if carrier is not None:
                attributes = {"runwire.session_id": session_id, "runwire.run_id": entry.run_id}
                with tracing.span(
                    "runwire.relay.publish", parent=carrier, kind="server", attributes=attributes
                ):
                    return await self._publish_entry(channel, entry, sender, peer)
        return await self._publish_entry(channel, entry, sender, peer)

    async def _publish_entry(
        self, channel: Channel, entry: EntryBody, sender: Sender, peer: Peer | None
    ) -> tuple[int, bool]:
        session_id = channel.session_id
        started = time.perf_counter()
        try:
            serial, duplicate, changes = await channel.publish(
                entry,
                sender,
                now_ms(),
                admit=None
                if peer is None
                else lambda entry_id: self._store_hold(peer, session_id, entry_id),
            )
        except BaseException as exc:
            # Raised under the channel's lock and caught here with no wait in between:
            # the hold is in place before the next publish waiting for the lock runs.
            if (
                peer is not None
                and isinstance(exc, RunwireError)
                and exc.code == STORE_UNAVAILABLE
                and "held" not in exc.details
            ):
                peer.store_held.setdefault(session_id, (entry.id, time.monotonic() + STORE_HOLD))
            self._slot_given_back(entry)
            raise
        if duplicate:
            self.metrics.duplicates.inc()
        else:
            # Stored and taken in: queued to this node's subscribers (the agent's included).
            took = time.perf_counter() - started
            self.metrics.publish_deliver.observe(took)
            if isinstance(entry, MessageEntry) and entry.intent == "steer":
                self.metrics.steer_dispatch.observe(took)
            await self._published(entry, changes)
        return serial, duplicate

    def _attached(self, peer: Peer, session_id: str) -> Channel:
        channel = self.channels.get(session_id)
        if channel is None or session_id not in peer.attached:
            raise RunwireError(
                NOT_ATTACHED, f"attach to {session_id!r} first", details={"session_id": session_id}
            )
        return channel

    # ------------------------------------------------------------ channels --

    async def channel(self, session_id: str, *, react: bool = True) -> Channel:
        """The loaded channel of a session (loading it once, however many ask at once).

        A session that loads owing entries (its node stopped between storing an entry
        and publishing what the entry called for) has them published now (unless not
        ``react``: the caller sees to it).
        """
        channel = self.channels.get(session_id)
        if channel is not None:
            if not channel.reset:
                return channel
            # The store lost its history: whoever still uses this one finishes with it,
            # everyone from now on gets the session as the store has it now.
            self._forget(channel)
        loading = self._loading.get(session_id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[Channel] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            channel = Channel(
                self.store,
                session_id,
                self._on_committed,
                self._make_registry,
                input_checks=self.options.input_checks,
            )
            try:
                await channel.load()
            except BaseException:
                channel.close()
                raise
            self.channels[session_id] = channel
            self.metrics.channels.set(len(self.channels))
            for record in channel.registry.active():
                self.deadlines.follow(record)  # a node that timed them may have stopped
            if react and channel.registry.due():
                # Owed by a node that stored the entry and stopped before it published
                # what that entry called for (a resume, a queued Run's turn): owed still.
                self._react_soon(channel)
            future.set_result(channel)
            return channel
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            del self._loading[session_id]

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[Channel]:
        """The session's channel, kept loaded for the block and released after it (forgotten
        then if nobody on this node watches it), so a user that does not subscribe (an
        attach in progress, an HTTP request) neither loses it midway nor pins it."""
        channel = await self.channel(session_id)
        while self.channels.get(session_id) is not channel:
            # Released while this task waited for another's load of it: load it again.
            channel = await self.channel(session_id)
        channel.holds += 1
        try:
            yield channel
        finally:
            channel.holds -= 1
            self.release(channel)

    def _registry(self, session_id: str, records: list[RunRecord]) -> RunRegistry:
        return RunRegistry(session_id, records, policy=self.policy, slots=self.slots)

    def release(self, channel: Channel) -> None:
        """Forget a channel nobody on this node watches (its store subscription ends).

        A channel with queued Runs, or suspended ones owed their resume, stays: a slot
        freed in another session gives them their turn (their resume) only while it is
        loaded. A node of several also gives back the
        ``max_concurrent_runs`` slots of the session's Runs (it counts the Runs of the
        sessions it has loaded and would not see these end), to the Runs waiting for
        one on it; a single relay keeps them, since every Run goes through it.
        """
        if (
            channel.subscribers
            or channel.holds
            or channel.listeners
            or channel.busy()
            or channel.session_id in self._reacting
            or _waits_for_a_slot(channel)
        ):
            return
        self._forget(channel)

    def _forget(self, channel: Channel) -> None:
        """Unload ``channel`` if it is the session's loaded one."""
        if self.channels.get(channel.session_id) is channel:
            del self.channels[channel.session_id]
            channel.close()
            if not isinstance(self.dispatcher, Dispatcher):
                before = self.slots.in_use
                self.slots.replace_session(channel.session_id, [])
                if self.slots.in_use < before and self.slots.limit is not None:
                    self._give_turns()  # the slots given back go to the Runs waiting here
            self.metrics.channels.set(len(self.channels))

    async def _published(self, entry: EntryBody, changes: list[RunRecord]) -> None:
        """After this node stored an entry: hand out the Runs it made pending.

        Only the node that stored the entry does this, so a Run is handed out once.
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

    def _committed(self, channel: Channel, entry: EntryBody, changes: list[RunRecord]) -> None:
        """React to an entry this node took in, whichever node published it."""
        self.metrics.delivered.inc(len(channel.subscribers))
        freed = False
        for record in changes:
            self.dispatcher.run_changed(record)
            self.deadlines.follow(record)
            freed = freed or record.terminal or record.status == "suspended"
        if freed and self.slots.limit is not None:
            self._give_turns(channel)
        elif changes:
            self._react_soon(channel)

    def _give_turns(self, channel: Channel | None = None) -> None:
        """A slot came free: sessions with queued Runs (or Runs owed their resume) take
        their turns oldest first, one after the other (each waits for its channel's
        lock), so a younger Run in another session cannot take the slot first.
        ``channel``: the session whose entry freed it (it reacts to that entry too)."""
        waiting = [c for c in self.channels.values() if _waits_for_a_slot(c)]
        if channel is not None and channel not in waiting:
            waiting.append(channel)
        if not waiting:
            return
        waiting.sort(key=_oldest_waiting)
        self._spawn(self._react_in_turn(waiting))

    def _slot_given_back(self, entry: EntryBody) -> None:
        """A publish failed: the slot its plan may have held for a Run (a prompt, or an
        owner's resume, the store refused) is free again. No entry frees it, so the Runs
        waiting for one are told here, or a resume owed (a Run queued) meanwhile would
        wait for the next Run to end."""
        takes_slot = isinstance(entry, RunEntry) or (
            isinstance(entry, MessageEntry) and entry.intent == "prompt"
        )
        if takes_slot and self.slots.limit is not None and self.slots.free():
            self._give_turns()

    async def _react_in_turn(self, channels: list[Channel]) -> None:
        for channel in channels:
            session_id = channel.session_id
            if session_id in self._reacting:
                self._again.add(session_id)
                continue
            self._reacting.add(session_id)
            await self._react(channel)

    def _react_soon(self, channel: Channel) -> None:
        """Publish what the relay owes ``channel`` (once the current publish let go of it)."""
        session_id = channel.session_id
        if session_id in self._reacting:
            self._again.add(session_id)
            return
        self._reacting.add(session_id)
        self._spawn(self._react(channel))

    async def _react(self, channel: Channel) -> None:
        """The one place the relay publishes entries as a consequence of others.

        An entry the rules refuse is no longer due and is dropped. One the store did
        not take (Redis away or out of memory, a session too busy) is still owed: the
        channel stays loaded and the round is tried again, backing off from
        ``REACT_RETRY`` to ``REACT_RETRY_MAX`` seconds, until the store takes it or the
        rules say it is no longer due (another node published it, the store lost the
        session).
        """
        session_id = channel.session_id
        delay = REACT_RETRY
        rounds = 0
        try:
            while rounds < 1000:
                self._again.discard(session_id)
                owed = False
                for entry, sender in channel.registry.due():
                    try:
                        _, duplicate, changes = await channel.publish(entry, sender, now_ms())
                        if not duplicate:
                            await self._published(entry, changes)
                    except RunwireError as exc:
                        owed = owed or exc.code in _STORE_FAILURES
                        log.debug("relay entry %s not published: %s", entry.id, exc)
                if owed and not channel.reset and self.channels.get(session_id) is channel:
                    log.info(
                        "relay entries of %s still owed; trying again in %.1fs", session_id, delay
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
            self.release(channel)

    async def _agent_lost(self, session_id: str, run_id: str) -> None:
        """End a Run whose agent did not come back within the grace period.

        A durable Run is not ended: it goes back to ``pending`` and the
        dispatcher hands it to another worker, which adopts it. The session is
        held only for this: a node that sweeps (on Redis, any node) does not keep
        a session none of its clients watch.
        """
        key = (session_id, run_id)
        try:
            async with self.hold(session_id) as channel:
                with logcontext.bind(session_id=session_id, run_id=run_id):
                    await self._end_lost(channel, run_id)
        except RunwireError as exc:
            # The sweep (on Redis) tries again every heartbeat while this fails: one
            # warning per Run per ``LOST_LOG_EVERY`` seconds, with how many were not logged.
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
            log.warning("could not end run %s/%s: %s%s", session_id, run_id, exc, more)
        else:
            self._lost_failures.pop(key, None)

    async def _end_lost(self, channel: Channel, run_id: str) -> None:
        """End (or hand on, if durable) an active Run whose owner is not connected here,
        if the store still finds it gone when the end's turn comes.

        The sweep that found the owner gone and this end are apart (a session to load,
        a lock to wait for): an agent that came back meanwhile through another node is
        marked present in the store, which then stores nothing (``Gone``), in the same
        step that would store the end; the Run goes on.
        """
        record = channel.registry.get(run_id)
        if record is None or record.status != "active" or record.owner is None:
            return
        if self._vouched(record.owner, channel.session_id):
            return
        gone = None if record.owner is None else Gone(record.owner, self.options.agent_grace)
        try:
            if record.durable:
                await self._hand_on(channel, record, gone)
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

    async def _hand_on(self, channel: Channel, record: RunRecord, gone: Gone | None) -> None:
        """Put a durable Run back to ``pending`` (not ended): another worker adopts it. The
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

    async def _lose(self, channel: Channel, record: RunRecord, gone: Gone | None) -> None:
        """End a Run ``error`` / ``AGENT_LOST``."""
        lost = RunEntry(
            id=f"relay-{new_id()}",
            run_id=record.run_id,
            status="error",
            error=ErrorBody(
                code=AGENT_LOST,
                message="the agent went away and did not come back in time",
                details={"grace_seconds": self.options.agent_grace},
            ),
        )
        await channel.publish(lost, RELAY, now_ms(), gone=gone)
        self.metrics.agent_lost.inc()

    async def _time_out(self, session_id: str, run_id: str) -> None:
        """End an active Run whose deadline passed: ``cancelled``, ``RUN_TIMEOUT``.

        The rules check the deadline again when the end is stored (a Run that was
        suspended or ended meanwhile is left as it is). An end the store did not take
        is tried again in ``REACT_RETRY_MAX`` seconds.
        """
        deadline = 0
        try:
            async with self.hold(session_id) as channel:
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
            if exc.code in _STORE_FAILURES and deadline:
                self.deadlines.again(session_id, run_id, deadline, REACT_RETRY_MAX)
            log.warning("could not end run %s/%s at its deadline: %s", session_id, run_id, exc)

    def stats(self) -> dict[str, Any]:
        """Numbers for ``/healthz``."""
        return {
            "connections": len(self.peers),
            "channels": len(self.channels),
            "workers": sum(len(w) for w in self.dispatcher.workers.values()),
        }


LOST_LOG_EVERY = 60.0
"""Seconds between two warnings that one Run's AGENT_LOST end (or hand-over) failed."""
LOST_LOG_KEEP = 10_000
"""How many Runs' failed ends are remembered for that before the old ones are forgotten."""
REACT_RETRY = 0.1
"""Seconds before the relay tries again to publish entries it owes that the store did not take."""
REACT_RETRY_MAX = 5.0
"""The longest wait between two such tries (the wait doubles from ``REACT_RETRY``)."""
RATE_LIMIT_RETRY_AFTER = 0.05
"""Seconds a publish refused ``RATE_LIMITED`` should wait before it goes again (its
``details["retry_after"]``): about a store write, after which a slot is likely free."""
RATE_LIMIT_HOLD = 2.0
"""How long a refused publish holds its connection's later publishes if it is not sent again."""
STORE_HOLD = 2.0
"""How long a publish the store refused holds its connection's later publishes to the
session if it is not sent again."""
_STORE_FAILURES = frozenset({STORE_UNAVAILABLE, CONFLICT})
"""Codes that say the store did not take an entry, not that the rules refused it."""


def _grants(peer: Peer) -> object:
    """What a connection's token grants (``None``: everything, on an anonymous relay)."""
    return None if peer.identity is None else peer.identity.grants


def _write_only(sender: Sender) -> bool:
    """True for a token that grants rights in the session but not ``subscribe``."""
    return sender.caps is not None and bool(sender.caps) and SUBSCRIBE not in sender.caps


def _scoped(user_id: str, claimed: str) -> str:
    """A client id that belongs to ``user_id`` (kept as it is when it already does).

    The user part ends at the first ``/``: a ``/`` (and ``%``) in the user id is
    percent-encoded, or user ``alice`` claiming ``x/phone`` and user ``alice/x``
    claiming ``phone`` would both be ``alice/x/phone``, one connection taking the other
    user's agent Runs (ownership and presence go by client id).
    """
    prefix = user_id.replace("%", "%25").replace("/", "%2F") + "/"
    scoped = claimed if claimed.startswith(prefix) else prefix + claimed
    if len(scoped) <= 200:
        return scoped
    digest = hashlib.sha256(scoped.encode()).hexdigest()[:32]
    return f"{prefix[:-1][:150]}/{digest}"


def _stamped(identity: Identity | None, claimed: str) -> tuple[str, str | None]:
    """``(client_id, user_id)`` of a client claiming ``claimed``: the token's user and
    ``client_id`` claim, else the claim scoped to that user; the claim as is when anonymous."""
    if claimed == RELAY.client_id:
        raise RunwireError(PROTOCOL_ERROR, f"client id {claimed!r} is the relay's own")
    if identity is None:
        return claimed, None
    return identity.client_id or _scoped(identity.user_id, claimed), identity.user_id


def _waits_for_a_slot(channel: Channel) -> bool:
    """True if a Run of the session waits for a slot: queued, or suspended and owed its
    resume (which takes a slot). Not once the store lost the session (``reset``): its
    records are stale, nothing of it waits (it is let go, giving back its slots)."""
    if channel.reset:
        return False
    return bool(channel.registry.queued() or channel.registry.resumes_owed())


def _oldest_waiting(channel: Channel) -> int:
    """When the session's oldest Run waiting for a slot was created (0: none waits)."""
    waiting = [*channel.registry.queued(), *channel.registry.resumes_owed()]
    return min((r.created_ts for r in waiting), default=0)
