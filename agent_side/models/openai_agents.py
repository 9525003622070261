"""The OpenAI Agents SDK: a streamed run (``Runner.run_streamed``) to UI chunks, a model callable.

``agents_chunks(result)`` reads ``result.stream_events()``. The raw Responses API events of
each model call become text, reasoning, and tool calls with streamed arguments, as
``openai_responses`` reads them. The outputs of the tools the Agents SDK ran become
``tool-output-available`` chunks. A ``finish`` chunk carries the usage, summed over the run's
model calls. Closing it cancels the run.

``openai_agents_model(agent)`` is a ``steering_loop`` model: the conversation goes in as
Responses input items, and the Agents SDK runs its own tools.
Install with ``pip install 'runwire[openai-agents]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from transport.asyncio._abort import AbortSignal
from transport.messages import UIMessage

from .._loop import Model
from .._pipe import Chunk
from ._common import call_provider
from .openai_responses import ResponsesFolder, to_responses_input

if TYPE_CHECKING:
    from agents import Agent
    from agents.result import RunResultStreaming

__all__ = ["agents_chunks", "openai_agents_model"]


async def agents_chunks(result: RunResultStreaming) -> AsyncIterator[Chunk]:
    """UI chunks for a streamed Agents SDK run (see the module docstring)."""
    folder = ResponsesFolder()
    try:
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                for chunk in folder.feed(event.data):
                    yield chunk
            elif event.type == "run_item_stream_event" and event.name == "tool_output":
                raw: Any = event.item.raw_item
                call_id = (
                    raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
                )
                if isinstance(call_id, str):
                    output = getattr(event.item, "output", None)
                    yield {"type": "tool-output-available", "toolCallId": call_id, "output": output}
    finally:
        if not result.is_complete:
            result.cancel()
    yield folder.finish()


class _Streamed:
    """A streamed run as a source ``call_provider`` can close (closing cancels the run)."""

    def __init__(self, result: RunResultStreaming) -> None:
        self.result = result

    def close(self) -> None:
        if not self.result.is_complete:
            self.result.cancel()


def openai_agents_model(agent: Agent[Any], **run_kwargs: Any) -> Model:
    """A ``steering_loop`` model: ``model(messages, signal)`` running ``agent`` streamed.

    ``run_kwargs`` go to ``Runner.run_streamed`` as they are (``context``,
    ``max_turns``, ``run_config``...).
    """
    from agents import Runner

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> _Streamed:
            items: Any = to_responses_input(messages)
            return _Streamed(Runner.run_streamed(agent, input=items, **run_kwargs))

        async def convert(streamed: _Streamed) -> AsyncIterator[Chunk]:
            async for chunk in agents_chunks(streamed.result):
                yield chunk

        return call_provider(start, convert, signal)

    return call
