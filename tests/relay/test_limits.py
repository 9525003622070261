"""Limits and back-pressure over real loopback sockets: frame sizes, the send queue, in-flight
publishes."""

from __future__ import annotations

import pytest

import relay

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
