"""``AbortController`` and ``AbortSignal``, as the web platform defines them.

A signal fires once, with an optional reason, and never un-fires. Callbacks run synchronously
at the moment it fires, in the order they were added. So ``on_steer`` can abort a model call
before the next token is handled.

A callback that raises is logged, and the others still run, as on the web platform. The SDK's
own listeners, such as the one that stops a ``pipe()``, sit beside the user's on the path that
delivers frames. One bad listener must break neither.

``AbortSignal.any()`` fires when any of its sources fires. ``scope()`` cancels an
``async with`` block when the signal fires.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

__all__ = ["AbortController", "AbortSignal"]

log = logging.getLogger("runwire.abort")

Callback = Callable[[Any], object]


class AbortSignal:
    """Fires once; see ``AbortController``."""

    def __init__(self) -> None:
        self._aborted = False
        self._reason: Any = None
        self._callbacks: list[Callback] = []
        self._event: anyio.Event | None = None

    @property
    def aborted(self) -> bool:
        """True once the signal fired."""
        return self._aborted

    @property
    def reason(self) -> Any:
        """The reason given to ``abort()``, or None."""
        return self._reason

    def add_callback(self, fn: Callback) -> Callable[[], None]:
        """Call ``fn(reason)`` when the signal fires (at once if it has). Returns a remover.

        Called at once, ``fn``'s exception reaches the caller; called when the
        signal fires, it is logged and the other callbacks still run.
        """
        if self._aborted:
            fn(self._reason)
            return lambda: None
        self._callbacks.append(fn)

        def remove() -> None:
            try:
                self._callbacks.remove(fn)
            except ValueError:
                pass

        return remove

    async def wait(self) -> Any:
        """Wait until the signal fires; returns its reason."""
        if not self._aborted:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        return self._reason

    @asynccontextmanager
    async def scope(self) -> AsyncIterator[anyio.CancelScope]:
        """Run a block that is cancelled (silently) when the signal fires."""
        with anyio.CancelScope() as cs:
            remove = self.add_callback(lambda _reason: cs.cancel())
            try:
                yield cs
            finally:
                remove()

    def fire(self, reason: Any) -> None:
        """Fire the signal with ``reason``; later calls do nothing.

        This is the controller's side of the signal, for ``AbortController.abort``
        and ``AbortSignal.any``. Code that wants to abort should own an
        ``AbortController`` and call its ``abort()``.
        """
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        if self._event is not None:
            self._event.set()
        for fn in callbacks:
            _call_listener(fn, reason)

    @staticmethod
    def any(*signals: AbortSignal) -> AbortSignal:
        """A signal that fires with the reason of the first of ``signals`` to fire."""
        combined = AbortSignal()
        removers: list[Callable[[], None]] = []

        def on_fire(reason: Any) -> None:
            for remove in removers:
                remove()
            combined.fire(reason)

        for signal in signals:
            if signal.aborted:
                combined.fire(signal.reason)
                break
        else:
            for signal in signals:
                removers.append(signal.add_callback(on_fire))
        return combined

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self._aborted}, reason={self._reason!r})"


def _call_listener(fn: Callback, reason: Any) -> None:
    """Call one listener of a firing signal; its exception is logged, never raised."""
    try:
        fn(reason)
    except Exception:
        log.exception("an abort listener failed (%r)", fn)


class AbortController:
    """Owns one ``AbortSignal`` and fires it with ``abort(reason)``."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        """Fire the signal; later calls do nothing."""
        self.signal.fire("aborted" if reason is None else reason)
