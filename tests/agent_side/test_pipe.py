"""Stream normalisation, coalescing and folding (sans-I/O), and ``pipe_stream`` in memory."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import agent_side
from agent_side._pipe import (
    Coalescer,
    MessageBuilder,
    Normalizer,
    close_budget,
    close_entry,
    pipe_stream,
)
from transport import _codec as codec
from transport._tree import ConversationTree
from transport.asyncio._abort import AbortController, AbortSignal
from transport.errors import RunwireError
from transport.frames import EntryBody, ResponseAppend, ResponseClose, ResponseOpen
from transport.messages import ReasoningPart, TextPart, ToolCallPart, ToolResultPart, UIMessage

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "tree"

# ------------------------------------------------------------ Normalizer --


def test_strings_become_one_text_part_with_start_and_end() -> None:
    n = Normalizer()
    chunks = n.feed("Hel") + n.feed("") + n.feed("lo") + n.finish()
    assert chunks == [
        {"type": "text-start", "id": "text-1"},
        {"type": "text-delta", "id": "text-1", "delta": "Hel"},
        {"type": "text-delta", "id": "text-1", "delta": "lo"},
        {"type": "text-end", "id": "text-1"},
    ]
    assert n.finish() == []


def test_a_part_dict_closes_the_implicit_text_part_and_passes_through() -> None:
    n = Normalizer()
    call = {"type": "tool-input-available", "toolCallId": "c1", "toolName": "t", "input": {}}
    chunks = n.feed("a") + n.feed(call) + n.feed("b")
    kinds = [(c["type"], c.get("id")) for c in chunks]
    assert kinds == [
        ("text-start", "text-1"),
        ("text-delta", "text-1"),
        ("text-end", "text-1"),
        ("tool-input-available", None),
        ("text-start", "text-2"),
        ("text-delta", "text-2"),
    ]


@pytest.mark.parametrize("item", [1, None, {"delta": "x"}, {"type": 3}, b"bytes"])
def test_items_that_are_not_str_or_parts_are_refused(item: object) -> None:
    with pytest.raises(TypeError):
        Normalizer().feed(item)


# -------------------------------------------------------------- Coalescer --


def delta(text: str, part: str = "t") -> dict[str, Any]:
    return {"type": "text-delta", "id": part, "delta": text}


def test_consecutive_deltas_of_one_part_merge_into_one_chunk() -> None:
    q = Coalescer()
    q.add({"type": "text-start", "id": "t"})
    for word in ["a", "b", "c"]:
        q.add(delta(word))
    q.add({"type": "reasoning-delta", "id": "t", "delta": "r"})
    q.add(delta("d"))
    q.add(delta("e", part="u"))
    assert q.take() == [
        {"type": "text-start", "id": "t"},
        delta("abc"),
        {"type": "reasoning-delta", "id": "t", "delta": "r"},
        delta("d"),
        delta("e", part="u"),
    ]
    assert not q
    assert (q.chunks_in, q.chunks_out) == (7, 5)


def test_tool_input_deltas_merge_by_tool_call() -> None:
    q = Coalescer()
    for piece in ['{"a"', ":1}"]:
        q.add({"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": piece})
    assert q.take() == [
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": '{"a":1}'}
    ]


def test_a_merged_delta_never_outgrows_max_chunk_chars() -> None:
    q = Coalescer(max_chunk_chars=10)
    for _ in range(25):
        q.add(delta("x"))
    chunks = q.take()
    assert [len(c["delta"]) for c in chunks] == [10, 10, 5]


def test_a_delta_longer_than_max_chunk_chars_is_split_into_deltas_of_its_part() -> None:
    q = Coalescer(max_chunk_chars=10)
    q.add(delta("ab"))
    q.add(delta("x" * 25))
    q.add(delta("yz"))
    chunks = q.take()
    assert [c["delta"] for c in chunks] == ["ab", "x" * 10, "x" * 10, "x" * 5 + "yz"]
    assert all(c["id"] == "t" and c["type"] == "text-delta" for c in chunks)


def test_take_respects_the_byte_budget_but_always_takes_one() -> None:
    q = Coalescer(max_chunk_chars=100)
    for i in range(10):
        q.add({"type": "data-x", "data": "y" * 50, "n": i})
    budget = 2 * (len(codec.dumps({"type": "data-x", "data": "y" * 50, "n": 0})) + 1)
    first = q.take(budget)
    assert [c["n"] for c in first] == [0, 1]
    assert len(q) == 8
    big = Coalescer()
    big.add({"type": "data-x", "data": "z" * 1000})
    assert len(big.take(10)) == 1


# --------------------------------------------------------- MessageBuilder --

CHUNKS: list[dict[str, Any]] = [
    {"type": "start", "messageMetadata": {"model": "fake"}},
    {"type": "reasoning-start", "id": "r"},
    {"type": "reasoning-delta", "id": "r", "delta": "think"},
    {"type": "text-start", "id": "a"},
    {"type": "text-delta", "id": "a", "delta": "Hello"},
    {"type": "text-delta", "id": "a", "delta": " world"},
    {"type": "text-end", "id": "a"},
    {"type": "text-delta", "delta": "!"},
    {"type": "tool-input-available", "toolCallId": "c1", "toolName": "search", "input": {"q": 1}},
    {"type": "tool-output-available", "toolCallId": "c1", "output": [1, 2]},
    {"type": "tool-output-error", "toolCallId": "c2", "toolName": "x", "errorText": "boom"},
    {"type": "text-delta", "id": 5, "delta": "ignored"},
    {"type": "text-delta", "id": "b", "delta": 7},
    {"type": "unknown-thing"},
    {"type": "text-delta", "id": "b", "delta": "new part"},
    {"type": "text-start"},
    {"type": "text-delta", "delta": "unnamed"},
    {"type": "text-start", "id": 9},
]


def test_builder_folds_text_reasoning_and_tools() -> None:
    b = MessageBuilder("m1")
    for chunk in CHUNKS:
        b.apply(chunk)
    message = b.message()
    assert message.id == "m1" and message.role == "assistant"
    assert message.metadata == {"model": "fake"}
    assert message.parts == [
        ReasoningPart(text="think"),
        TextPart(text="Hello world!"),
        ToolCallPart(tool_call_id="c1", tool_name="search", input={"q": 1}),
        ToolResultPart(tool_call_id="c1", tool_name="search", output=[1, 2]),
        ToolResultPart(tool_call_id="c2", tool_name="x", output="boom", is_error=True),
        TextPart(text="new part"),
        TextPart(text="unnamed"),
    ]


def test_builder_agrees_with_the_tree_folding_the_same_appends() -> None:
    tree = ConversationTree()
    tree.fold(ResponseOpen(serial=1, id="o", run_id="r", message_id="m1"))
    b = MessageBuilder("m1")
    for serial, chunk in enumerate(CHUNKS, start=2):
        tree.fold(
            ResponseAppend(
                serial=serial, id=f"a{serial}", run_id="r", message_id="m1", chunks=[chunk]
            )
        )
        b.apply(chunk)
    folded = tree.message("m1")
    assert folded is not None
    assert folded.message.parts == b.message().parts


def test_builder_folds_every_ui_chunk_type_as_the_shared_vector_says() -> None:
    vector = json.loads((VECTORS / "ui_chunk_parts.json").read_text())
    b = MessageBuilder("m2")
    for entry in vector["entries"]:
        for chunk in entry.get("chunks", []):
            b.apply(chunk)
    expected = vector["expect"]["messages"][1]["parts"]
    assert [p.model_dump(mode="json") for p in b.message().parts] == expected


def test_builder_message_is_a_snapshot() -> None:
    b = MessageBuilder("m")
    b.apply(delta("a"))
    first = b.message()
    b.apply(delta("b"))
    assert first.text() == "a"
    assert b.message().text() == "ab"


# -------------------------------------------------- pipe_stream in memory --


class FakeRelay:
    """Records entries; each publish waits until the test lets it through."""

    def __init__(self, *, gated: bool = False) -> None:
        self.entries: list[EntryBody] = []
        self.gated = gated
        self.gate = anyio.Event()
        self.fail_on: type | None = None
        self.in_flight = 0
        self.max_in_flight = 0

    async def publish(self, entry: EntryBody) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.fail_on is not None and isinstance(entry, self.fail_on):
                raise RunwireError("RUN_NOT_ACTIVE", "gone")
            if self.gated and self.entries:
                await self.gate.wait()
            self.entries.append(entry)
        finally:
            self.in_flight -= 1

    def appends(self) -> list[ResponseAppend]:
        return [e for e in self.entries if isinstance(e, ResponseAppend)]

    def close(self) -> ResponseClose:
        closes = [e for e in self.entries if isinstance(e, ResponseClose)]
        assert len(closes) == 1
        return closes[0]


def ids() -> Any:
    counter = iter(range(1, 10_000))
    return lambda: f"e{next(counter)}"


async def run_pipe(
    stream: Any, relay: FakeRelay, signal: AbortSignal | None = None, **kw: Any
) -> Any:
    return await pipe_stream(
        stream,
        run_id="r",
        message_id="m",
        seen=["s1"],
        abort_signal=signal or AbortSignal(),
        publish=relay.publish,
        entry_id=ids(),
        **kw,
    )


@pytest.mark.anyio
async def test_many_deltas_ride_few_appends_while_a_publish_is_in_flight() -> None:
    relay = FakeRelay(gated=True)
    words = [f"w{i} " for i in range(500)]
    produced = anyio.Event()

    async def stream() -> AsyncIterator[str]:
        for w in words:
            yield w
            await anyio.lowlevel.checkpoint()
        produced.set()

    async def release_when_done() -> None:
        await produced.wait()
        relay.gate.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_when_done)
            result = await run_pipe(stream(), relay)
    assert result.reason == "complete"
    opened = relay.entries[0]
    assert isinstance(opened, ResponseOpen) and opened.seen == ["s1"]
    assert len(relay.appends()) <= 3
    assert relay.max_in_flight == 1
    assert relay.close().message.text() == "".join(words)
    assert [e.id for e in relay.entries] == [f"e{i}" for i in range(1, len(relay.entries) + 1)]


@pytest.mark.anyio
async def test_max_in_flight_allows_several_appends_at_once() -> None:
    relay = FakeRelay(gated=True)

    async def stream() -> AsyncIterator[str]:
        for i in range(50):
            yield f"{i},"
            await anyio.sleep(0.001)  # pace the model so several batches form
        relay.gate.set()

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay, max_in_flight=3)
    assert result.reason == "complete"
    assert relay.max_in_flight == 3
    assert relay.close().message.text() == "".join(f"{i}," for i in range(50))


@pytest.mark.anyio
async def test_abort_stops_reading_closes_the_iterator_and_flushes() -> None:
    relay = FakeRelay()
    abort = AbortController()
    closed = anyio.Event()

    async def stream() -> AsyncIterator[str]:
        try:
            yield "partial "
            yield "text"
            abort.abort("stop")
            await anyio.sleep_forever()
            yield "never"
        finally:
            closed.set()

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay, abort.signal)
    assert result.reason == "cancelled" and result.error is None
    assert closed.is_set()
    assert relay.close().message.text() == "partial text"


@pytest.mark.anyio
async def test_an_already_aborted_signal_publishes_nothing() -> None:
    relay = FakeRelay()
    abort = AbortController()
    abort.abort()

    async def stream() -> AsyncIterator[str]:
        yield "x"

    result = await run_pipe(stream(), relay, abort.signal)
    assert result.reason == "cancelled" and result.message_id is None
    assert relay.entries == []


@pytest.mark.anyio
async def test_a_stream_that_raises_closes_with_what_it_had() -> None:
    relay = FakeRelay()

    async def stream() -> AsyncIterator[str | dict[str, Any]]:
        yield "half"
        raise ValueError("model exploded")

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay)
    assert result.reason == "error"
    assert isinstance(result.error, ValueError) and str(result.error) == "model exploded"
    assert relay.close().message.text() == "half"


@pytest.mark.anyio
async def test_a_bad_stream_item_is_an_error() -> None:
    relay = FakeRelay()

    async def stream() -> AsyncIterator[Any]:
        yield "ok"
        yield 42

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay)
    assert result.reason == "error" and isinstance(result.error, TypeError)
    assert relay.close().message.text() == "ok"


@pytest.mark.anyio
async def test_a_refused_publish_stops_the_pipe_with_an_error() -> None:
    relay = FakeRelay()
    relay.fail_on = ResponseAppend

    async def stream() -> AsyncIterator[str]:
        while True:
            yield "x"
            await anyio.sleep(0.001)

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay)
    assert result.reason == "error"
    assert isinstance(result.error, RunwireError) and result.error.code == "RUN_NOT_ACTIVE"
    assert not any(isinstance(e, ResponseClose) for e in relay.entries)


def test_close_entry_carries_the_message_only_when_it_fits() -> None:
    message = UIMessage(
        id="m", role="assistant", parts=[TextPart(text="x" * 500)], metadata={"interrupted": True}
    )
    full = close_entry(entry_id="e", run_id="r", message=message, max_bytes=1000)
    assert full.message == message and full.metadata is None
    assert close_entry(entry_id="e", run_id="r", message=message, max_bytes=None) == full
    short = close_entry(entry_id="e", run_id="r", message=message, max_bytes=400)
    assert short.message is None and short.metadata == {"interrupted": True}
    assert short.message_id == "m"


@pytest.mark.anyio
async def test_with_a_small_frame_every_entry_fits_and_the_tree_folds_the_whole_text() -> None:
    """Escaped characters (6 bytes of JSON each) and one huge delta stay within the frame."""
    frame = 4096
    text = '\u0001😀"' * 3000
    relay = FakeRelay()

    async def stream() -> AsyncIterator[str]:
        yield text[:7]
        yield text[7:]  # one delta many frames long

    result = await run_pipe(
        stream(), relay, max_batch_bytes=frame // 2, max_close_bytes=close_budget(frame)
    )
    assert result.reason == "complete" and result.message.text() == text
    sizes = [len(codec.encode_entry(e)) for e in relay.entries]
    assert max(sizes) <= close_budget(frame)
    assert relay.close().message is None  # the whole message would not fit
    tree = ConversationTree()
    for serial, entry in enumerate(relay.entries, start=1):
        tree.fold(entry.model_copy(update={"serial": serial}))
    (state,) = tree.responses("r")
    assert state.closed and state.view.message.text() == text


@pytest.mark.anyio
async def test_a_rollup_window_puts_a_paced_streams_tokens_on_one_append() -> None:
    # Paced like a model at 100 tokens/s: without a window every token is an append of
    # its own; with one longer than the stream, the end of the stream sends them all at
    # once (well before the window is over: fail_after is shorter than it).
    for window, most in ((0.0, None), (5.0, 1)):
        relay = FakeRelay()

        async def stream() -> AsyncIterator[str]:
            for i in range(10):
                yield f"{i},"
                await anyio.sleep(0.01)  # pace the model

        with anyio.fail_after(4):
            result = await run_pipe(stream(), relay, rollup_window=window)
        assert result.reason == "complete"
        assert relay.close().message.text() == "".join(f"{i}," for i in range(10))
        if most is None:
            assert len(relay.appends()) > 1
        else:
            assert len(relay.appends()) == most


@pytest.mark.anyio
async def test_an_abort_ends_a_rollup_hold_at_once() -> None:
    relay = FakeRelay()
    abort = AbortController()

    async def stream() -> AsyncIterator[str]:
        yield "a "
        yield "b "
        abort.abort("stop")
        await anyio.sleep_forever()

    with anyio.fail_after(4):  # the window is 5 s: the abort must not wait for it
        result = await run_pipe(stream(), relay, abort.signal, rollup_window=5.0)
    assert result.reason == "cancelled"
    assert len(relay.appends()) == 1
    assert relay.close().message.text() == "a b "


@pytest.mark.anyio
async def test_a_rollup_window_out_of_range_is_refused() -> None:
    async def empty() -> AsyncIterator[str]:
        return
        yield ""

    for bad in (-0.1, 11.0):
        with pytest.raises(ValueError, match="rollup_window"):
            await run_pipe(empty(), FakeRelay(), rollup_window=bad)
        with pytest.raises(ValueError, match="rollup_window"):
            agent_side.Agent("ws://127.0.0.1:1", rollup_window=bad)
