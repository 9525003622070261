"""Anthropic Messages: conversation to ``messages``, stream to UI chunks, a model callable.

``to_anthropic_messages(messages)`` turns a Run's conversation into the
``messages`` parameter under Anthropic's rules: roles alternate (consecutive
turns of one role merge into one message), the first message is the user's,
tool calls are ``tool_use`` blocks and their results ``tool_result`` blocks at
the head of the next user message, steering is user text after them, and an
interrupted reply ends with ``[interrupted by the user]``. System messages go
to the ``system`` parameter (``anthropic_system``). ``anthropic_chunks(stream)``
turns the raw stream events into UI chunks: text, thinking as reasoning, tool
calls with their JSON streamed, and a ``finish`` chunk with usage and stop
reason. ``anthropic_model(client, model, ...)`` is a ``steering_loop`` model.
Install with ``pip install 'runwire[anthropic]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio.abort import AbortSignal
from transport.messages import TextPart, ToolCallPart, ToolResultPart, UIMessage

from ..loop import Model
from ..pipe import Chunk
from ..tools import Tool
from ._common import (
    ToolSpec,
    call_provider,
    finish_chunk,
    input_json,
    output_text,
    segments,
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
    """UI chunks for a raw Messages stream (see the module docstring)."""
    blocks: dict[int, tuple[str, str, str]] = {}  # index -> (kind, id, name)
    arguments: dict[int, list[str]] = {}
    usage: dict[str, Any] = {}
    stop: str | None = None
    async for event in stream:
        kind = event.type
        if kind == "message_start":
            usage["inputTokens"] = event.message.usage.input_tokens
            usage["outputTokens"] = event.message.usage.output_tokens
        elif kind == "content_block_start":
            block = event.content_block
            index = event.index
            if block.type == "text":
                blocks[index] = ("text", f"text-{index}", "")
                yield {"type": "text-start", "id": f"text-{index}"}
                if block.text:
                    yield {"type": "text-delta", "id": f"text-{index}", "delta": block.text}
            elif block.type == "thinking":
                blocks[index] = ("reasoning", f"reasoning-{index}", "")
                yield {"type": "reasoning-start", "id": f"reasoning-{index}"}
            elif block.type == "tool_use":
                blocks[index] = ("tool", block.id, block.name)
                arguments[index] = []
                yield {"type": "tool-input-start", "toolCallId": block.id, "toolName": block.name}
        elif kind == "content_block_delta":
            known = blocks.get(event.index)
            delta = event.delta
            if known is None:
                continue
            if delta.type == "text_delta":
                yield {"type": "text-delta", "id": known[1], "delta": delta.text}
            elif delta.type == "thinking_delta":
                yield {"type": "reasoning-delta", "id": known[1], "delta": delta.thinking}
            elif delta.type == "input_json_delta" and delta.partial_json:
                arguments[event.index].append(delta.partial_json)
                yield {
                    "type": "tool-input-delta",
                    "toolCallId": known[1],
                    "inputTextDelta": delta.partial_json,
                }
        elif kind == "content_block_stop":
            known = blocks.get(event.index)
            if known is None:
                continue
            if known[0] == "tool":
                yield {
                    "type": "tool-input-available",
                    "toolCallId": known[1],
                    "toolName": known[2],
                    "input": input_json("".join(arguments[event.index])),
                }
            else:
                yield {"type": f"{known[0]}-end", "id": known[1]}
        elif kind == "message_delta":
            usage["outputTokens"] = event.usage.output_tokens
            stop = event.delta.stop_reason or stop
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
    ``messages.create`` as they are.
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
            return await client.messages.create(
                model=model,
                max_tokens=max_tokens,
                messages=to_anthropic_messages(messages),
                stream=True,
                **extra,
            )

        return call_provider(start, anthropic_chunks, signal)

    return call
