"""Publishing a model's output stream: normalise, coalesce, fold, publish.

``run.pipe(stream)`` reads text deltas or UI message stream parts.
``Normalizer`` turns each item into stream chunks, ``MessageBuilder`` folds
them into the response message by the rules of ``transport._tree``, and
``Coalescer`` merges the deltas waiting to be published. So when the relay
is slower than the model, many tokens ride one ``response_append``.

``pipe_stream`` drives them: it publishes ``response_open``, the appends with
at most ``max_in_flight`` unacknowledged, then ``response_close``. When the
Run's abort signal fires it stops reading, closes the source, and reports
``cancelled``. A stream that raises, or yields an ``error`` chunk, reports
``error``. docs/explanation/agent-runs.md tells the details.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.lowlevel

from transport import _codec as codec
from transport._chunks import fold_part
from transport.asyncio._abort import AbortSignal
from transport.errors import RunwireError
from transport.frames import EntryBody, ResponseAppend, ResponseClose, ResponseOpen
from transport.messages import (
    Part,
    ReasoningPart,
    TextPart,
    UIMessage,
)

__all__ = [
    "Chunk",
    "Coalescer",
    "MessageBuilder",
    "ModelStreamError",
    "Normalizer",
    "PipeReason",
    "PipeResult",
    "close_budget",
    "close_entry",
    "close_source",
    "pipe_stream",
]

log = logging.getLogger("runwire.agent")

Chunk = dict[str, Any]
PipeReason = Literal["complete", "cancelled", "error"]

_MERGEABLE = {
    "text-delta": "delta",
    "reasoning-delta": "delta",
    "tool-input-delta": "inputTextDelta",
}
_CLOSE_TIMEOUT = 5.0
_PUBLISH_OVERHEAD = 512
"""Bytes of a ``publish`` frame around its entry (type, req, a session id of 200), rounded up."""


@dataclass(frozen=True)
class PipeResult:
    """How a ``pipe()`` ended.

    ``reason``: ``complete`` (the stream ended, including when a steering abort
    ended it), ``cancelled`` (the Run's abort signal fired) or ``error`` (the
    stream raised, ``error`` says what; or a publish failed). ``message_id``
    is the response's id (``None`` if nothing was published); ``message`` the
    response as published (as streamed, when ``closed`` is false: a cancelled
    reply left open for the agent's code).
    """

    reason: PipeReason
    message_id: str | None
    error: BaseException | None = None
    message: UIMessage | None = field(default=None, compare=False)
    closed: bool = field(default=True, compare=False)


class ModelStreamError(Exception):
    """The model's stream said it failed: an ``error`` chunk, whose ``errorText`` this carries."""


# ------------------------------------------------------------ normalising --


class Normalizer:
    """Turns stream items into chunks; plain strings become one text part."""

    def __init__(self, id_prefix: str = "text") -> None:
        self._prefix = id_prefix
        self._count = 0
        self._open: str | None = None

    def feed(self, item: object) -> list[Chunk]:
        """The chunks for one stream item.

        An object with a ``model_dump`` (a pydantic chunk) counts as the
        camelCase dict it dumps to. Raises ``TypeError`` for an item that is
        neither a ``str`` nor a dict with a string ``type``.
        """
        dump = getattr(item, "model_dump", None)
        if callable(dump) and not isinstance(item, str | dict):
            item = dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(item, str):
            if not item:
                return []
            out: list[Chunk] = []
            if self._open is None:
                self._count += 1
                self._open = f"{self._prefix}-{self._count}"
                out.append({"type": "text-start", "id": self._open})
            out.append({"type": "text-delta", "id": self._open, "delta": item})
            return out
        if isinstance(item, dict) and isinstance(item.get("type"), str):
            return [*self.finish(), dict(item)]
        raise TypeError(
            f"a stream item must be a str or a dict with a 'type', not {type(item).__name__}"
        )

    def finish(self) -> list[Chunk]:
        """Chunks that end an implicit text part, if one is open."""
        if self._open is None:
            return []
        chunk: Chunk = {"type": "text-end", "id": self._open}
        self._open = None
        return [chunk]


# ------------------------------------------------------------- coalescing --


class _Slot:
    __slots__ = ("base", "chars", "key", "pieces")

    def __init__(self, chunk: Chunk) -> None:
        kind = chunk.get("type")
        kind = kind if isinstance(kind, str) else ""
        field_name = _MERGEABLE.get(kind)
        piece = chunk.get(field_name) if field_name else None
        self.key: tuple[str, object, str] | None
        if field_name is not None and isinstance(piece, str):
            part_id = chunk.get("toolCallId") if kind == "tool-input-delta" else chunk.get("id")
            self.key = (kind, part_id, field_name)
            self.pieces = [piece]
            self.chars = len(piece)
        else:
            self.key = None
            self.pieces = []
            self.chars = 0
        self.base = chunk

    def chunk(self) -> Chunk:
        if self.key is None:
            return self.base
        return {**self.base, self.key[2]: "".join(self.pieces)}


class Coalescer:
    """Chunks waiting to be published; consecutive deltas of one part merge.

    ``max_chunk_chars`` caps a delta, so one chunk never outgrows a frame: a
    merge stops there, and a longer delta is split into deltas of the same
    part that fold into the same text.
    """

    def __init__(self, *, max_chunk_chars: int = 64 * 1024) -> None:
        if max_chunk_chars < 1:
            raise ValueError("max_chunk_chars must be at least 1")
        self.max_chunk_chars = max_chunk_chars
        self._slots: list[_Slot] = []
        self.chunks_in = 0
        self.chunks_out = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __bool__(self) -> bool:
        return bool(self._slots)

    def add(self, chunk: Chunk) -> None:
        """Queue a chunk, merging it into the last one when both are deltas of one part.

        A delta longer than ``max_chunk_chars`` is queued as several.
        """
        self.chunks_in += 1
        slot = _Slot(chunk)
        if slot.key is not None and slot.chars > self.max_chunk_chars:
            self._add_split(slot)
            return
        self._add_slot(slot)

    def _add_split(self, slot: _Slot) -> None:
        """Queue an over-long delta as deltas of at most ``max_chunk_chars`` each."""
        assert slot.key is not None
        text, step, field_name = slot.pieces[0], self.max_chunk_chars, slot.key[2]
        for start in range(0, len(text), step):
            self._add_slot(_Slot({**slot.base, field_name: text[start : start + step]}))

    def _add_slot(self, slot: _Slot) -> None:
        if slot.key is not None and self._slots:
            last = self._slots[-1]
            if last.key == slot.key and last.chars + slot.chars <= self.max_chunk_chars:
                last.pieces.extend(slot.pieces)
                last.chars += slot.chars
                return
        self._slots.append(slot)

    def take(self, max_bytes: int | None = None) -> list[Chunk]:
        """Remove and return the queued chunks, oldest first, within ``max_bytes`` of JSON.

        The first chunk is always taken, whatever its size.
        """
        out: list[Chunk] = []
        size = 0
        while self._slots:
            chunk = self._slots[0].chunk()
            if max_bytes is not None:
                n = len(codec.dumps(chunk)) + 1
                if out and size + n > max_bytes:
                    break
                size += n
            self._slots.pop(0)
            out.append(chunk)
        self.chunks_out += len(out)
        return out


# ---------------------------------------------------------------- folding --


class _Streamed:
    """A text or reasoning part being streamed: its deltas, joined only when asked."""

    __slots__ = ("kind", "pieces")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.pieces: list[str] = []

    def part(self) -> TextPart | ReasoningPart:
        text = "".join(self.pieces)
        if len(self.pieces) > 1:
            self.pieces = [text]
        return TextPart(text=text) if self.kind == "text" else ReasoningPart(text=text)


class MessageBuilder:
    """Folds stream chunks into an assistant ``UIMessage`` (``transport._chunks``'s rules).

    Text and reasoning are folded here; every other chunk by ``fold_part``.

    A delta costs the same however long its part already is: text is kept as
    the list of its deltas and joined when ``message()`` is asked for.
    """

    def __init__(self, message_id: str, *, metadata: dict[str, Any] | None = None) -> None:
        self.message_id = message_id
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._parts: list[Part | _Streamed] = []
        self._by_id: dict[tuple[str, str], _Streamed] = {}

    @property
    def parts(self) -> list[Part]:
        """The parts as folded so far (copies)."""
        return [p.part() if isinstance(p, _Streamed) else p.model_copy() for p in self._parts]

    def apply(self, chunk: Chunk) -> None:
        """Fold one chunk; malformed or unknown chunks change nothing."""
        kind = chunk.get("type")
        if kind == "text-delta":
            self._delta("text", chunk)
        elif kind == "reasoning-delta":
            self._delta("reasoning", chunk)
        elif kind in ("text-start", "reasoning-start"):
            part_id = chunk.get("id")
            if part_id is None or isinstance(part_id, str):
                self._new_part(kind.split("-")[0], part_id)
        elif kind in ("start", "finish", "message-metadata"):
            meta = chunk.get("messageMetadata")
            if isinstance(meta, dict):
                self.metadata.update(meta)
        else:
            fold_part(self._parts, chunk)

    def message(self) -> UIMessage:
        """The message as folded so far (a copy)."""
        return UIMessage(
            id=self.message_id,
            role="assistant",
            parts=self.parts,
            metadata=dict(self.metadata),
        )

    def _new_part(self, kind: str, part_id: str | None) -> _Streamed:
        part = _Streamed(kind)
        self._parts.append(part)
        if part_id is not None:
            self._by_id[(kind, part_id)] = part
        return part

    def _delta(self, kind: str, chunk: Chunk) -> None:
        delta, part_id = chunk.get("delta"), chunk.get("id")
        if not isinstance(delta, str) or (part_id is not None and not isinstance(part_id, str)):
            return
        if part_id is not None:
            known = self._by_id.get((kind, part_id))
            part = known if known is not None else self._new_part(kind, part_id)
        else:
            last = self._parts[-1] if self._parts else None
            if isinstance(last, _Streamed) and last.kind == kind:
                part = last
            else:
                part = self._new_part(kind, None)
        part.pieces.append(delta)


# ---------------------------------------------------------------- driving --

Publish = Callable[[EntryBody], Awaitable[object]]


def close_budget(max_frame_bytes: int) -> int:
    """The bytes a ``response_close`` entry may take to fit a frame of ``max_frame_bytes``."""
    return max_frame_bytes - _PUBLISH_OVERHEAD


def close_entry(
    *, entry_id: str, run_id: str, message: UIMessage, max_bytes: int | None
) -> ResponseClose:
    """The ``response_close`` of ``message``, a response whose appends built its parts.

    It carries the whole message when its JSON fits ``max_bytes`` (or there is
    no limit): every reader, old ones too, takes it as it stands. A bigger one
    would be refused ``PAYLOAD_TOO_LARGE``: the close then carries only the
    message's metadata, and readers keep the parts the appends built (the same
    parts, folded by the same rules). Never use it for a close that replaces
    the content with other parts.
    """
    full = ResponseClose(id=entry_id, run_id=run_id, message_id=message.id, message=message)
    if max_bytes is None or len(codec.encode_entry(full)) <= max_bytes:
        return full
    return ResponseClose(
        id=entry_id, run_id=run_id, message_id=message.id, metadata=dict(message.metadata)
    )


async def pipe_stream(
    stream: AsyncIterable[str | Chunk],
    *,
    run_id: str,
    message_id: str,
    seen: list[str],
    abort_signal: AbortSignal,
    publish: Publish,
    entry_id: Callable[[], str],
    max_in_flight: int = 1,
    rollup_window: float = 0.0,
    max_batch_bytes: int = 512 * 1024,
    max_close_bytes: int | None = None,
    save_interrupted: bool = True,
    stop_signal: AbortSignal | None = None,
) -> PipeResult:
    """Publish ``stream`` as one response of ``run_id`` (see the module docstring).

    ``publish`` sends an entry and returns once the relay acknowledged it;
    ``entry_id()`` returns a fresh entry id. ``max_batch_bytes`` bounds the
    chunks of one append, ``max_close_bytes`` a close carrying the whole
    message (``close_entry``; ``None``: always carry it). ``stop_signal`` also
    stops the read, as if the stream had ended there. ``rollup_window`` (seconds)
    holds a batch until its oldest chunk has waited that long (or the stream ends or is
    aborted), so a slow stream still puts several tokens on one append. Never raises
    for the stream's or the relay's errors: they come back as ``PipeResult(reason="error")``.
    """
    if max_in_flight < 1:
        raise ValueError("max_in_flight must be at least 1")
    if not 0 <= rollup_window <= 10:
        raise ValueError(f"rollup_window must be 0 to 10 seconds, not {rollup_window}")
    iterator = aiter(stream)
    if abort_signal.aborted:
        await anyio.lowlevel.checkpoint()  # never return without yielding once
        await close_source(stream, iterator)
        return PipeResult("cancelled", None)
    stop = stop_signal if stop_signal is not None else AbortSignal()

    loop = asyncio.get_running_loop()
    normalizer = Normalizer()
    builder = MessageBuilder(message_id)
    queue = Coalescer(max_chunk_chars=max(1, max_batch_bytes // 8))
    state = _PumpState()
    reason: PipeReason = "complete"
    error: BaseException | None = None

    def push(chunks: list[Chunk]) -> None:
        if chunks and not queue:
            state.since = loop.time()
        for chunk in chunks:
            builder.apply(chunk)
            queue.add(chunk)
        if chunks:
            state.wake()

    async def send(entry: EntryBody, slots: anyio.Semaphore | None = None) -> None:
        try:
            await publish(entry)
        except RunwireError as exc:
            state.fail(exc)
        finally:
            if slots is not None:
                slots.release()

    async def queued() -> bool:
        """Wait for chunks to publish; False once none will come (or a publish failed)."""
        while state.error is None:
            if queue:
                if rollup_window and not state.reading_done:
                    wait = state.since + rollup_window - loop.time()
                    if wait > 0:  # hold the batch: more tokens join it meanwhile
                        with anyio.move_on_after(wait):
                            await state.wait_done()
                        continue
                return True
            if state.reading_done:
                return False
            await state.wait()
        return False

    def next_append() -> ResponseAppend:
        batch = queue.take(max_batch_bytes)
        return ResponseAppend(id=entry_id(), run_id=run_id, message_id=message_id, chunks=batch)

    async def pump() -> None:
        try:
            await publish(
                ResponseOpen(id=entry_id(), run_id=run_id, message_id=message_id, seen=seen)
            )
        except RunwireError as exc:
            state.fail(exc)
            return
        if max_in_flight == 1:  # the common case: no semaphore, no task per append
            while await queued():
                await send(next_append())
            return
        slots = anyio.Semaphore(max_in_flight)
        async with anyio.create_task_group() as sends:
            while await queued():
                # While this waits for a free slot, new chunks merge into the queue.
                await slots.acquire()
                if not queue or state.error is not None:
                    slots.release()
                    continue
                sends.start_soon(send, next_append(), slots)

    async with anyio.create_task_group() as tg:
        state.cancel_reading = tg.cancel_scope.cancel
        tg.start_soon(pump)
        try:
            async with abort_signal.scope(), stop.scope():
                async for item in iterator:
                    chunks = normalizer.feed(item)
                    push(chunks)
                    failed = _stream_error(chunks)
                    if failed is not None:
                        reason, error = "error", failed
                        break
        except Exception as exc:
            if abort_signal.aborted or stop.aborted:  # it failed because it was aborted
                log.debug("response %s: the stream raised on the abort: %r", message_id, exc)
            else:
                reason, error = "error", exc
        finally:
            with anyio.CancelScope(shield=True):
                await close_source(stream, iterator)
        if reason != "error" and abort_signal.aborted:
            reason = "cancelled"
        push(normalizer.finish())
        state.reading_done = True
        state.wake()

    if state.error is not None:
        return PipeResult("error", message_id, state.error, builder.message())
    if reason == "cancelled":
        builder.metadata["interrupted"] = True
        if not save_interrupted:
            return PipeResult(reason, message_id, error, builder.message(), closed=False)
    message = builder.message()
    try:
        await publish(
            close_entry(
                entry_id=entry_id(), run_id=run_id, message=message, max_bytes=max_close_bytes
            )
        )
    except RunwireError as exc:
        return PipeResult("error", message_id, error or exc, message)
    log.debug("response %s: %d chunks in %d out", message_id, queue.chunks_in, queue.chunks_out)
    return PipeResult(reason, message_id, error, message)


class _PumpState:
    """Shared between the reader and the publisher of one pipe."""

    def __init__(self) -> None:
        self.reading_done = False
        self.since = 0.0  # when the oldest queued chunk was queued (loop time)
        self.error: RunwireError | None = None
        self.cancel_reading: Callable[[], None] = lambda: None
        self._event = asyncio.Event()  # the SDK runs on asyncio; anyio's Event costs more

    def wake(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event.clear()

    async def wait_done(self) -> None:
        """Until reading ends or a publish fails (a rollup's hold ends early then)."""
        while not self.reading_done and self.error is None:
            await self.wait()

    def fail(self, exc: RunwireError) -> None:
        if self.error is None:
            self.error = exc
            self.cancel_reading()


def _stream_error(chunks: list[Chunk]) -> ModelStreamError | None:
    """The failure an ``error`` chunk among ``chunks`` reports, if there is one."""
    for chunk in chunks:
        if chunk.get("type") == "error":
            text = chunk.get("errorText")
            return ModelStreamError(text if isinstance(text, str) and text else "model error")
    return None


async def close_source(*sources: object) -> None:
    """Close each of ``sources`` that can be: its ``aclose()``, else its ``close()``.

    A source given twice (a stream that is its own iterator) is closed once.
    Errors are ignored and each close gets ``_CLOSE_TIMEOUT`` seconds.
    """
    done: set[int] = set()
    for source in sources:
        if id(source) in done:
            continue
        done.add(id(source))
        closer = getattr(source, "aclose", None) or getattr(source, "close", None)
        if not callable(closer):
            continue
        with anyio.move_on_after(_CLOSE_TIMEOUT), contextlib.suppress(Exception):
            outcome = closer()
            if inspect.isawaitable(outcome):
                await outcome
