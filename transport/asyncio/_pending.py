"""The requests of one connection that still wait for their reply.

Each request the SDK sends gets a fresh ``req`` id. ``Requests.open`` encodes the frame and
refuses one over the relay's frame limit. ``Requests.reply`` matches a reply frame to its
request by ``req``, and ``Requests.fail_all`` ends them all with one error. ``Connection``
sends them, and sends them again after a reconnect (transport/asyncio/_connection.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from pydantic import BaseModel

from .. import _codec as codec
from ..errors import PAYLOAD_TOO_LARGE, RunwireError
from ..frames import Error, RelayFrame

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "PendingRequest", "Requests", "SendAgain"]

DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
"""The largest frame a request may be before the relay's welcome says its own limit."""


class PendingRequest:
    """One request sent, or to send, and its reply once it came."""

    __slots__ = ("again", "data", "done", "error", "place", "reply", "req", "sent_on", "text")

    def __init__(self, req: int, data: dict[str, Any], text: bytes, place: int) -> None:
        self.req = req
        self.data = data
        self.text = text
        """The frame as sent: UTF-8 JSON."""
        self.place = place
        """Its place in the publish lane; 0 for a request that is no publish."""
        self.again = False
        """True when it went back in line after a reconnect: its publish asks for its turn."""
        self.sent_on = -1
        """The connect it was last sent on (``Connection.connects``); -1 before it was sent."""
        # asyncio's own Event: this module is asyncio-only, and anyio's costs a
        # backend lookup per request (one request per streamed append).
        self.done = asyncio.Event()
        self.reply: RelayFrame | None = None
        self.error: RunwireError | None = None

    def fail(self, error: RunwireError) -> None:
        """End the request with ``error``, unless it ended already."""
        if not self.done.is_set():
            self.error = error
            self.done.set()

    def send_again_later(self) -> None:
        """End the wait for a reply: the publish goes back in line and asks for its turn."""
        self.again = True
        self.done.set()

    async def wait_ready(self, ready: anyio.Event) -> None:
        """Wait until the link is ``ready``, or the request ended meanwhile.

        Waiting for ``ready`` alone would hang forever after ``aclose`` or a final error."""
        if ready.is_set() or self.done.is_set():
            return
        async with anyio.create_task_group() as tg:

            async def on_ready() -> None:
                await ready.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(on_ready)
            await self.done.wait()
            tg.cancel_scope.cancel()


class Requests:
    """The requests of one connection still waiting for a reply, by ``req``, oldest first."""

    def __init__(self) -> None:
        self._newest = 0
        self._waiting: dict[int, PendingRequest] = {}

    def open(self, frame: BaseModel, limit: int, place: int = 0) -> PendingRequest:
        """Give ``frame`` the next ``req`` id and keep it until ``close``.

        Raises ``PAYLOAD_TOO_LARGE`` over ``limit`` bytes. The relay would refuse such a
        frame, or close the socket (1009) unread over its hard limit: a request sent again
        after every reconnect would then close every one of them."""
        data = frame.model_dump(mode="json", exclude_none=True)
        data["req"] = req = self._newest + 1
        text = codec.dumps(data)
        if len(text) > limit:
            raise RunwireError(
                PAYLOAD_TOO_LARGE,
                f"frame of {len(text)} bytes exceeds the relay's limit of {limit}",
                details={"size": len(text), "limit": limit},
            )
        self._newest = req
        pending = self._waiting[req] = PendingRequest(req, data, text, place)
        return pending

    def close(self, pending: PendingRequest) -> None:
        """Forget ``pending``: its caller has its reply or gave up on it."""
        self._waiting.pop(pending.req, None)

    def waiting(self) -> list[PendingRequest]:
        """The requests still waiting for a reply, in ``req`` order."""
        return list(self._waiting.values())

    def reply(self, req: object, frame: RelayFrame) -> None:
        """``frame`` answers the request ``req``: an ``error`` frame fails it."""
        pending = self._waiting.get(req) if isinstance(req, int) else None
        if pending is None or pending.done.is_set():
            return
        if isinstance(frame, Error):
            pending.error = RunwireError.from_wire(frame.error.model_dump())
        else:
            pending.reply = frame
        pending.done.set()

    def fail_all(self, error: RunwireError) -> None:
        """End every request still waiting with ``error``."""
        for pending in list(self._waiting.values()):
            pending.fail(error)


class SendAgain(Exception):
    """Raised for a publish that went back in line after a reconnect: it asks for its turn."""
