"""Publishes stay in order across a reconnect while an earlier one waits to go again.

The store refuses a publish ``a`` once, while a later publish ``b`` of the same connection
is on its way. Right after the relay's refusal of ``a`` reaches the SDK, the link drops, so
``b`` has no reply yet. The SDK connects again. The new connection has no relay hold behind
``a``, and the store is back. The SDKs must still send ``b`` only after ``a``: the relay
stores the publishes in the order they were made (docs/explanation/publish-lane.md).

A frame proxy between the SDK and a real relay drops the link at that moment.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

import relay
from transport.asyncio._connection import Connection
from transport.errors import STORE_UNAVAILABLE
from transport.frames import Attach, MessageEntry, Publish
from transport.messages import new_id, user_message

from ..agent_side.test_store_outage import Outage
from .test_js_store_outage import run_client, text

pytestmark = pytest.mark.anyio


class DropAfterRefusal:
    """Forwards WebSocket connections to ``target``. On the first connection, it passes the
    first refusal of the store (``STORE_UNAVAILABLE`` without ``details.held``) to the SDK and
    then drops the link: nothing more goes either way. Later connections pass everything."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.url = ""
        self.dropped = False

    @asynccontextmanager
    async def running(self) -> AsyncIterator[DropAfterRefusal]:
        async with serve(self._handle, "127.0.0.1", 0, max_size=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            self.url = f"ws://127.0.0.1:{port}"
            yield self

    def _the_stores_refusal(self, raw: str | bytes) -> bool:
        frame = json.loads(raw)
        error = frame.get("error") if frame.get("type") == "error" else None
        return (
            isinstance(error, dict)
            and error.get("code") == STORE_UNAVAILABLE
            and "held" not in (error.get("details") or {})
        )

    async def _handle(self, ws: ServerConnection) -> None:
        async with connect(self.target, max_size=None) as up:

            async def pump_up() -> None:
                async for message in ws:
                    await up.send(message)

            async def pump_down() -> None:
                async for message in up:
                    await ws.send(message)
                    if not self.dropped and self._the_stores_refusal(message):
                        self.dropped = True
                        await ws.close(1001, "link dropped")
                        return

            async def pump(up_side: bool, tg: anyio.abc.TaskGroup) -> None:
                try:
                    await (pump_up() if up_side else pump_down())
                except ConnectionClosed:
                    pass
                tg.cancel_scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, True, tg)
                tg.start_soon(pump, False, tg)


def refuse_the_first_once(outage: Outage, kind: str = "message") -> list[str]:
    """The store refuses the first entry of ``kind`` once (slowly), then takes everything."""
    first: list[str] = []

    def down(entry_id: str, entry: dict[str, Any]) -> bool:
        if not first and entry["kind"] == kind:
            first.append(entry_id)
        return bool(first) and entry_id == first[0] and first[0] not in outage.refused

    outage.down = down
    return first


async def test_python_a_later_publish_is_not_stored_before_one_refused_before_a_drop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        refuse_the_first_once(outage)
        entries = [
            MessageEntry(id=new_id(), run_id=new_id(), message=user_message(t)) for t in "ab"
        ]
        async with DropAfterRefusal(server.url).running() as proxy:

            async def attach(conn: Connection) -> None:
                await conn.request(Attach(req=0, session_id="s"), wait_ready=False)

            async with Connection(proxy.url, on_connect=attach) as conn:

                async def publish(entry: MessageEntry, slot: int) -> None:
                    await conn.request(Publish(req=0, session_id="s", entry=entry), slot=slot)

                with anyio.fail_after(15):
                    async with anyio.create_task_group() as tg:
                        for entry in entries:  # b goes out before a's refusal comes
                            tg.start_soon(publish, entry, conn.reserve())
            assert proxy.dropped
        assert outage.refused == [entries[0].id]
        assert outage.stored == [e.id for e in entries]


async def test_js_a_later_send_is_not_stored_before_one_refused_before_a_drop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        refuse_the_first_once(outage)
        async with DropAfterRefusal(server.url).running() as proxy:
            result = await run_client(proxy.url, "js-drop", "order")
            assert proxy.dropped
        assert all("ok" in r for r in result["sends"]), result
        assert len(outage.refused) == 1
        stored = await server.store.read("js-drop", after=0, limit=100)
        assert [text(orjson.loads(e.data)) for e in stored] == ["m0", "m1", "m2"]
