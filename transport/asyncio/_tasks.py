"""``Background``: tasks started in a task group that one call can cancel, and only them.

A task group entered by ``async with`` also covers the body of that block. So cancelling its
scope from ``aclose()`` would cancel the caller's code too. And an ``aclose()`` called from
another scope, such as a caller's ``fail_after``, must not leave the group at all; only the
``async with`` exit does.

So each task started here runs in a cancel scope of its own, and ``cancel()`` cancels those
scopes alone. A task cancelled so ends quietly, and its task group keeps running.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

__all__ = ["Background"]


class Background:
    """The tasks one owner starts in its task group, cancellable together."""

    __slots__ = ("_scopes",)

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()

    def start_soon(
        self, tg: anyio.abc.TaskGroup, fn: Callable[..., Awaitable[Any]], *args: Any
    ) -> None:
        """Start ``fn(*args)`` in ``tg``, in a cancel scope ``cancel()`` cancels."""
        scope = anyio.CancelScope()
        self._scopes.add(scope)

        async def run() -> None:
            try:
                with scope:
                    await fn(*args)
            finally:
                self._scopes.discard(scope)

        tg.start_soon(run)

    def cancel(self) -> None:
        """Cancel every task started here that has not ended."""
        for scope in list(self._scopes):
            scope.cancel()
