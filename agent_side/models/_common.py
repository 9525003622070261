"""What the model adapters share: tool specs, reading a conversation, running a provider call."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, TypeVar

import anyio
import orjson

from transport._history import INTERRUPTED_MARK, history_message
from transport.asyncio._abort import AbortSignal
from transport.messages import Part, TextPart, ToolCallPart, ToolResultPart, UIMessage

from .._pipe import Chunk, close_source
from .._tools import Tool

__all__ = [
    "ProviderStreamError",
    "RawStream",
    "ToolSpec",
    "call_provider",
    "field",
    "finish_chunk",
    "input_json",
    "open_raw",
    "output_text",
    "provider_message",
    "segments",
    "sse_data",
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


def field(event: Any, name: str) -> Any:
    """``event``'s ``name``: a key of a dict, an attribute of an SDK object, ``None`` if absent."""
    if type(event) is dict:
        return event.get(name)
    return getattr(event, name, None)


class ProviderStreamError(Exception):
    """The provider reported an error in the middle of its stream; ``message`` is its text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RawStream:
    """A provider's raw HTTP response, opened with the SDK's ``with_streaming_response``.

    ``lines`` are the response's text lines; ``aclose()`` closes the
    response, and with it the HTTP stream, at once.
    """

    def __init__(self, response: Any, stack: AsyncExitStack) -> None:
        self.response = response
        self._stack = stack

    def lines(self) -> AsyncIterator[str]:
        """The body's lines, as the SDK's HTTP client decodes them."""
        lines: AsyncIterator[str] = self.response.http_response.aiter_lines()
        return lines

    async def aclose(self) -> None:
        await self._stack.aclose()


async def open_raw(request: AbstractAsyncContextManager[Any]) -> RawStream:
    """Send ``request`` (a ``with_streaming_response.create(...)``) and keep its response open.

    The SDK raises its own error for a refused call (an HTTP error status),
    as its plain ``create`` does.
    """
    stack = AsyncExitStack()
    try:
        response = await stack.enter_async_context(request)
    except BaseException:
        await stack.aclose()
        raise
    return RawStream(response, stack)


async def sse_data(source: RawStream | AsyncIterator[str]) -> AsyncIterator[Any]:
    """The JSON ``data`` of each server-sent event, parsed with orjson; ends at ``[DONE]``.

    ``source`` is a ``RawStream`` or an iterator of lines. Event names are
    not needed: each provider's data carries its own ``type``. Comments and
    other fields are skipped, and several ``data`` lines of one event are
    joined with newlines, as the SSE format says. After ``[DONE]`` the rest
    of the body is read (for up to a second), so the client keeps the
    connection for its next call.
    """
    lines = source.lines() if isinstance(source, RawStream) else source
    data: list[str] = []
    loads = orjson.loads
    async for line in lines:
        if line.startswith("data:"):
            value = line[6:] if line.startswith("data: ") else line[5:]
            data.append(value)
            continue
        if line or not data:
            continue
        text = data[0] if len(data) == 1 else "\n".join(data)
        data = []
        if text.startswith("[DONE]"):
            await _drain(lines)
            return
        yield loads(text)
    if data and not data[0].startswith("[DONE]"):
        yield loads("\n".join(data))


_DRAIN_TIMEOUT = 1.0
"""Seconds to read what follows ``[DONE]``, so the connection can be kept for the next call."""


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read the body to its end after ``[DONE]``, as the SDK does: HTTP/1.1 keeps the connection."""
    with anyio.move_on_after(_DRAIN_TIMEOUT), contextlib.suppress(Exception):
        async for _ in lines:
            pass


class _Yielder:
    """Lets the event loop run between chunks only when the source did not let it.

    A source read from a socket suspends between events, so a checkpoint
    after each chunk would be a wasted loop turn. A callback scheduled with
    ``call_soon`` tells whether the loop ran since the last chunk; when it
    did not (the SDK handed out a buffered backlog), the yielder checkpoints.
    Outside asyncio, it checkpoints after every chunk.
    """

    def __init__(self) -> None:
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._ran = False
        self._armed = False

    def _mark(self) -> None:
        self._ran = True

    async def after_chunk(self) -> None:
        loop = self._loop
        if loop is None:
            await anyio.lowlevel.checkpoint()
            return
        if not (self._armed and self._ran):
            await anyio.lowlevel.checkpoint()
        self._ran = False
        self._armed = True
        loop.call_soon(self._mark)


async def call_provider(
    start: Callable[[], Awaitable[S]],
    convert: Callable[[S], AsyncIterator[Chunk]],
    signal: AbortSignal,
) -> AsyncIterator[Chunk]:
    """Open a provider's stream with ``start()`` and yield ``convert(stream)``'s chunks.

    The stream is closed however the read ends: at its end, on an abort, or
    when ``pipe()`` stops reading. The event loop runs between chunks (a
    checkpoint when reading did not suspend), so a backlog the SDK buffered
    never holds it. A provider error (unreachable, refused,
    failed mid-stream) becomes an ``error`` chunk with the provider's message,
    unless ``signal`` fired (then the call just stops).
    """
    stream: S | None = None
    try:
        if signal.aborted:
            return
        stream = await start()
        yielder = _Yielder()
        async for chunk in convert(stream):
            yield chunk
            # An SDK hands out events it already buffered without suspending: let the loop
            # run (the pipe's publisher, other Runs) between them, as a model client paced
            # by its socket would.
            await yielder.after_chunk()
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
