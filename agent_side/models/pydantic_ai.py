"""pydantic-ai: an agent's streamed run to UI chunks, and a model callable.

``pydantic_ai_chunks(events)`` turns the events of ``Agent.run_stream_events()`` into UI chunks,
with pydantic-ai's own AI SDK encoder, ``VercelAIEventStream``. The chunks hold text, thinking,
and tool calls with streamed arguments and their outputs. When the run fails, an ``error`` chunk
carries the provider's message, and ``pipe()`` then ends the Run ``error``.

``to_pydantic_ai_history(messages)`` turns a Run's conversation into the ``message_history``
that pydantic-ai takes, with the last user turn kept apart as the prompt.
``pydantic_ai_model(agent)`` is a ``steering_loop`` model; the agent runs its own tools.
Install with ``pip install 'runwire[pydantic-ai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio._abort import AbortSignal
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

from .._loop import Model
from .._pipe import Chunk
from ._common import call_provider, output_text, segments, text_of

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage

__all__ = ["pydantic_ai_chunks", "pydantic_ai_model", "to_pydantic_ai_history"]


async def pydantic_ai_chunks(events: AsyncIterator[Any]) -> AsyncIterator[Chunk]:
    """UI chunks (camelCase dicts) for the events of ``Agent.run_stream_events()``."""
    from pydantic_ai.ui.vercel_ai import VercelAIEventStream

    encoder: Any = VercelAIEventStream(run_input=None)
    async for chunk in encoder.transform_stream(events):
        data = chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
        if data.get("type") != "done":
            yield data


def to_pydantic_ai_history(messages: Sequence[UIMessage]) -> tuple[str, list[ModelMessage]]:
    """``(prompt, message_history)``: the last user turn's text, and what came before it."""
    from pydantic_ai import messages as pm

    turns = segments(messages)
    prompt = ""
    if turns and turns[-1][0] == "user":
        prompt = text_of(turns.pop()[1])
    history: list[pm.ModelMessage] = []
    for role, parts in turns:
        if role == "assistant":
            out: list[Any] = []
            text = text_of(parts)
            if text:
                out.append(pm.TextPart(content=text))
            for part in parts:
                if isinstance(part, ToolCallPart):
                    out.append(
                        pm.ToolCallPart(
                            tool_name=part.tool_name,
                            args=part.input if isinstance(part.input, dict) else {},
                            tool_call_id=part.tool_call_id,
                        )
                    )
            if out:
                history.append(pm.ModelResponse(parts=out))
        elif role == "tool":
            returns = [
                pm.ToolReturnPart(
                    tool_name=p.tool_name,
                    content=output_text(p.output),
                    tool_call_id=p.tool_call_id,
                )
                for p in parts
                if isinstance(p, ToolResultPart)
            ]
            history.append(pm.ModelRequest(parts=returns))
        elif role == "system":
            history.append(pm.ModelRequest(parts=[pm.SystemPromptPart(content=text_of(parts))]))
        else:
            history.append(pm.ModelRequest(parts=[pm.UserPromptPart(content=text_of(parts))]))
    return prompt, history


class _Run:
    """An entered ``run_stream_events()``: closing it ends the run and its HTTP stream."""

    def __init__(self, manager: Any, events: Any) -> None:
        self.manager = manager
        self.events = events

    async def aclose(self) -> None:
        await self.manager.__aexit__(None, None, None)


def pydantic_ai_model(agent: Agent[Any, Any], **run_kwargs: Any) -> Model:
    """A ``steering_loop`` model: ``model(messages, signal)`` running ``agent`` streamed.

    ``run_kwargs`` go to ``run_stream_events`` as they are (``deps``,
    ``model_settings``...).
    """

    def call(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Chunk]:
        async def start() -> _Run:
            prompt, history = to_pydantic_ai_history(messages)
            manager = agent.run_stream_events(prompt, message_history=history, **run_kwargs)
            return _Run(manager, await manager.__aenter__())

        async def convert(run: _Run) -> AsyncIterator[Chunk]:
            async for chunk in pydantic_ai_chunks(run.events):
                yield chunk

        return call_provider(start, convert, signal)

    return call
