"""A client's publishes while the relay's store refuses writes (``STORE_UNAVAILABLE``).

Real relay over loopback; its store's ``append`` refuses writes for a while
(``tests.agent_side.test_store_outage.Outage``), as a Redis that is away or full does.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import client_side
import relay
from transport.asyncio._connection import Connection
from transport.errors import STORE_UNAVAILABLE, RunwireError
from transport.frames import Attach, MessageEntry, Publish
from transport.messages import new_id, user_message

from ..agent_side.test_store_outage import Outage
from .fake_agent import FakeAgent, channel_entries

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("times", [2, 1])
async def test_steering_sent_during_an_outage_is_stored_in_order_once(
    monkeypatch: pytest.MonkeyPatch, session_id: str, times: int
) -> None:
    """Three steering messages, made one after the other while the store refuses the first
    ``times`` times (slowly), and what comes meanwhile: each is stored once, in the order
    they were made (the first steer's ``published`` used to reject with
    ``STORE_UNAVAILABLE`` while the ones after it were stored). With ``times=1`` the store
    is back at once: the later ones, on their way already, are held by the relay behind
    the first (not stored before it)."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        first: list[str] = []

        def down(entry_id: str, entry: dict[str, Any]) -> bool:
            if not first and entry.get("intent") == "steer":
                first.append(entry_id)
            if not first or (times == 1 and entry_id != first[0]):
                return False  # times=1: the store is back at once
            return outage.refused.count(first[0]) < times

        outage.down = down
        with anyio.fail_after(20):
            async with (
                client_side.connect(server.url, session_id) as session,
                FakeAgent(server.url, session_id) as agent,
            ):
                run = await session.send("go")
                await agent.start(run.run_id)
                steers = [run.steer(text) for text in ("one", "two", "three")]
                for steer in steers:
                    await steer.published
                entries = await channel_entries(server.url, session_id)
        assert outage.refused.count(first[0]) == times
        assert outage.refusals() > times  # the outage caught the ones sent meanwhile
        stored = [e["id"] for e in entries if e.get("intent") == "steer"]
        assert stored == [s.message.id for s in steers]


async def test_a_send_the_store_keeps_refusing_raises_store_unavailable_after_store_wait(
    monkeypatch: pytest.MonkeyPatch, session_id: str
) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        away = True
        outage.down = lambda _id, _entry: away
        async with client_side.connect(server.url, session_id, store_wait=0.3) as session:
            with anyio.fail_after(10), pytest.raises(RunwireError) as caught:
                await session.send("hello?")
            assert caught.value.code == STORE_UNAVAILABLE
            assert session.connected
            away = False
            with anyio.fail_after(10):
                run = await session.send("hello again")
        assert run.prompt is not None
        stored = await channel_entries(server.url, session_id)
        assert [e["id"] for e in stored] == [run.prompt.id]


async def test_publishes_refused_behind_one_that_gave_up_on_the_store_give_up_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two publishes in flight on one connection, the store away for good: the first gives
    up after ``store_wait``, the one refused behind it raises at its turn rather than go
    again (it cannot overtake it), and once a publish is taken they go again as usual."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        away = True
        outage.down = lambda _id, _entry: away
        async with Connection(server.url, store_wait=0.3) as conn:
            await conn.request(Attach(req=0, session_id="s"))
            errors: list[tuple[str, str]] = []
            entries = [
                MessageEntry(id=new_id(), run_id=new_id(), message=user_message(text))
                for text in ("first", "second")
            ]

            async def publish(entry: MessageEntry, slot: int | None = None) -> None:
                try:
                    await conn.request(Publish(req=0, session_id="s", entry=entry), slot=slot)
                except RunwireError as exc:
                    errors.append((entry.id, exc.code))

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for entry in entries:  # the second goes out after the first
                        tg.start_soon(publish, entry, conn.reserve())
            assert errors == [(e.id, STORE_UNAVAILABLE) for e in entries]
            assert conn.connected
            away = False
            with anyio.fail_after(10):
                await publish(entries[1])
            assert outage.stored == [entries[1].id]
