"""OpenAI Chat Completions: conversation to ``messages``, stream to UI chunks, a model callable.

``to_chat_messages(messages, system=...)`` turns a Run's conversation
(``run.history()``) into the ``messages`` parameter: tool calls ride the
assistant message's ``tool_calls``, each result is a ``tool`` message,
steering is a user message where it came, and an interrupted reply ends with
``[interrupted by the user]``. ``chat_chunks(stream)`` turns the streamed
``ChatCompletionChunk`` objects into UI chunks: text, tool calls with their
arguments streamed (``tool-input-start`` / ``-delta`` / ``-available``), and a
``finish`` chunk whose metadata carries the usage and finish reason.
``openai_chat_model(client, model, ...)`` is a ``steering_loop`` model.
Install with ``pip install 'runwire[openai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio.abort import AbortSignal
from transport.messages import FilePart, TextPart, UIMessage

from ..loop import Model
from ..pipe import Chunk
from ..tools import Tool
from ._common import (
    ToolSpec,
    call_provider,
    calls_of,
    finish_chunk,
    input_json,
    output_text,
    segments,
    text_of,
    tool_specs,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import (
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
    )

__all__ = ["chat_chunks", "chat_tools", "openai_chat_model", "to_chat_messages"]


def to_chat_messages(
    messages: Sequence[UIMessage], *, system: str | None = None
) -> list[ChatCompletionMessageParam]:
    """The Chat Completions ``messages`` for a conversation (see the module docstring)."""
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append({"role": "system", "content": system})
    for role, parts in segments(messages):
        if role == "tool":
            for result in parts:
                assert not isinstance(result, TextPart)
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": getattr(result, "tool_call_id", ""),
                        "content": output_text(getattr(result, "output", None)),
                    }
                )
        elif role == "assistant":
            calls = calls_of(parts)
            text = text_of(parts)
            if not calls and not text:
                continue
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c.tool_call_id,
                        "type": "function",
                        "function": {"name": c.tool_name, "arguments": output_text(c.input)},
                    }
                    for c in calls
                ]
            out.append(message)  # type: ignore[arg-type]
        elif role == "system":
            out.append({"role": "system", "content": text_of(parts)})
        else:
            user: dict[str, Any] = {"role": "user", "content": _user_content(parts)}
            out.append(user)  # type: ignore[arg-type]
    return out


def _user_content(parts: Sequence[Any]) -> str | list[dict[str, Any]]:
    images = [p for p in parts if isinstance(p, FilePart) and p.media_type.startswith("image/")]
    if not images:
        return text_of(parts)
    content: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif part in images:
            content.append({"type": "image_url", "image_url": {"url": part.url}})
    return content


def chat_tools(tools: Iterable[Tool | ToolSpec] | None) -> list[ChatCompletionFunctionToolParam]:
    """The ``tools`` parameter for runwire tools (or name/description/parameters dicts)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec["description"],
                "parameters": spec["parameters"],
            },
        }
        for spec in tool_specs(tools)
    ]


async def chat_chunks(stream: AsyncIterable[Any]) -> AsyncIterator[Chunk]:
    """UI chunks for a streamed chat completion (see the module docstring)."""
    text_open = False
    calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]
    usage: dict[str, Any] | None = None
    finish: str | None = None
    async for event in stream:
        if event.usage is not None:
            usage = {
                "inputTokens": event.usage.prompt_tokens,
                "outputTokens": event.usage.completion_tokens,
                "totalTokens": event.usage.total_tokens,
            }
        for choice in event.choices[:1]:
            delta = choice.delta
            reasoning = getattr(delta, "reasoning_content", None)
            if isinstance(reasoning, str) and reasoning:
                yield {"type": "reasoning-delta", "id": "reasoning-0", "delta": reasoning}
            if delta.content:
                if not text_open:
                    text_open = True
                    yield {"type": "text-start", "id": "text-0"}
                yield {"type": "text-delta", "id": "text-0", "delta": delta.content}
            for call in delta.tool_calls or []:
                known = calls.get(call.index)
                fn = call.function
                if known is None:
                    known = calls[call.index] = [call.id or f"call-{call.index}", "", ""]
                    known[1] = (fn.name if fn and fn.name else "") or ""
                    yield {"type": "tool-input-start", "toolCallId": known[0], "toolName": known[1]}
                if fn is not None and fn.arguments:
                    known[2] += fn.arguments
                    yield {
                        "type": "tool-input-delta",
                        "toolCallId": known[0],
                        "inputTextDelta": fn.arguments,
                    }
            if choice.finish_reason:
                finish = choice.finish_reason
    if text_open:
        yield {"type": "text-end", "id": "text-0"}
    for call_id, name, arguments in calls.values():
        yield {
            "type": "tool-input-available",
            "toolCallId": call_id,
            "toolName": name,
            "input": input_json(arguments),
        }
    yield finish_chunk(usage, finish)


def openai_chat_model(
    client: AsyncOpenAI,
    model: str,
    *,
    system: str | None = None,
    tools: Iterable[Tool | ToolSpec] | None = None,
    **params: Any,
) -> Model:
    """A ``steering_loop`` model: ``model(messages, signal)`` streaming one chat completion.

    ``client`` is the user's own ``AsyncOpenAI``; ``params`` go to
    ``chat.completions.create`` as they are. Usage is asked for
    (``stream_options.include_usage``) and lands in the reply's metadata.
    """
    tool_params = chat_tools(tools)

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> Any:
            extra: dict[str, Any] = {"stream_options": {"include_usage": True}, **params}
            if tool_params:
                extra["tools"] = tool_params
            return await client.chat.completions.create(
                model=model,
                messages=to_chat_messages(messages, system=system),
                stream=True,
                **extra,
            )

        return call_provider(start, chat_chunks, signal)

    return call
