"""OpenAI Chat Completions: conversation to ``messages``, stream to UI chunks, a model callable.

``to_chat_messages(messages, system=...)`` turns a Run's conversation, ``run.history()``, into
the ``messages`` parameter. Tool calls ride the assistant message's ``tool_calls``, and each
result is a ``tool`` message. Steering is a user message where it came. An interrupted reply ends
with ``[interrupted by the user]``.

``chat_chunks(stream)`` turns the streamed ``ChatCompletionChunk`` objects, or their JSON as
dicts, into UI chunks. The chunks hold text, tool calls with their arguments streamed, and a
``finish`` chunk whose metadata carries the usage and finish reason.

``openai_chat_model(client, model, ...)`` is a ``steering_loop`` model.
Install with ``pip install 'runwire[openai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio._abort import AbortSignal
from transport.messages import FilePart, TextPart, UIMessage

from .._loop import Model
from .._pipe import Chunk
from .._tools import Tool
from ._common import (
    ProviderStreamError,
    RawStream,
    ToolSpec,
    call_provider,
    calls_of,
    field,
    finish_chunk,
    input_json,
    open_raw,
    output_text,
    segments,
    sse_data,
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
    """UI chunks for a streamed chat completion (see the module docstring).

    The events are the SDK's ``ChatCompletionChunk`` objects or their JSON
    as dicts (what ``sse_data`` reads off the raw response). A dict with an
    ``error`` raises ``ProviderStreamError`` with the provider's message.
    """
    text_open = False
    calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]
    usage: dict[str, Any] | None = None
    finish: str | None = None
    async for event in stream:
        if type(event) is dict and event.get("error") is not None:
            raise ProviderStreamError(_error_text(event["error"]))
        got = field(event, "usage")
        if got is not None:
            usage = {
                "inputTokens": field(got, "prompt_tokens"),
                "outputTokens": field(got, "completion_tokens"),
                "totalTokens": field(got, "total_tokens"),
            }
        for choice in (field(event, "choices") or ())[:1]:
            delta = field(choice, "delta")
            if delta is None:
                continue
            reasoning = field(delta, "reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                yield {"type": "reasoning-delta", "id": "reasoning-0", "delta": reasoning}
            content = field(delta, "content")
            if content:
                if not text_open:
                    text_open = True
                    yield {"type": "text-start", "id": "text-0"}
                yield {"type": "text-delta", "id": "text-0", "delta": content}
            for call in field(delta, "tool_calls") or ():
                index = field(call, "index")
                known = calls.get(index)
                fn = field(call, "function")
                if known is None:
                    known = calls[index] = [field(call, "id") or f"call-{index}", "", ""]
                    known[1] = (field(fn, "name") if fn is not None else None) or ""
                    yield {"type": "tool-input-start", "toolCallId": known[0], "toolName": known[1]}
                arguments = field(fn, "arguments") if fn is not None else None
                if arguments:
                    known[2] += arguments
                    yield {
                        "type": "tool-input-delta",
                        "toolCallId": known[0],
                        "inputTextDelta": arguments,
                    }
            reason = field(choice, "finish_reason")
            if reason:
                finish = reason
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


def _error_text(error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else "An error occurred during streaming"


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
    The call goes through ``with_streaming_response``: the client's own
    HTTP stream, read as dicts, without building an SDK object per event.
    """
    tool_params = chat_tools(tools)

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> RawStream:
            extra: dict[str, Any] = {"stream_options": {"include_usage": True}, **params}
            if tool_params:
                extra["tools"] = tool_params
            request = client.chat.completions.with_streaming_response.create(
                model=model,
                messages=to_chat_messages(messages, system=system),
                stream=True,
                **extra,
            )
            return await open_raw(request)

        return call_provider(start, _raw_chunks, signal)

    return call


def _raw_chunks(stream: RawStream) -> AsyncIterator[Chunk]:
    return chat_chunks(sse_data(stream))
