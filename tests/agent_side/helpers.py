"""The client end of agent tests: a raw ``Connection(role="client")`` that records entries."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from transport._tree import ConversationTree
from transport.asyncio._connection import Connection
from transport.frames import (
    Attach,
    Attached,
    CancelEntry,
    Deliver,
    MessageEntry,
    Publish,
    RelayFrame,
)
from transport.messages import new_id, user_message

Entry = dict[str, Any]


class ClientEnd:
    """Publishes prompts, steering and cancels to one session; folds what it sees."""

    def __init__(self, url: str, session_id: str) -> None:
        self.session_id = session_id
        self.entries: list[Entry] = []
        self.tree = ConversationTree()
        self._changed = anyio.Event()
        self.conn = Connection(url, role="client", on_frame=self._on_frame)

    def _on_frame(self, frame: RelayFrame) -> None:
        if isinstance(frame, Deliver) and frame.session_id == self.session_id:
            self._take(frame.entries)

    def _take(self, entries: list[Entry]) -> None:
        for entry in entries:
            if self.entries and entry["serial"] <= self.entries[-1]["serial"]:
                continue
            self.entries.append(entry)
            self.tree.fold(entry)
        self._changed.set()
        self._changed = anyio.Event()

    async def attach(self) -> None:
        reply = await self.conn.request(Attach(req=0, session_id=self.session_id))
        assert isinstance(reply, Attached)
        self._take(reply.entries)

    async def publish(self, entry: Any) -> int:
        reply = await self.conn.request(Publish(req=0, session_id=self.session_id, entry=entry))
        serial = getattr(reply, "serial", None)
        assert isinstance(serial, int)
        return serial

    async def prompt(
        self, text: str, *, run_id: str | None = None, agent: str | None = None
    ) -> str:
        run_id = run_id or f"run-{new_id()[:8]}"
        message = user_message(text)
        await self.publish(MessageEntry(id=new_id(), run_id=run_id, message=message, agent=agent))
        return run_id

    async def steer(self, run_id: str, text: str) -> str:
        message = user_message(text)
        await self.publish(
            MessageEntry(id=new_id(), run_id=run_id, intent="steer", message=message)
        )
        return message.id

    async def cancel(self, run_id: str, reason: str | None = None) -> None:
        await self.publish(CancelEntry(id=new_id(), run_id=run_id, reason=reason))

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds after some delivery."""
        with anyio.fail_after(timeout):
            while not predicate():
                await self._changed.wait()

    async def wait_status(self, run_id: str, *statuses: str, timeout: float = 10.0) -> None:
        def ok() -> bool:
            info = self.tree.run(run_id)
            return info is not None and info.status in statuses

        await self.wait_for(ok, timeout)

    def of(self, run_id: str, kind: str) -> list[Entry]:
        """The run's entries of one kind, in serial order."""
        return [e for e in self.entries if e["run_id"] == run_id and e["kind"] == kind]

    def response_texts(self, run_id: str) -> list[str]:
        """The text of each response of the run, as folded."""
        out = []
        for vm in self.tree.messages():
            if vm.run_id == run_id and vm.message.role == "assistant":
                out.append(vm.message.text())
        return out


@asynccontextmanager
async def client_end(url: str, session_id: str) -> AsyncIterator[ClientEnd]:
    """A connected, attached ``ClientEnd``."""
    end = ClientEnd(url, session_id)
    async with end.conn:
        await end.attach()
        yield end
