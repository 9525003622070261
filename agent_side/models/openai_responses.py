"""OpenAI Responses API: conversation to ``input`` items, stream to UI chunks, a model callable.

``to_responses_input(messages)`` turns a Run's conversation into ``input`` items. User and
assistant text become messages. Tool calls become ``function_call`` items, and their results
``function_call_output`` items. Steering is a user message where it came. An interrupted reply
ends with ``[interrupted by the user]``.

``responses_chunks(stream)`` turns the streamed events, the SDK's objects or their JSON as dicts,
into UI chunks. The chunks hold text, reasoning summaries, function calls with their arguments
streamed, and a ``finish`` chunk with usage. An ``error`` event or a failed response becomes an
``error`` chunk.

``openai_responses_model(client, model, ...)`` is a ``steering_loop`` model. It sends
``store=False``, since the conversation is the Run's and goes whole with each call.
Install with ``pip install 'runwire[openai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio._abort import AbortSignal
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

from .._loop import Model
from .._pipe import Chunk
from .._tools import Tool
from ._common import (
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
    text_of,
    tool_specs,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.responses import FunctionToolParam, ResponseInputItemParam

__all__ = [
    "ResponseFailedError",
    "ResponsesFolder",
    "openai_responses_model",
    "responses_chunks",
    "responses_tools",
    "to_responses_input",
]


def to_responses_input(messages: Sequence[UIMessage]) -> list[ResponseInputItemParam]:
    """The Responses API ``input`` for a conversation (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for role, parts in segments(messages):
        if role == "tool":
            for part in parts:
                if isinstance(part, ToolResultPart):
                    out.append(
                        {
                            "type": "function_call_output",
                            "call_id": part.tool_call_id,
                            "output": output_text(part.output),
                        }
                    )
            continue
        text = text_of(parts)
        if text:
            wire_role = "developer" if role == "system" else role
            out.append({"type": "message", "role": wire_role, "content": text})
        for part in parts:
            if isinstance(part, ToolCallPart):
                out.append(
                    {
                        "type": "function_call",
                        "call_id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": output_text(part.input),
                    }
                )
    return out  # type: ignore[return-value]


def responses_tools(tools: Iterable[Tool | ToolSpec] | None) -> list[FunctionToolParam]:
    """The ``tools`` parameter for runwire tools (or name/description/parameters dicts)."""
    return [
        {
            "type": "function",
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["parameters"],
            "strict": False,
        }
        for spec in tool_specs(tools)
    ]


class ResponseFailedError(Exception):
    """The provider reported the response failed (an ``error`` or ``response.failed`` event)."""


class ResponsesFolder:
    """Turns Responses API stream events into UI chunks, one event at a time.

    ``responses_chunks`` drives one over a stream; the OpenAI Agents SDK
    converter drives one over the raw events of several responses.
    """

    def __init__(self) -> None:
        self._calls: dict[str, tuple[str, str]] = {}  # item id -> (call id, name)
        self._arguments: dict[str, list[str]] = {}
        self._texts: set[str] = set()
        self.usage: dict[str, Any] | None = None
        self.status: str | None = None

    def feed(self, event: Any) -> list[Chunk]:
        """The chunks for one event; raises ``ResponseFailedError`` for a failure event.

        ``event`` is an SDK event object or its JSON as a dict.
        """
        kind = field(event, "type")
        if kind == "response.output_text.delta":
            item_id = field(event, "item_id")
            delta: Chunk = {"type": "text-delta", "id": item_id, "delta": field(event, "delta")}
            if item_id in self._texts:
                return [delta]
            self._texts.add(item_id)
            return [{"type": "text-start", "id": item_id}, delta]
        if kind == "response.output_item.added":
            item = field(event, "item")
            if field(item, "type") != "function_call":
                return []
            call_id, name = field(item, "call_id"), field(item, "name")
            key = field(item, "id") or call_id
            self._calls[key] = (call_id, name)
            self._arguments[key] = []
            return [{"type": "tool-input-start", "toolCallId": call_id, "toolName": name}]
        if kind == "response.output_text.done":
            item_id = field(event, "item_id")
            return [{"type": "text-end", "id": item_id}] if item_id in self._texts else []
        if kind == "response.reasoning_summary_text.delta":
            return [
                {
                    "type": "reasoning-delta",
                    "id": field(event, "item_id"),
                    "delta": field(event, "delta"),
                }
            ]
        if kind == "response.function_call_arguments.delta":
            item_id, text = field(event, "item_id"), field(event, "delta")
            known = self._calls.get(item_id)
            if known is None or not text:
                return []
            self._arguments[item_id].append(text)
            return [{"type": "tool-input-delta", "toolCallId": known[0], "inputTextDelta": text}]
        if kind == "response.output_item.done":
            item = field(event, "item")
            if field(item, "type") != "function_call":
                return []
            call_id = field(item, "call_id")
            key = field(item, "id") or call_id
            text = field(item, "arguments") or "".join(self._arguments.get(key, []))
            return [
                {
                    "type": "tool-input-available",
                    "toolCallId": call_id,
                    "toolName": field(item, "name"),
                    "input": input_json(text),
                }
            ]
        if kind in ("response.completed", "response.incomplete"):
            response = field(event, "response")
            self.status = field(response, "status")
            self._add_usage(field(response, "usage"))
        elif kind == "response.failed":
            error = field(field(event, "response"), "error")
            message = field(error, "message") if error is not None else None
            raise ResponseFailedError(message or "response failed")
        elif kind == "error":
            raise ResponseFailedError(field(event, "message") or "response failed")
        return []

    def _add_usage(self, got: Any) -> None:
        if got is None:
            return
        before = self.usage or {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        self.usage = {
            "inputTokens": before["inputTokens"] + field(got, "input_tokens"),
            "outputTokens": before["outputTokens"] + field(got, "output_tokens"),
            "totalTokens": before["totalTokens"] + field(got, "total_tokens"),
        }

    def finish(self) -> Chunk:
        """The ``finish`` chunk: usage summed over the responses seen, and the last status."""
        return finish_chunk(self.usage, self.status)


async def responses_chunks(stream: AsyncIterable[Any]) -> AsyncIterator[Chunk]:
    """UI chunks for a streamed response (see the module docstring)."""
    folder = ResponsesFolder()
    async for event in stream:
        for chunk in folder.feed(event):
            yield chunk
    yield folder.finish()


def openai_responses_model(
    client: AsyncOpenAI,
    model: str,
    *,
    system: str | None = None,
    tools: Iterable[Tool | ToolSpec] | None = None,
    **params: Any,
) -> Model:
    """A ``steering_loop`` model: ``model(messages, signal)`` streaming one response.

    ``client`` is the user's own ``AsyncOpenAI``; ``system`` is sent as
    ``instructions``; ``params`` go to ``responses.create`` as they are.
    The call goes through ``with_streaming_response``: the client's own
    HTTP stream, read as dicts, without building an SDK object per event.
    """
    tool_params = responses_tools(tools)

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> Any:
            extra: dict[str, Any] = {"store": False, **params}
            if tool_params:
                extra["tools"] = tool_params
            if system:
                extra["instructions"] = system
            request = client.responses.with_streaming_response.create(
                model=model, input=to_responses_input(messages), stream=True, **extra
            )
            return await open_raw(request)

        return call_provider(start, _raw_chunks, signal)

    return call


def _raw_chunks(stream: RawStream) -> AsyncIterator[Chunk]:
    return responses_chunks(sse_data(stream))
