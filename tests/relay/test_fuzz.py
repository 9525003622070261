"""Hypothesis throws arbitrary frames at a live relay: every one is answered, nothing breaks."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay

from .wire import RawPeer, prompt

json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
frame_types = st.sampled_from(
    ["hello", "attach", "detach", "publish", "history", "worker", "deliver", "bogus", ""]
)
entry_kinds = st.sampled_from(
    ["message", "run", "cancel", "response_open", "response_append", "response_close", "x"]
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """Mostly plausible frames with wrong pieces, sometimes raw junk."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.binary(max_size=64))
    if choice == 1:
        return orjson.dumps(draw(json_values))
    frame: dict[str, Any] = {"type": draw(frame_types)}
    if draw(st.booleans()):
        frame["req"] = draw(st.integers(0, 10**6) | st.text(max_size=5) | st.none())
    if draw(st.booleans()):
        frame["session_id"] = draw(st.sampled_from(["fuzz", "other", "", "a b"]) | json_values)
    if frame["type"] == "publish" or draw(st.booleans()):
        entry = {"kind": draw(entry_kinds)}
        entry.update(
            draw(
                st.dictionaries(
                    st.sampled_from(
                        [
                            "id",
                            "run_id",
                            "intent",
                            "message",
                            "status",
                            "chunks",
                            "message_id",
                            "seen",
                        ]
                    ),
                    json_values,
                    max_size=5,
                )
            )
        )
        frame["entry"] = entry
    frame.update(draw(st.dictionaries(st.text(max_size=6), json_values, max_size=2)))
    return orjson.dumps(frame)


@pytest.mark.anyio
async def test_arbitrary_frames_never_disturb_the_relay_or_others() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        watcher = await RawPeer.open(server.url)
        await watcher.attach("fuzz")
        writer = await RawPeer.open(server.url)
        await writer.attach("fuzz")
        fuzzer = await RawPeer.open(server.url, role="agent")
        await fuzzer.attach("fuzz")
        sent: list[int] = []

        @settings(
            max_examples=300,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(frames())
        def check(frame: bytes) -> None:
            # Hypothesis drives a sync function in a worker thread; it calls back into the loop.
            sent.append(len(frame))
            anyio.from_thread.run(exercise, frame)

        async def exercise(frame: bytes) -> None:
            try:
                await fuzzer.ws.send(frame.decode())
            except UnicodeDecodeError:
                await fuzzer.ws.send(frame)
            # A good publish from someone else still goes through.
            ack = await writer.publish("fuzz", prompt())
            assert ack["type"] == "ack", ack

        with anyio.fail_after(120):
            await anyio.to_thread.run_sync(check)
        assert len(sent) >= 100
        # The fuzzer's connection is still open and answers a good request.
        fuzzer.req = 10**7  # past any req id the fuzzer used
        assert (await fuzzer.attach("fuzz-after"))["type"] == "attached"
        # Every entry is in serial order with no gap.
        page = await watcher.request(
            {"type": "history", "session_id": "fuzz", "before": 10**9, "limit": 1000}
        )
        serials = [e["serial"] for e in page["entries"]]
        assert serials == list(range(1, len(serials) + 1))
        assert len(serials) >= len(sent)
