"""OpenAI Responses API: conversation to ``input`` items, stream to UI chunks, a model callable.

``to_responses_input(messages)`` turns a Run's conversation into ``input``
items: user and assistant text as messages, tool calls as ``function_call``
items and their results as ``function_call_output`` items, steering as a user
message where it came, an interrupted reply ending with ``[interrupted by the
user]``. ``responses_chunks(stream)`` turns the streamed events into UI
chunks: text, reasoning summaries, function calls with their arguments
streamed, and a ``finish`` chunk with usage. An ``error`` event or a failed
response becomes an ``error`` chunk. ``openai_responses_model(client, model,
...)`` is a ``steering_loop`` model (``store=False``: the conversation is the
Run's, sent whole each call). Install with ``pip install 'runwire[openai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio.abort import AbortSignal
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

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
        """The chunks for one event; raises ``ResponseFailedError`` for a failure event."""
        kind = getattr(event, "type", None)
        if kind == "response.output_item.added" and event.item.type == "function_call":
            item = event.item
            self._calls[item.id or item.call_id] = (item.call_id, item.name)
            self._arguments[item.id or item.call_id] = []
            return [{"type": "tool-input-start", "toolCallId": item.call_id, "toolName": item.name}]
        if kind == "response.output_text.delta":
            out: list[Chunk] = []
            if event.item_id not in self._texts:
                self._texts.add(event.item_id)
                out.append({"type": "text-start", "id": event.item_id})
            out.append({"type": "text-delta", "id": event.item_id, "delta": event.delta})
            return out
        if kind == "response.output_text.done" and event.item_id in self._texts:
            return [{"type": "text-end", "id": event.item_id}]
        if kind == "response.reasoning_summary_text.delta":
            return [{"type": "reasoning-delta", "id": event.item_id, "delta": event.delta}]
        if kind == "response.function_call_arguments.delta":
            known = self._calls.get(event.item_id)
            if known is None or not event.delta:
                return []
            self._arguments[event.item_id].append(event.delta)
            return [
                {"type": "tool-input-delta", "toolCallId": known[0], "inputTextDelta": event.delta}
            ]
        if kind == "response.output_item.done" and event.item.type == "function_call":
            item = event.item
            text = item.arguments or "".join(self._arguments.get(item.id or item.call_id, []))
            return [
                {
                    "type": "tool-input-available",
                    "toolCallId": item.call_id,
                    "toolName": item.name,
                    "input": input_json(text),
                }
            ]
        if kind in ("response.completed", "response.incomplete"):
            self.status = event.response.status
            self._add_usage(event.response.usage)
        elif kind == "response.failed":
            error = event.response.error
            raise ResponseFailedError(error.message if error is not None else "response failed")
        elif kind == "error":
            raise ResponseFailedError(getattr(event, "message", None) or "response failed")
        return []

    def _add_usage(self, got: Any) -> None:
        if got is None:
            return
        before = self.usage or {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        self.usage = {
            "inputTokens": before["inputTokens"] + got.input_tokens,
            "outputTokens": before["outputTokens"] + got.output_tokens,
            "totalTokens": before["totalTokens"] + got.total_tokens,
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
    """
    tool_params = responses_tools(tools)

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> Any:
            extra: dict[str, Any] = {"store": False, **params}
            if tool_params:
                extra["tools"] = tool_params
            if system:
                extra["instructions"] = system
            return await client.responses.create(
                model=model, input=to_responses_input(messages), stream=True, **extra
            )

        return call_provider(start, responses_chunks, signal)

    return call
