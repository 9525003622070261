"""``RATE_LIMITED`` with the SDKs over a real relay with a small ``max_inflight``: a
refused publish goes again (same entry id) after the relay's ``retry_after``, in order,
and gives up with the error after ``rate_limit_wait``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import orjson
import pytest

import agent_side
import client_side
import relay
from transport.asyncio._connection import Connection
from transport.errors import RATE_LIMITED, RunwireError
from transport.frames import Attach, MessageEntry, Publish
from transport.messages import new_id, user_message

from ..agent_side.helpers import client_end

pytestmark = pytest.mark.anyio


async def tokens(count: int) -> AsyncIterator[str]:
    for i in range(count):
        yield f"t{i} "
        await anyio.lowlevel.checkpoint()  # a token at a time, as a model streams them


async def test_a_burst_through_pipe_arrives_whole_in_order_and_once(tmp_path: Path) -> None:
    """Four appends in flight against a relay that takes one at a time (SQLite: its
    writes take a while): the refused ones go again behind each other; the reply is
    every token once, in order."""
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    async with relay.serve(port=0, store=store, max_inflight=1) as server:
        async with client_end(server.url, "burst") as client:
            run_id = await client.prompt("Stream a lot.")
            async with agent_side.connect(server.url, "burst", max_in_flight=4) as session:
                run = session.create_run(run_id)
                await run.start()
                with anyio.fail_after(30):
                    result = await run.pipe(tokens(400))
                assert result.reason == "complete", result.error
                await run.end()
                await client.wait_status(run_id, "complete")
        expected = "".join(f"t{i} " for i in range(400))
        assert client.response_texts(run_id) == [expected]
        read = await server.store.read("burst", after=0, limit=10_000)
        stored = [orjson.loads(e.data) for e in read]
        ids = [e["id"] for e in stored]
        assert len(ids) == len(set(ids))
        appended = "".join(
            chunk.get("delta", "")
            for e in stored
            if e["kind"] == "response_append"
            for chunk in e["chunks"]
        )
        assert appended == expected  # in serial order, every token once


async def test_a_burst_of_sends_arrives_in_order_and_once() -> None:
    async with relay.serve(port=0, store="memory://", max_inflight=2) as server:
        async with client_side.connect(server.url, "sends") as session:
            messages = [user_message(f"m{i}") for i in range(40)]
            runs: dict[int, client_side.ClientRun] = {}

            async def send(i: int) -> None:
                runs[i] = await session.send(messages[i])

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for i in range(len(messages)):
                        tg.start_soon(send, i)
        assert sorted(runs) == list(range(len(messages)))
        read = await server.store.read("sends", after=0, limit=1000)
        stored = [orjson.loads(e.data) for e in read]
        assert [e["id"] for e in stored] == [m.id for m in messages]
        assert [e["run_id"] for e in stored] == [runs[i].run_id for i in range(len(messages))]


async def test_a_publish_still_refused_after_rate_limit_wait_gives_up_with_the_error() -> None:
    """A relay that takes no publish at all (``max_inflight=0``): each publish gives up
    after ``rate_limit_wait``, the one behind it too; nothing was stored."""
    async with relay.serve(port=0, store="memory://", max_inflight=0) as server:
        async with Connection(server.url, rate_limit_wait=0.5) as conn:
            await conn.request(Attach(req=0, session_id="s"))
            errors: list[RunwireError] = []

            async def publish(text: str) -> None:
                entry = MessageEntry(id=new_id(), run_id=new_id(), message=user_message(text))
                try:
                    await conn.request(Publish(req=0, session_id="s", entry=entry))
                except RunwireError as exc:
                    errors.append(exc)

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(publish, "first")
                    tg.start_soon(publish, "second")
            assert [e.code for e in errors] == [RATE_LIMITED, RATE_LIMITED]
            assert errors[0].details["retry_after"] > 0
            assert conn.connected
        assert await server.store.read("s", after=0, limit=10) == []
