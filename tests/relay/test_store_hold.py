"""A publish the store refused (``STORE_UNAVAILABLE``) holds its connection's later publishes
to the session (``transport._holds.AdmissionHold``): those already on their way are refused
too, with ``details.held``, until it comes again, so they are not stored before it when the
store is back at once; for one connection and session only. That the hold lapses after
``STORE_HOLD`` seconds is tested with a fake clock in tests/transport/test_holds.py."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

import relay
from transport.errors import STORE_UNAVAILABLE

from ..agent_side.test_store_outage import Outage
from .wire import RawPeer, prompt

pytestmark = pytest.mark.anyio


async def refused_once_with_one_behind(
    server: relay.Server, monkeypatch: pytest.MonkeyPatch
) -> tuple[RawPeer, dict[str, Any], dict[str, Any]]:
    """A peer whose prompt ``a`` the store refused once (slowly) while prompt ``b`` was on
    its way behind it; the store is back right after."""
    outage = Outage(server, monkeypatch)
    a, b = prompt(text="a"), prompt(text="b")
    outage.down = lambda entry_id, _entry: entry_id == a["id"] and a["id"] not in outage.refused
    peer = await RawPeer.open(server.url)
    await peer.attach("s")
    await peer.send({"type": "publish", "req": 101, "session_id": "s", "entry": a})
    await peer.send({"type": "publish", "req": 102, "session_id": "s", "entry": b})
    replies = {}
    with anyio.fail_after(5):
        while len(replies) < 2:
            frame = await peer.recv()
            if frame.get("req") in (101, 102):
                replies[frame["req"]] = frame
    assert replies[101]["error"]["code"] == STORE_UNAVAILABLE
    assert "held" not in replies[101]["error"].get("details", {})
    assert replies[102]["error"]["code"] == STORE_UNAVAILABLE
    assert replies[102]["error"]["details"]["held"] == a["id"]
    return peer, a, b


async def stored_texts(server: relay.Server) -> list[str]:
    read = await server.store.read("s", after=0, limit=100)
    return [orjson.loads(e.data)["message"]["parts"][0]["text"] for e in read]


async def test_a_publish_behind_one_the_store_refused_waits_until_that_one_comes_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        peer, a, b = await refused_once_with_one_behind(server, monkeypatch)
        again = await peer.publish("s", b)
        assert again["error"]["details"]["held"] == a["id"]
        other = await RawPeer.open(server.url)
        await other.attach("s")
        assert (await other.publish("s", prompt(text="c")))["type"] == "ack"  # not held
        assert (await peer.publish("s", a))["type"] == "ack"
        assert (await peer.publish("s", b))["type"] == "ack"
        assert await stored_texts(server) == ["c", "a", "b"]
        await other.close()
        await peer.close()
