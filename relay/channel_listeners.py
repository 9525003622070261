"""Who a ``Channel`` tells besides its subscribers: its listeners and its waiters.

A listener is a callback ``Channel.listen`` added. It hears each entry the channel
takes in, and once if the channel resets. A listener that fails is logged and the
others still hear.

A waiter is a future that a publish awaits until the channel takes in its serial.
Closing the channel fails every waiter still waiting.

See docs/explanation/relay-internals.md ("A channel") for how a channel uses them.
"""

from __future__ import annotations

import asyncio
import logging

from .store.base import OnEntry, OnReset, StoredEntry, Unsubscribe

__all__ = ["Listeners", "SerialWaiters"]

log = logging.getLogger("runwire.relay")


class Listeners:
    """The callbacks a channel calls with each entry it takes in, and on a reset."""

    __slots__ = ("_items", "_session_id")

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._items: list[tuple[OnEntry, OnReset | None]] = []

    @property
    def entry_callbacks(self) -> list[OnEntry]:
        """The entry callbacks, in the order they were added (a copy)."""
        return [fn for fn, _ in self._items]

    def add(self, fn: OnEntry, on_reset: OnReset | None) -> Unsubscribe:
        """Add ``fn`` and ``on_reset``; returns the function that removes both (idempotent)."""
        listener = (fn, on_reset)
        self._items.append(listener)

        def stop() -> None:
            if listener in self._items:
                self._items.remove(listener)

        return stop

    def entry(self, stored: StoredEntry) -> None:
        """Call every entry callback with ``stored``."""
        for listener, _ in list(self._items):
            try:
                listener(stored)
            except Exception:
                log.exception("channel %s: a listener failed", self._session_id)

    def reset(self) -> None:
        """Call every reset callback."""
        for _, on_reset in list(self._items):
            if on_reset is None:
                continue
            try:
                on_reset()
            except Exception:
                log.exception("channel %s: a listener failed on reset", self._session_id)


class SerialWaiters:
    """Futures waiting until a channel has taken in a serial."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[tuple[int, asyncio.Future[None]]] = []

    def __bool__(self) -> bool:
        return bool(self._items)

    def wait_for(self, serial: int) -> asyncio.Future[None]:
        """A future done once ``wake`` is called with ``serial`` or a later one."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._items.append((serial, waiter))
        return waiter

    def wake(self, last: int) -> None:
        """The channel took in everything up to ``last``: end the waits it settles."""
        ready = [w for s, w in self._items if s <= last]
        self._items = [(s, w) for s, w in self._items if s > last]
        for waiter in ready:
            if not waiter.done():
                waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        """End every wait with ``error``."""
        waiters, self._items = self._items, []
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)
