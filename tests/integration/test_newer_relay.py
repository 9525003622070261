"""The SDKs against a relay one version ahead: every frame it sends has fields they do not know.

A proxy between the SDKs and a real relay adds unknown fields to every frame the relay
sends (and to the ``error`` object of an error frame), as a later relay may (docs/protocol.md,
section 1, "Fields": clients ignore fields of relay frames they do not know). The agent SDK
takes its dispatch, the client SDK connects, attaches, has its prompt acknowledged, folds the
deliveries, pages history and gets the relay's errors, as against this version's relay.
What the SDKs send reaches the relay unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

import agent_side
import client_side
import relay
from agent_side import Run
from transport import RunwireError
from transport.errors import RUN_NOT_FOUND

from .harness import ScriptedModel, texts

pytestmark = pytest.mark.anyio

FUTURE = {"future_field": 1, "future_object": {"nested": [1, 2]}}


class NewerRelay:
    """Forwards WebSocket connections to ``target``; each frame the relay sends gains
    ``FUTURE``'s fields (only those of ``types``, when given). ``seen`` counts the frames
    changed, by type."""

    def __init__(self, target: str, types: frozenset[str] | None = None) -> None:
        self.target = target
        self.types = types  # None: every type
        self.url = ""
        self.seen: Counter[str] = Counter()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[NewerRelay]:
        async with serve(self._handle, "127.0.0.1", 0, max_size=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            self.url = f"ws://127.0.0.1:{port}"
            yield self

    def _newer(self, raw: str | bytes) -> str:
        frame = json.loads(raw)
        if self.types is not None and frame["type"] not in self.types:
            return raw if isinstance(raw, str) else raw.decode()
        self.seen[frame["type"]] += 1
        frame.update(FUTURE)
        if frame["type"] == "error":
            frame["error"].update(FUTURE)
        return json.dumps(frame)

    async def _handle(self, ws: ServerConnection) -> None:
        auth = ws.request.headers.get("Authorization") if ws.request else None
        headers = {"Authorization": auth} if auth else None
        async with connect(self.target, additional_headers=headers, max_size=None) as up:

            async def pump_up() -> None:
                async for message in ws:
                    await up.send(message)

            async def pump_down() -> None:
                async for message in up:
                    await ws.send(self._newer(message))

            async def pump(fn: str, tg: anyio.abc.TaskGroup) -> None:
                try:
                    await (pump_up() if fn == "up" else pump_down())
                except ConnectionClosed:
                    pass
                tg.cancel_scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, "up", tg)
                tg.start_soon(pump, "down", tg)


async def test_the_sdks_work_against_a_relay_that_adds_fields_to_every_frame() -> None:
    model = ScriptedModel(["Hello ", "from the future"])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    with anyio.fail_after(30):
        async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
            async with NewerRelay(server.url).running() as newer:
                worker = agent_side.Agent(newer.url)
                worker.on_run(handle)
                async with worker:
                    async with client_side.connect(newer.url, "s") as session:
                        run = await session.send("hi")  # its ack had unknown fields
                        result = await run.result()  # the deliveries had them too
                        assert (result.status, result.end_reason) == ("complete", "complete")
                        assert texts(session) == [
                            ("user", "hi"),
                            ("assistant", "Hello from the future"),
                        ]
                        # An error frame with unknown fields, in its error object too.
                        with pytest.raises(RunwireError) as info:
                            await session.cancel("no-such-run")
                        assert info.value.code == RUN_NOT_FOUND
                    # A page with unknown fields: a late reader pages the older entries.
                    async with client_side.connect(newer.url, "s", history_limit=1) as late:
                        assert late.view.has_older()
                        while late.view.has_older():
                            await late.view.load_older()
                        assert texts(late) == texts(session)
    assert set(newer.seen) == {"welcome", "attached", "ack", "deliver", "dispatch", "page"} | {
        "error"
    }


async def test_a_publish_whose_ack_has_an_unknown_field_is_acknowledged() -> None:
    """Only the acks change: each publish of the client SDK still gets its answer (the ack
    is not dropped, so ``send`` and a steer's ``published`` return)."""
    model = ScriptedModel(["one"], ["two"])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    with anyio.fail_after(10):
        async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
            worker = agent_side.Agent(server.url)
            worker.on_run(handle)
            async with worker, NewerRelay(server.url, frozenset({"ack"})).running() as newer:
                async with client_side.connect(newer.url, "s") as session:
                    first = await session.send("first")
                    assert (await first.result()).status == "complete"
                    second = await session.send("second")
                    assert (await second.result()).status == "complete"
                    assert texts(session)[-1] == ("assistant", "two")
    assert newer.seen["ack"] == 2
