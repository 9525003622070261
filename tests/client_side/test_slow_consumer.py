"""A client too slow for its send queue is closed SLOW_CONSUMER and catches up.

What it missed is at least the queue the relay dropped, more than one reply may carry: the
relay answers its resume with ``reset`` and the newest page (it was closed SLOW_CONSUMER again
by its own resume, on every reconnect), and the view rebuilds with no gap and no duplicate.
"""

from __future__ import annotations

import anyio
import pytest

import client_side
import relay
from tests.relay.wire import RawPeer, prompt

pytestmark = pytest.mark.anyio


async def test_a_client_closed_slow_consumer_catches_up_with_no_gap_and_no_duplicate() -> None:
    async with relay.serve(port=0, store="memory://", send_queue_bytes=300_000) as s:
        pub = await RawPeer.open(s.url)
        await pub.attach("s")
        other = await RawPeer.open(s.url)
        await other.attach("s")
        async with client_side.connect(s.url, "s") as session:
            ws = session.link.conn._ws
            assert ws is not None
            ws.transport.pause_reading()
            sent = 0
            with anyio.fail_after(30):
                while not any(p.closed for p in s.hub.peers):
                    await pub.publish("s", prompt(text=f"{sent}:" + "y" * 20_000))
                    sent += 1
                    other.inbox.clear()  # (its deliveries are checked below by serial)
            assert sent < 2000
            ws.transport.resume_reading()
            with anyio.fail_after(15):
                while session.view.newest_serial != sent:
                    await anyio.sleep(0.02)
            texts = [m.message.text() for m in session.view.messages()]
            numbers = [int(t.split(":", 1)[0]) for t in texts]
            assert numbers == list(range(sent - len(numbers), sent)) and numbers
            assert session.view.has_older() == (numbers[0] > 0)
            assert session.link.conn.connects >= 2
        # Others on the session were not disturbed.
        assert (await other.publish("s", prompt()))["serial"] == sent + 1
