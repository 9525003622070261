"""``Publisher``: the asyncio driver of one connection's publish lane.

The lane (``transport._lane.PublishLane``) decides the order of the publishes and when a
refused one goes again. The publisher does what it says. It waits for each publish's turn,
has the connection send it, passes the reply to the lane, and wakes the publishes that
wait when the lane changed. ``Connection`` sends the frames (transport/asyncio/_connection.py).
Why the lane keeps publishes in order is told in docs/explanation/publish-lane.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from .._lane import PublishLane
from ..errors import RunwireError
from ..frames import Publish, RelayFrame
from ._pending import SendAgain

__all__ = ["Exchange", "Publisher"]

log = logging.getLogger("runwire.connection")

Exchange = Callable[[Publish, bool, int], Awaitable[RelayFrame]]
"""Sends a publish (frame, wait_ready, place) and returns its reply; raises on an error reply."""


class Publisher:
    """Sends one connection's publishes in the order of their places in ``lane``."""

    def __init__(self, lane: PublishLane, exchange: Exchange, check: Callable[[], None]) -> None:
        self.lane = lane
        self._exchange = exchange
        self._check = check  # raises when the connection is closed or gave up
        self._waiting = 0  # publishes waiting for their turn
        self._changed = asyncio.Event()

    def release(self, place: int) -> None:
        """Give back a place no publish will use (idempotent)."""
        if self.lane.release(place) and self._waiting:
            self.wake()

    def sent(self, place: int) -> None:
        """The publish of ``place`` is in line on the connection: the next one may go."""
        if self.lane.sent(place) and self._waiting:
            self.wake()

    def wake(self) -> None:
        """Wake the publishes waiting for their turn: the lane changed, or the link ended."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def publish(self, frame: Publish, wait_ready: bool, place: int) -> RelayFrame:
        """Send ``frame`` in the turn of ``place``, again after each refusal the lane retries.

        Raises the relay's error when the lane gives up on it."""
        lane = self.lane
        try:
            while True:
                await self._turn(place)
                try:
                    reply = await self._exchange(frame, wait_ready, place)
                except SendAgain:
                    continue  # back in line behind an earlier publish that goes again
                except RunwireError as exc:
                    retry_at = lane.refused(place, frame.entry.id, exc, time.monotonic())
                    if retry_at is None:
                        raise
                    log.debug("publish refused %s; again at %.3f", exc, retry_at)
                    continue  # it keeps its place: nothing after it goes before it
                lane.accepted(place)
                return reply
        finally:
            if lane.finish(place):
                self.wake()

    async def _turn(self, place: int) -> None:
        """Wait until the lane lets the publish of ``place`` go; raise when it gives up."""
        while True:
            self._check()
            turn = self.lane.turn(place, time.monotonic())
            if turn.go:
                return
            timeout = None if turn.wake_at is None else turn.wake_at - time.monotonic()
            changed = self._changed
            self._waiting += 1
            try:
                with anyio.move_on_after(timeout):
                    await changed.wait()
            finally:
                self._waiting -= 1
