"""``Channels``: the sessions one relay node has loaded.

A session's ``Channel`` is loaded once, however many ask for it at once, and let go
when nobody on this node uses it any more. Users are its subscribers, its listeners,
a publish that holds its lock, and *holds* (``Channels.hold``): someone who uses the
channel for a while without subscribing, such as an HTTP request.

A channel with Runs waiting for a slot of ``max_concurrent_runs`` stays loaded. A
slot freed in another session gives them their turn only while it is loaded.

A session that loads with entries still to publish has them published then. That
happens when its node stored an entry and stopped before it published what the
entry called for. The ``Reactor`` (``relay._reactions``) publishes them.

See docs/explanation/relay-internals.md ("A node's parts") and scaling.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from transport._runs import Policy, RunRecord, RunRegistry, SlotBook

from ._channel import Channel, Committed, MakeRegistry
from ._deadlines import Deadlines
from ._metrics import Metrics
from ._options import RelayOptions
from .store._base import Store

__all__ = ["Channels", "Reactor", "oldest_waiting", "registry_maker", "waits_for_a_slot"]


class Reactor(Protocol):
    """What ``Channels`` asks of the relay's reactions (``relay._reactions.Reactions``)."""

    def reacting(self, session_id: str) -> bool:
        """True while the relay publishes entries the session is still to get."""
        ...

    def react_soon(self, channel: Channel) -> None:
        """Publish what the session is still to get, soon."""
        ...

    def give_turns(self, channel: Channel | None = None) -> None:
        """Give the Runs waiting for a slot their turns, oldest first."""
        ...


class Channels:
    """The loaded channels of one relay node, by session id (``loaded``).

    ``shares_slots``: True on a node of several (Redis). Such a node counts only the
    Runs of the sessions it has loaded, so it gives back a session's slots when it lets
    the session go. ``reactor`` must be set before the first channel loads.
    """

    def __init__(
        self,
        store: Store,
        options: RelayOptions,
        metrics: Metrics,
        *,
        committed: Committed,
        make_registry: MakeRegistry,
        deadlines: Deadlines,
        slots: SlotBook,
        shares_slots: bool,
    ) -> None:
        self.store = store
        self.options = options
        self.metrics = metrics
        self.loaded: dict[str, Channel] = {}
        self._loading: dict[str, asyncio.Future[Channel]] = {}
        self._committed = committed
        self._make_registry = make_registry
        self.deadlines = deadlines
        self.slots = slots
        self.shares_slots = shares_slots
        self.reactor: Reactor | None = None

    def _reactor(self) -> Reactor:
        if self.reactor is None:
            raise RuntimeError("Channels.reactor is not set")
        return self.reactor

    async def channel(self, session_id: str, *, react: bool = True) -> Channel:
        """The loaded channel of a session, loading it once however many ask at once.

        A session that loads with entries still to publish has them published now,
        unless not ``react``: then the caller sees to it.
        """
        channel = self.loaded.get(session_id)
        if channel is not None:
            if not channel.reset:
                return channel
            # The store lost its history: whoever still uses this one finishes with it,
            # everyone from now on gets the session as the store has it now.
            self.forget(channel)
        loading = self._loading.get(session_id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[Channel] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            channel = await self._load(session_id)
            if react and channel.registry.due():
                # Its node stored an entry and stopped before it published what that
                # entry called for (a resume, a queued Run's turn): still to publish.
                self._reactor().react_soon(channel)
            future.set_result(channel)
            return channel
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            del self._loading[session_id]

    async def _load(self, session_id: str) -> Channel:
        channel = Channel(
            self.store,
            session_id,
            self._committed,
            self._make_registry,
            input_checks=self.options.input_checks,
        )
        try:
            await channel.load()
        except BaseException:
            channel.close()
            raise
        self.loaded[session_id] = channel
        self.metrics.channels.set(len(self.loaded))
        for record in channel.registry.active():
            self.deadlines.follow(record)  # a node that timed them may have stopped
        return channel

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[Channel]:
        """The session's channel, kept loaded for the block and released after it.

        It is forgotten then if nobody on this node watches it. So a user that does not
        subscribe, such as an HTTP request, neither loses it midway nor pins it.
        """
        channel = await self.channel(session_id)
        while self.loaded.get(session_id) is not channel:
            # Released while this task waited for another's load of it: load it again.
            channel = await self.channel(session_id)
        channel.holds += 1
        try:
            yield channel
        finally:
            channel.holds -= 1
            self.release(channel)

    def release(self, channel: Channel) -> None:
        """Forget a channel nobody on this node uses; its store subscription ends.

        A channel with queued Runs, or paused ones still to get their resume, stays:
        a slot freed in another session gives them their turn only while it is loaded.
        """
        if (
            channel.subscribers
            or channel.holds
            or channel.listeners
            or channel.busy()
            or self._reactor().reacting(channel.session_id)
            or waits_for_a_slot(channel)
        ):
            return
        self.forget(channel)

    def forget(self, channel: Channel) -> None:
        """Unload ``channel`` if it is the session's loaded one.

        A node of several also gives back the slots of the session's Runs to the Runs
        waiting for one on it. It would not see these Runs end. A single relay keeps
        them, since every Run goes through it.
        """
        if self.loaded.get(channel.session_id) is not channel:
            return
        del self.loaded[channel.session_id]
        channel.close()
        if self.shares_slots:
            before = self.slots.in_use
            self.slots.replace_session(channel.session_id, [])
            if self.slots.in_use < before and self.slots.limit is not None:
                self._reactor().give_turns()
        self.metrics.channels.set(len(self.loaded))

    def waiting_for_a_slot(self) -> list[Channel]:
        """The loaded channels with a Run waiting for a slot."""
        return [c for c in self.loaded.values() if waits_for_a_slot(c)]


def waits_for_a_slot(channel: Channel) -> bool:
    """True if a Run of the session waits for a slot: queued, or paused and still to get
    its resume, which takes a slot. Not once the store lost the session (``reset``): its
    records are stale and nothing of it waits."""
    if channel.reset:
        return False
    return bool(channel.registry.queued() or channel.registry.resumes_owed())


def oldest_waiting(channel: Channel) -> int:
    """When the session's oldest Run waiting for a slot was created (0: none waits)."""
    waiting = [*channel.registry.queued(), *channel.registry.resumes_owed()]
    return min((r.created_ts for r in waiting), default=0)


def registry_maker(policy: Policy, slots: SlotBook) -> MakeRegistry:
    """Builds sessions' registries that share the relay's ``policy`` and ``slots``."""

    def make(session_id: str, records: list[RunRecord]) -> RunRegistry:
        return RunRegistry(session_id, records, policy=policy, slots=slots)

    return make
