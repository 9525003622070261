"""``Hub``: the relay's frame router over channels, the store and the dispatcher.

One ``Hub`` per server. ``handle(peer, raw)`` decodes a frame and answers it. A bad
frame gets an ``error`` frame with a stable code and changes nothing.

Publishes run as tasks, at most ``max_inflight`` per connection. So a worker that
streams into many sessions is not held up by one session's store write. Channel locks
are FIFO, so one connection's publishes to a channel keep their order. The
connection's ``AdmissionHold`` (``transport._holds``) refuses a publish over the limit,
or one behind a refused publish, before it runs.

Rights. Every frame is checked against the connection's token for its session:
``attach`` needs ``subscribe``, and ``worker`` needs ``agent`` in some session. What a
publish needs is decided by the Run rules (``transport._runs``). A publish needs an
attach, except from a token that grants rights in the session but not ``subscribe``.
Such a token cannot attach, so its publishes are taken unattached, as the HTTP API
takes them, and it reads nothing.

The hub's parts: ``Channels`` (``relay._channels``) loads and lets go of sessions,
``Reactions`` (``relay._reactions``) publishes what entries call for, and ``Liveness``
(``relay._liveness``) ends the Runs of lost agents and Runs past their deadline.
See docs/explanation/relay-internals.md for how the parts fit on one node and on several.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from transport import _codec as codec
from transport import _tracing as tracing
from transport._holds import AdmissionHold
from transport._policy import RELAY
from transport._runs import AGENT, SUBSCRIBE, Policy, RunRecord, Sender, SlotBook
from transport.errors import (
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    NOT_ATTACHED,
    PROTOCOL_ERROR,
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
    Hello,
    History,
    MessageEntry,
    Publish,
    Worker,
)

from ._backlog import attach, newest_within
from ._channel import Channel
from ._channels import Channels, oldest_waiting, registry_maker
from ._deadlines import Deadlines
from ._dispatch import Dispatcher, Expire
from ._liveness import Liveness
from ._metrics import Metrics
from ._options import RelayOptions
from ._peer import Peer
from ._reactions import Reactions, now_ms
from .store._base import Store

if TYPE_CHECKING:
    from ._cluster import RedisDispatcher
    from ._cluster_shards import ShardedDispatcher
    from .auth import Identity

__all__ = ["Hub"]

log = logging.getLogger("runwire.relay")

_REDIS_URLS = ("redis://", "rediss://", "redis+cluster://", "rediss+cluster://")


class Hub:
    """Routes frames of every connection of one relay."""

    def __init__(self, store: Store, options: RelayOptions, metrics: Metrics) -> None:
        self.store = store
        self.options = options
        self.metrics = metrics
        self.peers: set[Peer] = set()
        most = options.max_run_seconds
        if most is not None and not 0 < most <= MAX_RUN_TIMEOUT:
            raise ValueError(f"max_run_seconds must be more than 0 and at most a year, not {most}")
        self.dispatcher = _dispatcher(store, options, metrics, self.agent_lost)
        self.policy = Policy(
            multitask=options.multitask,
            thread_access=options.thread_access,
            max_run_seconds=options.max_run_seconds,
        )
        self.deadlines = Deadlines(self._time_out)
        self.slots = SlotBook(options.max_concurrent_runs)
        self.tasks: set[asyncio.Task[None]] = set()
        """Background tasks (publishes and reactions) that ``close`` cancels."""
        self.loader = Channels(
            store,
            options,
            metrics,
            committed=self._committed,
            make_registry=registry_maker(self.policy, self.slots),
            deadlines=self.deadlines,
            slots=self.slots,
            shares_slots=not isinstance(self.dispatcher, Dispatcher),
        )
        self.channels: dict[str, Channel] = self.loader.loaded
        """The loaded channels by session id (``Channels.loaded``)."""
        self.reactions = Reactions(
            self.loader,
            self.dispatcher,
            deadlines=self.deadlines,
            slots=self.slots,
            metrics=metrics,
            spawn=self._spawn,
        )
        self.loader.reactor = self.reactions
        self.liveness = Liveness(
            store,
            self.dispatcher,
            hold=self.hold,
            published=self.reactions.published,
            deadlines=self.deadlines,
            metrics=metrics,
            agent_grace=options.agent_grace,
        )

    async def start(self) -> None:
        """Time the Runs that were active when the relay last stopped. Give queued Runs
        whose turn came their turn, and paused Runs whose questions were settled their resume.

        A single relay also holds ``max_concurrent_runs`` slots for the Runs still running.
        A node of several does not: it counts the Runs of the sessions it loads
        (``SlotBook.replace_session``), and would never see another node's Runs end.
        """
        if isinstance(self.dispatcher, Dispatcher):
            running = await self.store.runs_with_status(["pending", "active"])
            self.slots.sync(running)
            for record in running:
                if record.status == "active":
                    self.dispatcher.start_timer(record)
                    self.deadlines.follow(record)
        else:
            self.dispatcher.start()
        queued = await self.store.runs_with_status(["queued"])
        # A paused Run whose questions were settled (the answer stored) when the relay
        # stopped before it published the resume: still due, whether or not anyone comes
        # back to the session (the answer came over HTTP, its device left).
        due = [r for r in await self.store.runs_with_status(["suspended"]) if r.resume_owed]
        loaded = [
            await self.loader.channel(session_id, react=False)
            for session_id in dict.fromkeys(r.session_id for r in [*queued, *due])
        ]
        # Published session after session, the oldest Run waiting for a slot first (as
        # when a slot frees), or a younger queued Run of another session could take the
        # slot an older resume waits for.
        waiting = sorted((c for c in loaded if c.registry.due()), key=oldest_waiting)
        if waiting:
            self._spawn(self.reactions.react_in_turn(waiting))

    def close(self) -> None:
        """Stop timers and background tasks."""
        self.dispatcher.close()
        self.deadlines.close()
        for task in self.tasks:
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

        With a token, the user id is its ``sub`` and the client id its ``client_id``
        claim. Without that claim it is the one the client asked for, or a new one,
        scoped to the user (``user/...``). So no client can take another user's client id.
        """
        client_id, user_id = _stamped(peer.identity, frame.client_id or peer.connection_id)
        peer.stamp(Sender(client_id=client_id, user_id=user_id, role=frame.role))
        self.peers.add(peer)
        if peer.is_agent():
            self.liveness.arrived(peer)

    def sender(self, identity: Identity | None, claimed: str, session_id: str) -> Sender:
        """A client's identity for one request without a connection (the HTTP API).

        It is stamped from its token exactly as ``hello`` stamps a connection's, with its
        capabilities in ``session_id``: every right, and no user, on an anonymous relay.
        """
        client_id, user_id = _stamped(identity, claimed)
        caps = None if identity is None else identity.caps(session_id)
        return Sender(client_id=client_id, user_id=user_id, role="client", caps=caps)

    def gone(self, peer: Peer) -> None:
        """Forget a closed connection."""
        owned: list[RunRecord] = []
        client_id = peer.sender.client_id
        agent = peer.is_agent()
        self.peers.discard(peer)
        unvouched = agent and self.liveness.left(peer)
        for session_id in list(peer.attached):
            channel = self.channels.get(session_id)
            if channel is None:
                continue
            channel.detach(peer)
            if agent and not self.liveness.vouched(client_id, session_id):
                owned.extend(
                    r
                    for r in channel.registry.active()
                    if r.owner == client_id and r.status == "active"
                )
            self.release(channel)
        self.dispatcher.peer_gone(peer, owned)
        if unvouched and isinstance(self.dispatcher, Dispatcher):
            # Its Runs in sessions this connection never attached (a Redis node's sweep
            # finds those by itself), when no connection left vouches for all of them.
            self._spawn(self.liveness.owner_left(client_id))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task that ``close`` cancels."""
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

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
            limit = self.options.max_inflight
            refusal = peer.admission.reserve(frame.session_id, frame.entry.id, limit)
            if refusal is not None:
                raise refusal.error()
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
            await self._history(peer, frame)
        elif isinstance(frame, Worker):
            await self._worker(peer, frame)
        elif isinstance(frame, Hello):
            raise RunwireError(PROTOCOL_ERROR, "hello was already received")

    async def _history(self, peer: Peer, frame: History) -> None:
        channel = self._attached(peer, frame.session_id)
        limit = min(frame.limit, self.options.history_page_max)
        entries, has_older = await channel.history(frame.before, limit)
        fitting = newest_within(entries, self.page_bytes)
        has_older = has_older or len(fitting) < len(entries)
        data = [e.data for e in fitting]
        peer.send_frame(codec.page_frame(frame.req, frame.session_id, has_older, data))

    async def _worker(self, peer: Peer, frame: Worker) -> None:
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

    async def _attach(self, peer: Peer, frame: Attach) -> None:
        """Attach ``peer`` to the session's channel (``Channel.attach``: raises
        ``EPOCH_MISMATCH`` if the channel reset meanwhile, the next one is loaded afresh)."""
        async with self.hold(frame.session_id) as channel:
            await attach(
                channel,
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
            peer.admission.release()
            if channel is not None:
                # The peer may have detached or gone meanwhile: the publish (``busy``)
                # kept the channel loaded then, so let go of it now if nobody else is here.
                self.release(channel)

    async def publish(
        self, channel: Channel, entry: EntryBody, sender: Sender, *, peer: Peer | None = None
    ) -> tuple[int, bool]:
        """Store one entry under the Run rules as ``sender`` and pass the Runs it made
        pending to workers: the one publish path of WebSocket and HTTP clients.

        Returns ``(serial, duplicate)``; raises ``RunwireError`` when the rules refuse it
        or the store fails. ``peer``: the connection it came on. An entry of it the store
        refused (``STORE_UNAVAILABLE``) holds its later publishes to the session.
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
        hold = None if peer is None else peer.admission
        started = time.perf_counter()
        try:
            serial, duplicate, changes = await channel.publish(
                entry,
                sender,
                now_ms(),
                admit=None if hold is None else _store_hold_check(hold, session_id),
            )
        except BaseException as exc:
            # Raised under the channel's lock and caught here with no wait in between:
            # the hold is in place before the next publish waiting for the lock runs.
            if (
                hold is not None
                and isinstance(exc, RunwireError)
                and exc.code == STORE_UNAVAILABLE
                and "held" not in exc.details
            ):
                hold.store_refused(session_id, entry.id)
            self.reactions.slot_given_back(entry)
            raise
        if duplicate:
            self.metrics.duplicates.inc()
        else:
            # Stored and taken in: queued to this node's subscribers (the agent's included).
            took = time.perf_counter() - started
            self.metrics.publish_deliver.observe(took)
            if isinstance(entry, MessageEntry) and entry.intent == "steer":
                self.metrics.steer_dispatch.observe(took)
            await self.reactions.published(entry, changes)
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
        """The loaded channel of a session (``Channels.channel``)."""
        return await self.loader.channel(session_id, react=react)

    def hold(self, session_id: str) -> AbstractAsyncContextManager[Channel]:
        """The session's channel, kept loaded for the block (``Channels.hold``)."""
        return self.loader.hold(session_id)

    def release(self, channel: Channel) -> None:
        """Forget a channel nobody on this node uses (``Channels.release``)."""
        self.loader.release(channel)

    def _committed(self, channel: Channel, entry: EntryBody, changes: list[RunRecord]) -> None:
        self.reactions.committed(channel, entry, changes)

    async def agent_lost(self, session_id: str, run_id: str) -> None:
        """End a Run whose agent did not come back in time (``Liveness.agent_lost``)."""
        await self.liveness.agent_lost(session_id, run_id)

    async def _time_out(self, session_id: str, run_id: str) -> None:
        await self.liveness.time_out(session_id, run_id)

    def stats(self) -> dict[str, Any]:
        """Numbers for ``/healthz``."""
        return {
            "connections": len(self.peers),
            "channels": len(self.channels),
            "workers": sum(len(w) for w in self.dispatcher.workers.values()),
        }


def _dispatcher(
    store: Store, options: RelayOptions, metrics: Metrics, expire: Expire
) -> Dispatcher | RedisDispatcher | ShardedDispatcher:
    """The dispatcher for ``store``: shared through Redis, or this process's own."""
    if store.url.startswith(_REDIS_URLS):
        # These import redis: only when the store is Redis.
        from ._cluster import RedisDispatcher
        from ._cluster_shards import ShardedDispatcher
        from .store._redis import RedisStore
        from .store._redis_shards import ShardedRedisStore

        grace = options.agent_grace
        if isinstance(store, ShardedRedisStore):
            return ShardedDispatcher(store, grace=grace, expire=expire, metrics=metrics)
        assert isinstance(store, RedisStore)
        return RedisDispatcher(store, grace=grace, expire=expire, metrics=metrics)
    return Dispatcher(grace=options.agent_grace, expire=expire, metrics=metrics)


def _store_hold_check(hold: AdmissionHold, session_id: str) -> Callable[[str], None]:
    """The ``admit`` callback of ``Channel.publish``: raise the store hold's refusal."""

    def admit(entry_id: str) -> None:
        refusal = hold.admit_stored(session_id, entry_id)
        if refusal is not None:
            raise refusal.error()

    return admit


def _write_only(sender: Sender) -> bool:
    """True for a token that grants rights in the session but not ``subscribe``."""
    return sender.caps is not None and bool(sender.caps) and SUBSCRIBE not in sender.caps


def _scoped(user_id: str, claimed: str) -> str:
    """A client id that belongs to ``user_id`` (kept as it is when it already does).

    The user part ends at the first ``/``. A ``/`` or ``%`` in the user id is
    percent-encoded. Otherwise user ``alice`` claiming ``x/phone`` and user ``alice/x``
    claiming ``phone`` would both be ``alice/x/phone``, one connection taking the other
    user's agent Runs: ownership and presence go by client id.
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
