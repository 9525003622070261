"""Publishes are stored in the order the user acted, however they go out (tasks or awaits)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import client_side
from transport.asyncio.abort import AbortController
from transport.asyncio.connection import Connection
from transport.frames import Attach, MessageEntry, Publish
from transport.messages import new_id, user_message

from .fake_agent import FakeAgent, channel_entries

pytestmark = pytest.mark.anyio


async def test_a_steer_then_cancel_is_stored_steer_first(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("plan a trip")
            await agent.start(run.run_id)
            steer = run.steer("make it 5 days")
            await run.cancel(wait=False)
            await steer.published
            entries = await channel_entries(relay_url, session_id)
            kinds = [
                e["kind"]
                for e in entries
                if e["kind"] == "cancel" or e.get("message", {}).get("id") == steer.message.id
            ]
            assert kinds == ["message", "cancel"]


def _stored(entries: list[dict[str, Any]], *ids: str) -> list[str]:
    """Which of ``ids`` (message ids, or entry ids of other entries) the channel holds, in order."""
    out: list[str] = []
    for e in entries:
        key = e["message"]["id"] if e["kind"] == "message" else e["id"]
        if key in ids:
            out.append(key)
    return out


async def test_steers_follow_ups_sends_and_cancels_are_stored_in_the_order_made(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("plan a trip")
            await agent.start(run.run_id)
            first = run.steer("make it 5 days")
            second = run.follow_up("then book it")
            other = await session.send("something else", multitask="enqueue")
            third = run.inject("budget: 2000")
            assert other.prompt is not None
            await run.cancel(wait=False)
            for d in (first, second, third):
                await d.published
            entries = await channel_entries(relay_url, session_id)
            cancels = [e["id"] for e in entries if e["kind"] == "cancel"]
            assert len(cancels) == 1
            ids = [first.message.id, second.message.id, other.prompt.id, third.message.id]
            assert _stored(entries, *ids, cancels[0]) == [*ids, cancels[0]]


async def test_a_steer_made_while_the_link_is_down_still_goes_before_a_later_cancel(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("plan a trip")
            await agent.start(run.run_id)
            await session.link.conn.kill_socket()
            steer = run.steer("make it 5 days")
            await run.cancel(wait=False)
            await steer.published
            entries = await channel_entries(relay_url, session_id)
            cancel = next(e["id"] for e in entries if e["kind"] == "cancel")
            assert _stored(entries, steer.message.id, cancel) == [steer.message.id, cancel]


async def test_a_place_reserved_in_the_lane_goes_first_and_one_given_back_holds_nothing(
    relay_url: str, session_id: str
) -> None:
    """``Connection.reserve()`` takes the place when called: a publish issued after it waits
    for the reserved one (even one started much later), and ``release`` of an unused place
    lets the ones behind it go. The lane's own rules, with a fake clock, are in
    tests/transport/test_lane.py; this checks them over a real relay."""
    with anyio.fail_after(10):
        async with (
            FakeAgent(relay_url, session_id),
            Connection(relay_url) as conn,
        ):
            await conn.request(Attach(req=0, session_id=session_id))

            def publish(text: str) -> Publish:
                message = user_message(text)
                entry = MessageEntry(id=message.id, run_id=new_id(), message=message)
                return Publish(req=0, session_id=session_id, entry=entry)

            first, second, unused = publish("first"), publish("second"), conn.reserve()
            slot = conn.reserve()
            done = anyio.Event()

            async def later() -> None:
                await conn.request(second)
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(later)
                # Every task, the relay's too, waits: ``second`` for both places before it.
                await anyio.wait_all_tasks_blocked()
                assert not done.is_set()
                conn.release(unused)
                await anyio.wait_all_tasks_blocked()
                assert not done.is_set()
                await conn.request(first, slot=slot)
            entries = await channel_entries(relay_url, session_id)
            assert _stored(entries, first.entry.id, second.entry.id) == [
                first.entry.id,
                second.entry.id,
            ]


async def test_the_cancel_of_an_aborted_signal_goes_before_what_is_sent_next(
    relay_url: str, session_id: str
) -> None:
    """Aborting a send's signal cancels its Run from a task; the cancel takes its place
    when the signal fires, so a send made right after is stored after it."""
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            controller = AbortController()
            run = await session.send("plan a trip", signal=controller.signal)
            await agent.start(run.run_id)
            controller.abort()
            other = await session.send("something else")
            assert other.prompt is not None
            cancel = await agent.wait_for(lambda e: e["kind"] == "cancel")
            assert cancel["run_id"] == run.run_id
            entries = await channel_entries(relay_url, session_id)
            assert _stored(entries, cancel["id"], other.prompt.id) == [
                cancel["id"],
                other.prompt.id,
            ]
