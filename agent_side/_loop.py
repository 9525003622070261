"""``steering_loop``: the seed's agent loop with ``on_steer``, ready made.

Each model call gets its own ``AbortController``, which a steering message aborts; the Run keeps
running. The model gets a signal that fires on either that controller or the Run's ``abort_signal``.
``pipe()`` stops reading and closes the model's stream on either, even when the model ignores its
signal. After a steering abort, ``pipe()`` reports ``complete``. The loop tells that apart from a
real cancel, and calls the model again with the steering message last in the conversation.

The model reads ``run.history()``: what the Run took in, with interrupted replies marked and
unanswered tool calls repaired. With ``tools``, the loop runs the tool calls a reply asks for,
through ``run.run_tools``, and calls the model again with their results. A cancel answers the
calls not started with ``ABORTED_BEFORE_DISPATCH``. A steering message that cut a reply short
does the same for that reply's calls, also when the model's stream raised as it was aborted.

A reply is whole when its stream ended before steering aborted its call, even if the steering
lands while ``pipe()`` closes it. Steering that arrives while the tools of a whole reply run stops
none of them; only a cancel does. Their results are written, and the next model call reads them
with the steering after them. Follow-ups start new turns after the current answer. Each turn
has ``max_iterations`` model calls, and at the limit the Run stops as ``on_iteration_limit``
says.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable, Iterable

from transport.asyncio._abort import AbortController, AbortSignal
from transport.messages import UIMessage

from ._options import IterationLimit
from ._pipe import Chunk, PipeResult, close_source
from ._run import Run
from ._tools import Tool, tool_calls

__all__ = ["Model", "steering_loop"]

log = logging.getLogger("runwire.agent")

Model = Callable[[list[UIMessage], AbortSignal], AsyncIterable[str | Chunk]]
"""``model(messages, signal)``: a model call that stops when ``signal`` fires."""

STEERED = "steered"
"""The abort reason of a model call interrupted by steering."""


async def steering_loop(
    run: Run,
    model: Model,
    *,
    max_iterations: int | None = None,
    on_iteration_limit: IterationLimit | None = None,
    tools: Iterable[Tool] | None = None,
    parallel_tools: bool | None = None,
    max_parallel_tools: int | None = None,
    tool_timeout: float | None = None,
) -> PipeResult | None:
    """Run ``model`` until the Run has nothing still to answer, then end the Run.

    Starts the Run if needed. ``max_iterations`` / ``on_iteration_limit``
    override the Run's (model calls per turn; ``"stop"`` ends ``complete``,
    ``"error"`` ends ``error`` with ``ITERATION_LIMIT_REACHED``). The Run ends
    ``cancelled`` on an accepted cancel, ``error`` (with the exception's text)
    if the model raises (not when it raises because steering or a cancel
    aborted its call), ``complete`` otherwise. Any ``on_steer`` already set
    is still called. ``parallel_tools``, ``max_parallel_tools`` and
    ``tool_timeout`` say how tool steps run (``None``: one after another, no
    limit); a step a resumed Run paused in runs as its checkpoint kept, unless
    they set it. Returns the last ``PipeResult`` (``None`` if the model
    was never called).
    """
    if max_iterations is not None:
        run.max_iterations = max_iterations
    if on_iteration_limit is not None:
        run.on_iteration_limit = on_iteration_limit
    toolbox = list(tools) if tools is not None else None
    step = AbortController()
    chained = run.on_steer

    def on_steer() -> object:
        step.abort(STEERED)  # only this model call, never the Run
        return chained() if chained is not None else None  # the Run awaits an async one

    run.on_steer = on_steer
    result: PipeResult | None = None
    try:
        if not run.started:
            await run.start()
        if toolbox is not None:
            # A resumed Run finishes the step it paused in; an adopted one runs the calls
            # its last model step asked for if no worker started them.
            await run.resume_tools(
                toolbox,
                parallel=parallel_tools,
                max_parallel=max_parallel_tools,
                timeout=tool_timeout,
            )
        while not run.abort_signal.aborted and run.has_input():
            step = AbortController()
            messages = run.history()
            signal = AbortSignal.any(run.abort_signal, step.signal)
            try:
                stream = _Watched(model(messages, signal), step.signal)
            except Exception as exc:
                result = PipeResult("error", None, exc)
                break
            result = await run.pipe(stream, signal=step.signal)
            steer_interrupted = (
                (result.reason == "complete" or stream.raised_on_abort)
                and step.signal.aborted
                and not stream.whole
                and not run.abort_signal.aborted
            )
            calls = tool_calls(result.message) if toolbox is not None else []
            if calls and result.reason != "error":
                assert toolbox is not None
                await run.run_tools(
                    calls,
                    toolbox,
                    parallel=bool(parallel_tools),
                    max_parallel=max_parallel_tools,
                    timeout=tool_timeout,
                    signal=_tool_signal(run, signal, steer_interrupted),
                )
            if steer_interrupted:
                continue  # has_input() now takes in the steering that interrupted
            if result.reason != "complete":
                break
    finally:
        run.on_steer = chained
    if run.iteration_limit_reached:
        log.info(
            "run %s: stopped at %s model calls in turn %d", run.run_id, run.iterations, run.turn
        )
    if run.ended:
        return result
    if result is not None and result.reason == "error":
        await run.end("error", error=result.error)
    elif run.abort_signal.aborted:
        await run.end("cancelled")
    else:
        await run.end("complete")
    return result


class _Watched:
    """A model call's stream that notes whether it ended before steering aborted the call.

    Steering that lands after the stream ended (while ``pipe()`` closes the
    response) interrupted nothing: the response is whole and its tool calls
    run. A stream that raises once steering aborted its call stopped the way
    many model clients stop (the seed swallows that rejection): the loop
    re-infers, it does not end the Run ``error``. The iterator is taken at
    once, so a model that returns no async iterable fails where it is called.
    """

    def __init__(self, stream: AsyncIterable[str | Chunk], step: AbortSignal) -> None:
        self._stream = stream
        self._iterator = aiter(stream)
        self._step = step
        self.whole = False
        """True once the stream ended with the call's steering signal not fired."""
        self.raised_on_abort = False
        """True when the stream raised after steering aborted the call (its way to stop)."""

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> str | Chunk:
        try:
            return await anext(self._iterator)
        except StopAsyncIteration:
            self.whole = not self._step.aborted
            raise
        except Exception:
            self.raised_on_abort = self._step.aborted
            raise

    async def aclose(self) -> None:
        """Close the model's stream (``pipe()`` does when it stops reading)."""
        await close_source(self._stream, self._iterator)


def _tool_signal(run: Run, call_signal: AbortSignal, steer_interrupted: bool) -> AbortSignal:
    """What stops the tool step of a response.

    The calls of a response steering cut off are dropped with it (the model
    call's signal has fired: they are answered ``ABORTED_BEFORE_DISPATCH``).
    Those of a whole response stop only on a cancel: steering arriving while
    they run joins the next call, beside their results, and must not leave a
    half-done tool without a result.
    """
    return call_signal if steer_interrupted else run.abort_signal
