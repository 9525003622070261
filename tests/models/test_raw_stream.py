"""The raw-stream fast path: SSE data read as dicts, converted as the SDK's objects would be.

``sse_data`` parses server-sent events; each stream converter gives the same
chunks from the JSON dicts as from the SDK's own event objects; a mid-stream
error in the dicts raises with the provider's message; the yielder lets the
loop run between chunks only when reading did not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic.types import RawMessageStreamEvent
from openai._models import construct_type as openai_construct
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from agent_side._pipe import Chunk
from agent_side.models._common import ProviderStreamError, _Yielder, sse_data
from agent_side.models.anthropic import anthropic_chunks
from agent_side.models.openai_chat import chat_chunks
from agent_side.models.openai_responses import ResponseFailedError, responses_chunks

from .fake_provider import SSE_DIR

pytestmark = pytest.mark.anyio

Converter = Callable[[Any], AsyncIterator[Chunk]]


async def lines(items: Iterable[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


async def events(name: str) -> list[Any]:
    text = (SSE_DIR / name).read_text()
    return [e async for e in sse_data(lines(text.split("\n")))]


async def through(convert: Converter, items: list[Any]) -> list[Chunk]:
    async def source() -> AsyncIterator[Any]:
        for item in items:
            yield item

    return [c async for c in convert(source())]


async def test_sse_data_joins_data_lines_skips_comments_and_stops_at_done() -> None:
    raw = [
        ": a comment",
        "event: message",
        'data: {"a":',
        "data: 1}",
        "",
        "id: 7",
        'data:{"b":2}',
        "",
        "",
        "data: [DONE]",
        "",
        'data: {"never": true}',
        "",
    ]
    assert [e async for e in sse_data(lines(raw))] == [{"a": 1}, {"b": 2}]
    assert [e async for e in sse_data(lines(['data: {"c": 3}']))] == [{"c": 3}]


# The SDKs build their stream events with ``construct_type`` (no validation), as here.


async def test_sse_data_reads_the_body_to_its_end_after_done() -> None:
    read: list[str] = []

    async def body() -> AsyncIterator[str]:
        for line in ['data: {"a": 1}', "", "data: [DONE]", "", ": trailer", ""]:
            read.append(line)
            yield line

    assert [e async for e in sse_data(body())] == [{"a": 1}]
    assert read[-1:] == [""] and len(read) == 6  # drained, so HTTP/1.1 can reuse the connection


def _chat(event: dict[str, Any]) -> Any:
    return openai_construct(type_=ChatCompletionChunk, value=event)


def _responses(event: dict[str, Any]) -> Any:
    return openai_construct(type_=ResponseStreamEvent, value=event)


def _anthropic(event: dict[str, Any]) -> Any:
    return anthropic_construct(type_=RawMessageStreamEvent, value=event)


CASES = [
    ("openai_chat", chat_chunks, _chat),
    ("openai_responses", responses_chunks, _responses),
    ("anthropic", anthropic_chunks, _anthropic),
]


@pytest.mark.parametrize(("name", "convert", "sdk"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("reply", ["text", "tool"])
async def test_dicts_and_sdk_objects_give_the_same_chunks(
    name: str, convert: Converter, sdk: Callable[[dict[str, Any]], Any], reply: str
) -> None:
    dicts = await events(f"{name}_{reply}.sse")
    objects = [sdk(e) for e in dicts if e.get("type") != "ping"]  # the SDK skips pings
    from_dicts = await through(convert, dicts)
    assert from_dicts == await through(convert, objects)
    kinds = {c["type"] for c in from_dicts}
    assert ("text-delta" if reply == "text" else "tool-input-available") in kinds
    assert from_dicts[-1]["type"] == "finish"
    assert from_dicts[-1]["messageMetadata"]["usage"]["totalTokens"] > 0


@pytest.mark.parametrize(("name", "convert", "sdk"), CASES, ids=[c[0] for c in CASES])
async def test_an_error_in_the_dicts_raises_with_the_providers_message(
    name: str, convert: Converter, sdk: Callable[[dict[str, Any]], Any]
) -> None:
    got: list[Chunk] = []
    with pytest.raises((ProviderStreamError, ResponseFailedError)) as caught:
        async for chunk in convert(lines_of(await events(f"{name}_error.sse"))):
            got.append(chunk)
    assert str(caught.value) == "The model is overloaded, try again later"
    assert [c["delta"] for c in got if c["type"] == "text-delta"] == ["Half "]


async def lines_of(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def test_the_yielder_checkpoints_only_when_reading_did_not_suspend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[int] = []
    checkpoint = anyio.lowlevel.checkpoint

    async def counting() -> None:
        counted.append(1)
        await checkpoint()

    monkeypatch.setattr("agent_side.models._common.anyio.lowlevel.checkpoint", counting)
    paced = _Yielder()
    for _ in range(50):
        await checkpoint()  # a socket read that waited for its data
        await paced.after_chunk()
    assert len(counted) == 1  # only the first chunk, before the yielder knew
    buffered = _Yielder()
    for _ in range(50):
        await buffered.after_chunk()
    assert len(counted) == 1 + 50
