"""A scripted agent for client tests: a raw ``Connection(role="agent")`` publishing entries.

No agent SDK is involved: each method publishes exactly the entry it names,
so a test decides what the client sees and when.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import anyio

from transport.asyncio._connection import Connection
from transport.frames import (
    Ack,
    Attach,
    Attached,
    Deliver,
    EntryBody,
    Publish,
    RelayFrame,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
)
from transport.messages import TextPart, UIMessage, new_id


class FakeAgent:
    """``async with FakeAgent(url, session_id) as agent:``; it attaches and records entries."""

    def __init__(self, url: str, session_id: str, *, token: str | None = None) -> None:
        self.session_id = session_id
        self.entries: list[dict[str, Any]] = []
        self.conn = Connection(
            url, role="agent", token=token, on_frame=self._on_frame, on_connect=self._on_connect
        )
        self._changed: anyio.Event | None = None

    async def __aenter__(self) -> FakeAgent:
        await self.conn.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.conn.__aexit__(*exc_info)

    # ---------------------------------------------------------- receiving --

    async def _on_connect(self, conn: Connection) -> None:
        last = self.entries[-1]["serial"] if self.entries else None
        reply = await conn.request(
            Attach(req=0, session_id=self.session_id, from_serial=last, limit=1000),
            wait_ready=False,
        )
        assert isinstance(reply, Attached)
        self._take(reply.entries)

    def _on_frame(self, frame: RelayFrame) -> None:
        if isinstance(frame, Deliver) and frame.session_id == self.session_id:
            self._take(frame.entries)

    def _take(self, entries: Iterable[dict[str, Any]]) -> None:
        last = self.entries[-1]["serial"] if self.entries else 0
        self.entries.extend(e for e in entries if e["serial"] > last)
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first entry (received so far or later) that matches."""
        while True:
            for entry in self.entries:
                if predicate(entry):
                    return entry
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def wait_steer(self, message_id: str) -> dict[str, Any]:
        """Wait until the steering message with that id reached the agent."""
        return await self.wait_for(
            lambda e: e["kind"] == "message" and e["message"]["id"] == message_id
        )

    # --------------------------------------------------------- publishing --

    async def publish(self, entry: EntryBody) -> int:
        """Publish one entry; its serial."""
        reply = await self.conn.request(Publish(req=0, session_id=self.session_id, entry=entry))
        assert isinstance(reply, Ack) and reply.serial is not None
        return reply.serial

    async def status(self, run_id: str, status: str) -> int:
        """Publish a Run lifecycle entry."""
        return await self.publish(RunEntry(id=new_id(), run_id=run_id, status=status))  # type: ignore[arg-type]

    async def start(self, run_id: str) -> int:
        return await self.status(run_id, "active")

    async def suspend(self, run_id: str) -> int:
        return await self.status(run_id, "suspended")

    async def end(self, run_id: str, status: str = "complete") -> int:
        return await self.status(run_id, status)

    async def open(
        self, run_id: str, *, seen: Iterable[str] = (), message_id: str | None = None
    ) -> str:
        """Open a response; its message id."""
        mid = message_id or new_id()
        await self.publish(
            ResponseOpen(id=new_id(), run_id=run_id, message_id=mid, seen=list(seen))
        )
        return mid

    async def append(self, run_id: str, message_id: str, *deltas: str) -> None:
        """Append text deltas (one entry)."""
        chunks = [{"type": "text-delta", "delta": d} for d in deltas]
        await self.publish(
            ResponseAppend(id=new_id(), run_id=run_id, message_id=message_id, chunks=chunks)
        )

    async def close(self, run_id: str, message_id: str, text: str) -> None:
        """Close a response with its whole text."""
        message = UIMessage(id=message_id, role="assistant", parts=[TextPart(text=text)])
        await self.publish(
            ResponseClose(id=new_id(), run_id=run_id, message_id=message_id, message=message)
        )

    async def reply(self, run_id: str, text: str, *, seen: Iterable[str] = ()) -> str:
        """A whole response: open, one append per word, close; its message id."""
        mid = await self.open(run_id, seen=seen)
        for word in text.split(" "):
            await self.append(run_id, mid, word + " ")
        await self.close(run_id, mid, text)
        return mid


async def channel_entries(url: str, session_id: str) -> list[dict[str, Any]]:
    """Everything the channel holds (up to 1000 entries), read by a fresh connection."""
    async with Connection(url, role="client") as conn:
        reply = await conn.request(Attach(req=0, session_id=session_id, limit=1000))
        assert isinstance(reply, Attached)
        return reply.entries


def prompt_entry(
    serial: int, message_id: str, run_id: str = "run-1", text: str = "hi", intent: str = "prompt"
) -> dict[str, Any]:
    """A relay-stamped user message entry, as delivered (for tests without a relay)."""
    return {
        "serial": serial,
        "kind": "message",
        "id": message_id,
        "run_id": run_id,
        "intent": intent,
        "message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]},
    }


def run_entry(serial: int, run_id: str, status: str) -> dict[str, Any]:
    """A relay-stamped Run lifecycle entry."""
    return {
        "serial": serial,
        "kind": "run",
        "id": f"run-{serial}",
        "run_id": run_id,
        "status": status,
    }
