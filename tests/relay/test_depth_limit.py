"""JSON nested too deep is a ``VALIDATION_ERROR`` with the limit, on the WebSocket and the HTTP
paths alike, never an ``INTERNAL_ERROR`` (orjson encodes no more than 254 levels) or a trace."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay
from transport import _codec as codec

from .test_http_api import post
from .wire import RawPeer, prompt

pytestmark = pytest.mark.anyio

LIMIT = codec.MAX_DEPTH
PUBLISH_WRAP = 4
"""Levels of a publish frame above the metadata's own: frame, entry, message, metadata."""
HTTP_WRAP = 3
"""Levels of a POST body above the metadata's own: body, message, metadata."""


def nested(kinds: list[str], width: int) -> Any:
    """A value ``len(kinds)`` levels deep (the innermost an empty container), each level
    an object or an array (``kinds``) with ``width`` scalar neighbours beside its child."""
    value: Any = {} if kinds and kinds[-1] == "dict" else []
    for kind in reversed(kinds[:-1]):
        if kind == "dict":
            value = {"child": value, **{f"k{i}": i for i in range(width)}}
        else:
            value = [*range(width), value]
    return value


def with_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    entry = prompt(text="deep")
    entry["message"]["metadata"] = metadata
    return entry


async def publish(peer: RawPeer, session: str, entry: dict[str, Any]) -> dict[str, Any]:
    """``peer.publish`` through the standard library's encoder (orjson's stops at 254 levels)."""
    peer.req += 1
    frame = {"type": "publish", "req": peer.req, "session_id": session, "entry": entry}
    await peer.send(json.dumps(frame))
    with anyio.fail_after(10):
        while True:
            reply = await peer.recv()
            if reply.get("req") == peer.req:
                return reply


def no_trace(caplog: pytest.LogCaptureFixture) -> None:
    traced = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert traced == [], [r.getMessage() for r in traced]


def test_loads_finds_the_depth_of_deep_and_wide_values() -> None:
    @given(
        kinds=st.lists(st.sampled_from(["dict", "list"]), min_size=1, max_size=400),
        width=st.integers(0, 30),
    )
    @settings(max_examples=200, deadline=None)
    def check(kinds: list[str], width: int) -> None:
        data = json.dumps(nested(kinds, width)).encode()
        if len(kinds) <= LIMIT:
            assert codec.loads(data) == json.loads(data)
        else:
            with pytest.raises(codec.RunwireError) as caught:
                codec.loads(data)
            assert caught.value.code == "VALIDATION_ERROR"
            assert caught.value.details == {"limit": LIMIT}

    check()


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    text = "[{" * 500
    assert codec.loads(json.dumps({"a": [text, {"b": text}]})) == {"a": [text, {"b": text}]}


def test_json_deeper_than_orjson_reads_is_validation_error_too() -> None:
    with pytest.raises(codec.RunwireError) as caught:
        codec.loads(b"[" * 2000 + b"]" * 2000)
    assert caught.value.code == "VALIDATION_ERROR"


def test_a_relay_frame_carrying_an_entry_at_the_limit_decodes() -> None:
    entry = {**prompt(), "serial": 1}
    entry["message"]["metadata"] = nested(["dict"] * (LIMIT - PUBLISH_WRAP), 1)
    frame = {"type": "deliver", "session_id": "s", "entries": [entry]}
    assert codec.decode_relay_frame(json.dumps(frame)).type == "deliver"


@pytest.mark.parametrize("depth", [253, 300, 900])
async def test_deep_metadata_over_a_websocket_is_validation_error(
    depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with relay.serve(port=0, store="memory://") as server:
        peer = await RawPeer.open(server.url)
        await peer.attach("deep")
        reply = await publish(peer, "deep", with_metadata(nested(["dict"] * depth, 0)))
        assert reply["type"] == "error", reply
        assert reply["error"]["code"] == "VALIDATION_ERROR", reply
        assert reply["error"]["details"] == {"limit": LIMIT}
        # The connection stays, and a shallow entry still goes in.
        assert (await peer.publish("deep", with_metadata({"a": {"b": 1}})))["type"] == "ack"
        await peer.close()
    no_trace(caplog)


@pytest.mark.parametrize("depth", [253, 300, 900])
async def test_deep_metadata_over_http_is_400_validation_error(
    depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with relay.serve(port=0, store="memory://") as server:
        message = with_metadata(nested(["list"] * depth, 0))["message"]
        reply = await post(server, "deep", {"message": message})
        assert reply.status == 400, reply.body
        assert reply.code == "VALIDATION_ERROR"
        assert reply.json()["error"]["details"] == {"limit": LIMIT}
    no_trace(caplog)


async def test_deep_and_wide_entries_are_stored_or_refused_by_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with relay.serve(port=0, store="memory://") as server:
        peer = await RawPeer.open(server.url)
        await peer.attach("mixed")

        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            kinds=st.lists(st.sampled_from(["dict", "list"]), min_size=1, max_size=300),
            width=st.integers(0, 20),
        )
        def check(kinds: list[str], width: int) -> None:
            # Hypothesis drives a sync function in a worker thread; it calls back into the loop.
            metadata = {"m": nested(kinds, width)}
            depth = PUBLISH_WRAP + 1 + len(kinds)
            reply = anyio.from_thread.run(publish, peer, "mixed", with_metadata(metadata))
            if depth <= LIMIT:
                assert reply["type"] == "ack", reply
            else:
                assert reply["type"] == "error", reply
                assert reply["error"]["code"] == "VALIDATION_ERROR", reply

        with anyio.fail_after(120):
            await anyio.to_thread.run_sync(check)
        await peer.close()
    no_trace(caplog)
