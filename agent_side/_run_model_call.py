"""One model call of a Run, published as one response step (internal to ``agent_side``).

``model_call`` takes in what ``has_input()`` queued as the step's ``seen``,
numbers the step, and streams the model's output through ``pipe_stream``. A
call that published nothing gives its input back, so the next call sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable

from transport import _tracing as tracing
from transport.asyncio._abort import AbortSignal
from transport.frames import EntryBody

from ._pipe import Chunk, PipeResult, close_budget, pipe_stream
from ._steps import RunSteps

__all__ = ["model_call"]


async def model_call(
    steps: RunSteps,
    stream: AsyncIterable[str | Chunk],
    *,
    abort_signal: AbortSignal,
    publish: Callable[[EntryBody], Awaitable[None]],
    max_in_flight: int,
    rollup_window: float,
    save_interrupted: bool,
    stop_signal: AbortSignal | None,
) -> PipeResult:
    """Publish one model call's output as the Run's next step; its ``PipeResult``."""
    inputs = steps.inputs
    seen, was_answered = inputs.take_seen()
    step_before = steps.step
    message_id = steps.next_step()
    frame_bytes = steps.frame_bytes()
    with tracing.span("runwire.model_call", attributes={"runwire.run_id": steps.run_id}):
        result = await pipe_stream(
            stream,
            run_id=steps.run_id,
            message_id=message_id,
            seen=seen,
            abort_signal=abort_signal,
            publish=publish,
            entry_id=steps.entry_id,
            max_in_flight=max_in_flight,
            rollup_window=rollup_window,
            max_batch_bytes=max(256, frame_bytes // 2),
            max_close_bytes=close_budget(frame_bytes),
            save_interrupted=save_interrupted,
            stop_signal=stop_signal,
        )
    if result.message_id is None:  # nothing was published: nothing was taken in
        inputs.untake(seen, was_answered)
        steps.step = step_before
        return result
    steps.retry_id = None
    if not result.closed and result.message is not None:
        steps.open_replies[message_id] = result.message
    elif result.reason != "error":
        await steps.checkpoint()
    return result
