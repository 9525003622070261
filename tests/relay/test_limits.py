"""Limits and back-pressure over real loopback sockets: frame sizes, the send queue, in-flight
publishes."""

from __future__ import annotations

import anyio
import orjson
import pytest

import relay
from transport.errors import RunwireError

from .wire import RawPeer, prompt

pytestmark = pytest.mark.anyio


async def test_a_frame_over_the_limit_in_utf8_bytes_is_payload_too_large() -> None:
    async with relay.serve(port=0, store="memory://", max_frame_bytes=4000) as s:
        a = await RawPeer.open(s.url)
        await a.attach("s")
        # 1500 characters, 3000 bytes of UTF-8 text, plus the envelope: under 4000
        # characters, over 4000 bytes.
        reply = await a.publish("s", prompt(text="é" * 1500 + "€" * 300))
        assert reply["type"] == "error" and reply["error"]["code"] == "PAYLOAD_TOO_LARGE", reply
        assert await s.store.read("s", after=0, limit=10) == []
        assert (await a.publish("s", prompt(text="é" * 100)))["serial"] == 1


async def _big_session(url: str, count: int, size: int) -> RawPeer:
    pub = await RawPeer.open(url)
    await pub.attach("s")
    for i in range(count):
        assert (await pub.publish("s", prompt(text=f"{i}" + "y" * size)))["type"] == "ack"
    return pub


async def test_an_attach_page_bigger_than_the_send_queue_keeps_its_newest_entries() -> None:
    async with relay.serve(port=0, store="memory://", send_queue_bytes=200_000) as s:
        await _big_session(s.url, 8, 40_000)
        late = await RawPeer.open(s.url)
        reply = await late.attach("s")  # it was closed SLOW_CONSUMER, on every try
        assert [e["serial"] for e in reply["entries"]] == [7, 8] and reply["has_older"]
        page = await late.request({"type": "history", "session_id": "s", "before": 7})
        assert [e["serial"] for e in page["entries"]] == [5, 6] and page["has_older"]


async def test_a_backlog_bigger_than_the_send_queue_is_a_reset_not_a_close() -> None:
    async with relay.serve(port=0, store="memory://", send_queue_bytes=200_000) as s:
        pub = await _big_session(s.url, 1, 10)
        back = await RawPeer.open(s.url)
        first = await back.attach("s")
        for i in range(8):
            await pub.publish("s", prompt(text=f"{i}" + "y" * 40_000))
        reply = await back.attach("s", from_serial=1, epoch=first["epoch"])
        assert reply["reset"] and [e["serial"] for e in reply["entries"]] == [8, 9]
        small = await back.attach("s", from_serial=8, epoch=first["epoch"])
        assert not small["reset"] and [e["serial"] for e in small["entries"]] == [9]


async def test_publishes_over_max_inflight_are_rate_limited_and_the_rest_kept_in_order() -> None:
    async with relay.serve(port=0, store="memory://", max_inflight=3) as s:
        a = await RawPeer.open(s.url)
        await a.attach("s")
        entries = [prompt(text=f"m{i}") for i in range(40)]
        for req, entry in enumerate(entries, start=100):
            await a.send({"type": "publish", "req": req, "session_id": "s", "entry": entry})
        replies = {}
        with anyio.fail_after(10):
            while len(replies) < len(entries):
                frame = await a.recv()
                if "req" in frame:
                    replies[frame["req"] - 100] = frame
        limited = [i for i, r in replies.items() if r["type"] == "error"]
        acked = sorted((i for i, r in replies.items() if r["type"] == "ack"))
        assert limited, "the burst never reached max_inflight"
        assert {replies[i]["error"]["code"] for i in limited} == {"RATE_LIMITED"}
        assert [replies[i]["serial"] for i in acked] == list(range(1, len(acked) + 1))
        stored = await s.store.read("s", after=0, limit=100)
        assert [orjson.loads(e.data)["id"] for e in stored] == [entries[i]["id"] for i in acked]


async def test_attached_sessions_are_let_go_when_detached_or_the_client_leaves() -> None:
    async with relay.serve(port=0, store="memory://", send_queue_bytes=200_000) as s:
        pub = await _big_session(s.url, 30, 20_000)
        await pub.close()
        a = await RawPeer.open(s.url)
        for i in range(50):
            await a.attach(f"m{i}")
        for i in range(25):
            assert (await a.request({"type": "detach", "session_id": f"m{i}"}))["type"] == "ack"
        assert len(s.hub.channels) == 25
        # Attach to the big one and hang up before reading its backlog.
        await a.send({"type": "attach", "req": 9, "session_id": "s", "from_serial": 0})
        a.ws.transport.abort()
        with anyio.fail_after(5):
            while s.hub.channels or s.hub.peers:
                await anyio.sleep(0.01)


async def test_a_client_message_over_the_hard_limit_is_refused_not_resent_forever() -> None:
    """Over ``hard_frame_bytes`` the relay closes the socket (1009) without reading the
    frame; a client that took that for a network drop re-sent it on every reconnect. The
    SDK refuses a frame over the welcome's ``max_frame_bytes`` before sending it."""
    import client_side

    limits = {"max_frame_bytes": 4000, "hard_frame_bytes": 100_000}
    async with relay.serve(port=0, store="memory://", **limits) as s:
        states: list[str] = []
        async with client_side.connect(s.url, "big") as session:
            session.on_state(states.append)
            with anyio.fail_after(10), pytest.raises(RunwireError) as info:
                await session.send("é" * 3000)  # 6000 bytes: over the limit, not the length
            assert info.value.code == "PAYLOAD_TOO_LARGE"
            assert info.value.details["limit"] == 4000
            assert info.value.details["size"] > 4000
            with anyio.fail_after(10), pytest.raises(RunwireError) as info:
                await session.send("x" * 200_000)  # over hard_frame_bytes as well
            assert info.value.code == "PAYLOAD_TOO_LARGE"
            assert "disconnected" not in states  # nothing closed the socket
            run = await session.send("small")  # the session goes on
            assert run.prompt is not None
        assert await s.store.read("big", after=0, limit=10) != []


async def _burst(a: RawPeer, entries: list[dict[str, object]]) -> dict[int, dict[str, object]]:
    """Publish ``entries`` back to back (reqs 100...) and return the replies by index."""
    for req, entry in enumerate(entries, start=100):
        await a.send({"type": "publish", "req": req, "session_id": "s", "entry": entry})
    replies: dict[int, dict[str, object]] = {}
    with anyio.fail_after(10):
        while len(replies) < len(entries):
            frame = await a.recv()
            if "req" in frame:
                replies[frame["req"] - 100] = frame
    return replies


async def test_rate_limited_says_when_to_retry_and_holds_later_publishes_until_its_retry() -> None:
    """``RATE_LIMITED`` names ``retry_after`` (seconds) and the ``limit``; until the refused
    entry comes back the connection's later publishes are refused too, so a later one never
    overtakes it (the stored ones are a prefix of what was sent, then the retry, then the
    rest)."""
    async with relay.serve(port=0, store="memory://", max_inflight=2) as s:
        a = await RawPeer.open(s.url)
        await a.attach("s")
        entries = [prompt(text=f"m{i}") for i in range(40)]
        replies = await _burst(a, entries)
        limited = sorted(i for i, r in replies.items() if r["type"] == "error")
        assert limited, "the burst never reached max_inflight"
        first = limited[0]
        assert limited == list(range(first, len(entries)))  # no later one was taken
        error = replies[first]["error"]
        assert isinstance(error, dict) and error["code"] == "RATE_LIMITED"
        retry_after = error["details"]["retry_after"]
        assert isinstance(retry_after, float | int) and 0 < retry_after <= 5
        assert error["details"]["limit"] == 2
        # Nothing is in flight now; a new publish is still refused: the first refused goes
        # first.
        late = prompt(text="late")
        reply = await a.publish("s", late)
        assert reply["type"] == "error" and reply["error"]["code"] == "RATE_LIMITED", reply
        assert (await a.publish("s", entries[first]))["serial"] == first + 1
        assert (await a.publish("s", late))["serial"] == first + 2
        stored = await s.store.read("s", after=0, limit=100)
        expected = [e["id"] for e in entries[: first + 1]] + [late["id"]]
        assert [orjson.loads(e.data)["id"] for e in stored] == expected


async def test_the_same_entry_id_in_another_session_does_not_end_the_rate_limited_hold() -> None:
    """The hold waits for the refused publish itself: an entry of the same id sent to another
    session is a different publish (ids are unique per session), so it is refused too, and
    the connection's later publishes still do not overtake the refused one."""
    async with relay.serve(port=0, store="memory://", max_inflight=2) as s:
        a = await RawPeer.open(s.url)
        await a.attach("s")
        await a.attach("t")
        entries = [prompt(text=f"m{i}") for i in range(40)]
        replies = await _burst(a, entries)
        limited = sorted(i for i, r in replies.items() if r["type"] == "error")
        assert limited, "the burst never reached max_inflight"
        first = limited[0]
        reply = await a.publish("t", {**prompt(text="other"), "id": entries[first]["id"]})
        assert reply["type"] == "error" and reply["error"]["code"] == "RATE_LIMITED", reply
        assert reply["error"]["details"]["held"] == entries[first]["id"]
        late = prompt(text="late")
        reply = await a.publish("s", late)
        assert reply["type"] == "error" and reply["error"]["code"] == "RATE_LIMITED", reply
        assert (await a.publish("s", entries[first]))["serial"] == first + 1
        assert (await a.publish("s", late))["serial"] == first + 2
