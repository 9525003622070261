"""Trying a Run's end again while the relay's store refuses it (internal to ``agent_side``).

The relay's store may refuse a Run's end with ``STORE_UNAVAILABLE``. In
explicit mode the end is then tried again in the background while the session
is open. A worker awaits ``until_stored`` itself while it holds the session.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from transport.errors import STORE_UNAVAILABLE, RunwireError

from ._options import EndReason
from ._run_link import RunLink

__all__ = ["EndAsked", "RunEndRetry"]

log = logging.getLogger("runwire.agent")

EndAsked = tuple[EndReason, RunwireError | BaseException | str | None]


class RunEndRetry:
    """Tries the end the store refused again, with a doubling wait, until it is stored."""

    def __init__(
        self,
        run_id: str,
        link: RunLink,
        end: Callable[..., Awaitable[None]],
        *,
        ended: Callable[[], bool],
        ending: Callable[[], bool],
        delays: Callable[[], tuple[float, float]],
    ) -> None:
        self.run_id = run_id
        self.asked: EndAsked | None = None
        """The end asked for that the store refused, still to try again (None: none)."""
        self._link = link
        self._end = end
        self._ended = ended
        self._ending = ending
        self._delays = delays

    def later(self, reason: EndReason, error: RunwireError | BaseException | str | None) -> None:
        """In explicit mode, try the end again in the background.

        A worker (``agent_side.Agent``) tries its Runs' ends again itself, holding the
        session meanwhile. Here the session is the caller's, open until their block exits.
        """
        if not self._link.owns_link:
            return
        pending = self.asked is not None
        self.asked = (reason, error)  # the newest asked for
        if not pending and not self._link.spawn(self._retry):
            self.asked = None

    async def until_stored(
        self, reason: EndReason, error: RunwireError | BaseException | str | None
    ) -> None:
        """Try the end again until it is stored, the Run ended otherwise, or the session
        closes."""
        self.asked = (reason, error)
        await self._retry()

    async def _retry(self) -> None:
        """Every ``first`` seconds at first, then doubling up to ``most``: a Run nobody
        ends is ended ``AGENT_LOST`` by the relay."""
        delay, most = self._delays()
        try:
            while self.asked is not None and not self._ended():
                await anyio.sleep(delay)
                delay = min(delay * 2, most)
                if self._ended() or self._ending() or self.asked is None:
                    continue  # an end of the caller's is on its way
                reason, error = self.asked
                try:
                    await self._end(reason, error=error)
                except RunwireError as exc:
                    if exc.code != STORE_UNAVAILABLE:
                        log.warning("could not end run %s: %s", self.run_id, exc)
                        return
                    log.info("could not end run %s yet: %s", self.run_id, exc)
        finally:
            self.asked = None
