"""What the model adapters share: tool specs, reading a conversation, running a provider call."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import anyio

from transport.asyncio.abort import AbortSignal
from transport.history import INTERRUPTED_MARK, history_message
from transport.messages import Part, TextPart, ToolCallPart, ToolResultPart, UIMessage

from ..pipe import Chunk, close_source
from ..tools import Tool

__all__ = [
    "ToolSpec",
    "call_provider",
    "finish_chunk",
    "input_json",
    "output_text",
    "provider_message",
    "segments",
    "tool_specs",
]

log = logging.getLogger("runwire.agent")

S = TypeVar("S")
ToolSpec = dict[str, Any]
"""A tool as a model is told of it: ``name``, ``description``, ``parameters`` (JSON schema)."""


def tool_specs(tools: Iterable[Tool | ToolSpec] | None) -> list[ToolSpec]:
    """The specs of ``tools``: a runwire ``Tool``'s ``schema()``, a dict as it is."""
    out: list[ToolSpec] = []
    for item in tools or ():
        spec = item.schema() if isinstance(item, Tool) else dict(item)
        spec.setdefault("description", "")
        spec.setdefault("parameters", {"type": "object", "properties": {}})
        out.append(spec)
    return out


def output_text(output: Any) -> str:
    """A tool result's output as the text a provider takes."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def input_json(text: str) -> Any:
    """A tool call's streamed arguments, parsed; ``{}`` for none, the text itself if not JSON."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def _marked(message: UIMessage) -> UIMessage:
    """``message`` with the interrupted mark, unless ``run.history()`` already added it."""
    if not message.metadata.get("interrupted"):
        return history_message(message)
    last = message.parts[-1] if message.parts else None
    if isinstance(last, TextPart) and last.text.strip() == INTERRUPTED_MARK:
        return history_message(message.model_copy(update={"metadata": {}}))
    return history_message(message)


def segments(messages: Sequence[UIMessage]) -> list[tuple[str, list[Part]]]:
    """The conversation as provider turns: ``(role, parts)``, in order.

    An assistant message splits where its tool results are: the calls and
    text before them are an ``assistant`` turn, the results a ``tool`` turn.
    Interrupted replies carry the mark, calls never made are left out, and
    system messages are kept as ``system`` turns.
    """
    out: list[tuple[str, list[Part]]] = []
    for original in messages:
        message = _marked(original)
        if message.role != "assistant":
            out.append((message.role, list(message.parts)))
            continue
        current: list[Part] = []
        role = "assistant"
        for part in message.parts:
            kind = "tool" if isinstance(part, ToolResultPart) else "assistant"
            if kind != role and current:
                out.append((role, current))
                current = []
            role = kind
            current.append(part)
        if current:
            out.append((role, current))
    return out


def calls_of(parts: Sequence[Part]) -> list[ToolCallPart]:
    return [p for p in parts if isinstance(p, ToolCallPart)]


def text_of(parts: Sequence[Part]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart))


def finish_chunk(usage: dict[str, Any] | None, finish_reason: str | None) -> Chunk:
    """The ``finish`` chunk: usage and the finish reason go into the message's metadata."""
    meta: dict[str, Any] = {}
    if usage:
        meta["usage"] = usage
    if finish_reason:
        meta["finishReason"] = finish_reason
    chunk: Chunk = {"type": "finish"}
    if meta:
        chunk["messageMetadata"] = meta
    return chunk


def provider_message(exc: BaseException) -> str:
    """The provider's own words for a failed call (the SDK's ``message`` when it has one)."""
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) and message else str(exc)
    return text or type(exc).__name__


async def call_provider(
    start: Callable[[], Awaitable[S]],
    convert: Callable[[S], AsyncIterator[Chunk]],
    signal: AbortSignal,
) -> AsyncIterator[Chunk]:
    """Open a provider's stream with ``start()`` and yield ``convert(stream)``'s chunks.

    The stream is closed however the read ends: at its end, on an abort, or
    when ``pipe()`` stops reading. Each chunk is followed by a checkpoint, so
    a backlog the SDK buffered never holds the event loop. A provider error (unreachable, refused,
    failed mid-stream) becomes an ``error`` chunk with the provider's message,
    unless ``signal`` fired (then the call just stops).
    """
    stream: S | None = None
    try:
        if signal.aborted:
            return
        stream = await start()
        async for chunk in convert(stream):
            yield chunk
            # An SDK hands out events it already buffered without suspending: let the loop
            # run (the pipe's publisher, other Runs) between them, as a model client paced
            # by its socket would.
            await anyio.lowlevel.checkpoint()
    except Exception as exc:
        if signal.aborted:
            log.debug("model call stopped on its abort: %r", exc)
            return
        log.info("model call failed: %s", exc)
        yield {"type": "error", "errorText": provider_message(exc)}
    finally:
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await close_source(stream)
