"""The pieces of a Run's replies on their way to the relay (internal to ``agent_side``).

``pipe()`` publishes a reply piece by piece through ``RunOutput``. Once the
worker lost the Run's session, every piece still waiting gives up with the loss,
since the relay ends the Run ``AGENT_LOST`` and would never take them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from transport.errors import RunwireError
from transport.frames import EntryBody

__all__ = ["RunOutput"]


class RunOutput:
    """Publishes one Run's reply pieces, and gives them up once the Run is lost."""

    def __init__(self, publish: Callable[[EntryBody], Awaitable[None]]) -> None:
        self._publish = publish
        self._lost: RunwireError | None = None
        self._waiting: set[anyio.CancelScope] = set()

    async def publish(self, entry: EntryBody) -> None:
        """Publish a piece of a reply; raise the loss once the Run was lost."""
        if self._lost is not None:
            raise self._lost
        with anyio.CancelScope() as scope:
            self._waiting.add(scope)
            try:
                await self._publish(entry)
            finally:
                self._waiting.discard(scope)
        if scope.cancelled_caught and self._lost is not None:
            raise self._lost

    def lose(self, error: RunwireError) -> None:
        """The Run was lost: the pieces still waiting give up with ``error``."""
        self._lost = error
        for scope in list(self._waiting):
            scope.cancel()
