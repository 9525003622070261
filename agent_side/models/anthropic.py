"""Anthropic Messages: conversation to ``messages``, stream to UI chunks, a model callable.

``to_anthropic_messages(messages)`` turns a Run's conversation into the ``messages`` parameter,
under Anthropic's rules. Roles alternate, so consecutive turns of one role merge into one
message, and the first message is the user's. Tool calls are ``tool_use`` blocks. Their results
are ``tool_result`` blocks at the head of the next user message, and steering is user text after
them. An interrupted reply ends with ``[interrupted by the user]``. System messages go to the
``system`` parameter, through ``anthropic_system``.

``anthropic_chunks(stream)`` turns the raw stream events into UI chunks. The events may be the
SDK's objects or their JSON as dicts. The chunks hold text, thinking as reasoning, tool calls
with their JSON streamed, and a ``finish`` chunk with usage and stop reason.

``anthropic_model(client, model, ...)`` is a ``steering_loop`` model.
Install with ``pip install 'runwire[anthropic]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio._abort import AbortSignal
from transport.messages import TextPart, ToolCallPart, ToolResultPart, UIMessage

from .._loop import Model
from .._pipe import Chunk
from .._tools import Tool
from ._common import (
    ProviderStreamError,
    RawStream,
    ToolSpec,
    call_provider,
    field,
    finish_chunk,
    input_json,
    open_raw,
    output_text,
    segments,
    sse_data,
    tool_specs,
)

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types import MessageParam, ToolParam

__all__ = [
    "anthropic_chunks",
    "anthropic_model",
    "anthropic_system",
    "anthropic_tools",
    "to_anthropic_messages",
]

_EMPTY_TURN = "(no content)"


def anthropic_system(messages: Sequence[UIMessage], system: str | None = None) -> str | None:
    """``system`` followed by the conversation's system messages, or ``None`` if none."""
    texts = [system] if system else []
    texts += [m.text() for m in messages if m.role == "system" and m.text()]
    return "\n\n".join(texts) or None


def to_anthropic_messages(messages: Sequence[UIMessage]) -> list[MessageParam]:
    """The Messages API ``messages`` for a conversation (see the module docstring)."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for role, parts in segments(messages):
        if role == "system":
            continue
        blocks: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part, TextPart) and part.text:
                blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, ToolCallPart):
                data = part.input if isinstance(part.input, dict) else {"input": part.input}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "input": data,
                    }
                )
            elif isinstance(part, ToolResultPart):
                blocks.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": part.tool_call_id,
                        "content": output_text(part.output),
                        "is_error": part.is_error,
                    }
                )
        if not blocks:
            continue
        wire_role = "user" if role in ("user", "tool") else "assistant"
        if turns and turns[-1][0] == wire_role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((wire_role, blocks))
    if turns and turns[0][0] != "user":
        turns.insert(0, ("user", [{"type": "text", "text": _EMPTY_TURN}]))
    for _, blocks in turns:  # tool results first in a user turn, as the API asks
        blocks.sort(key=lambda b: b["type"] != "tool_result")
    return [{"role": role, "content": blocks} for role, blocks in turns]  # type: ignore[misc]


def anthropic_tools(tools: Iterable[Tool | ToolSpec] | None) -> list[ToolParam]:
    """The ``tools`` parameter for runwire tools (or name/description/parameters dicts)."""
    return [
        {
            "name": spec["name"],
            "description": spec["description"],
            "input_schema": spec["parameters"],
        }
        for spec in tool_specs(tools)
    ]


async def anthropic_chunks(stream: AsyncIterable[Any]) -> AsyncIterator[Chunk]:
    """UI chunks for a raw Messages stream (see the module docstring).

    The events are the SDK's raw stream events or their JSON as dicts (what
    ``sse_data`` reads off the raw response). An ``error`` event raises
    ``ProviderStreamError`` with the provider's message.
    """
    blocks: dict[int, tuple[str, str, str]] = {}  # index -> (kind, id, name)
    arguments: dict[int, list[str]] = {}
    usage: dict[str, Any] = {}
    stop: str | None = None
    async for event in stream:
        kind = field(event, "type")
        if kind == "content_block_delta":
            index = field(event, "index")
            known = blocks.get(index)
            if known is None:
                continue
            delta = field(event, "delta")
            delta_type = field(delta, "type")
            if delta_type == "text_delta":
                yield {"type": "text-delta", "id": known[1], "delta": field(delta, "text")}
            elif delta_type == "thinking_delta":
                yield {"type": "reasoning-delta", "id": known[1], "delta": field(delta, "thinking")}
            elif delta_type == "input_json_delta":
                partial = field(delta, "partial_json")
                if partial:
                    arguments[index].append(partial)
                    yield {
                        "type": "tool-input-delta",
                        "toolCallId": known[1],
                        "inputTextDelta": partial,
                    }
        elif kind == "message_start":
            got = field(field(event, "message"), "usage")
            usage["inputTokens"] = field(got, "input_tokens")
            usage["outputTokens"] = field(got, "output_tokens")
        elif kind == "content_block_start":
            block = field(event, "content_block")
            block_type = field(block, "type")
            index = field(event, "index")
            if block_type == "text":
                blocks[index] = ("text", f"text-{index}", "")
                yield {"type": "text-start", "id": f"text-{index}"}
                text = field(block, "text")
                if text:
                    yield {"type": "text-delta", "id": f"text-{index}", "delta": text}
            elif block_type == "thinking":
                blocks[index] = ("reasoning", f"reasoning-{index}", "")
                yield {"type": "reasoning-start", "id": f"reasoning-{index}"}
            elif block_type == "tool_use":
                call_id, name = field(block, "id"), field(block, "name")
                blocks[index] = ("tool", call_id, name)
                arguments[index] = []
                yield {"type": "tool-input-start", "toolCallId": call_id, "toolName": name}
        elif kind == "content_block_stop":
            index = field(event, "index")
            known = blocks.get(index)
            if known is None:
                continue
            if known[0] == "tool":
                yield {
                    "type": "tool-input-available",
                    "toolCallId": known[1],
                    "toolName": known[2],
                    "input": input_json("".join(arguments[index])),
                }
            else:
                yield {"type": f"{known[0]}-end", "id": known[1]}
        elif kind == "message_delta":
            usage["outputTokens"] = field(field(event, "usage"), "output_tokens")
            stop = field(field(event, "delta"), "stop_reason") or stop
        elif kind == "error" and type(event) is dict:
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            raise ProviderStreamError(message or "An error occurred during streaming")
    if usage:
        usage["totalTokens"] = (usage.get("inputTokens") or 0) + (usage.get("outputTokens") or 0)
    yield finish_chunk(usage, stop)


def anthropic_model(
    client: AsyncAnthropic,
    model: str,
    *,
    system: str | None = None,
    tools: Iterable[Tool | ToolSpec] | None = None,
    max_tokens: int = 4096,
    **params: Any,
) -> Model:
    """A ``steering_loop`` model: ``model(messages, signal)`` streaming one Messages call.

    ``client`` is the user's own ``AsyncAnthropic``; ``params`` go to
    ``messages.create`` as they are. The call goes through
    ``with_streaming_response``: the client's own HTTP stream, read as
    dicts, without building an SDK object per event.
    """
    tool_params = anthropic_tools(tools)

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> Any:
            extra: dict[str, Any] = dict(params)
            if tool_params:
                extra["tools"] = tool_params
            instructions = anthropic_system(messages, system)
            if instructions:
                extra["system"] = instructions
            request = client.messages.with_streaming_response.create(
                model=model,
                max_tokens=max_tokens,
                messages=to_anthropic_messages(messages),
                stream=True,
                **extra,
            )
            return await open_raw(request)

        return call_provider(start, _raw_chunks, signal)

    return call


def _raw_chunks(stream: RawStream) -> AsyncIterator[Chunk]:
    return anthropic_chunks(sse_data(stream))
