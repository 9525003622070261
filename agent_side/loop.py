"""``steering_loop``: the seed's agent loop with ``on_steer``, ready made.

Per iteration the loop gives the model call its own ``AbortController``,
which a steering message aborts (never the Run), and passes the model a
signal that fires on either that or the Run's ``abort_signal``. ``pipe()``
races only the Run's signal, so a steering abort ends the model's stream and
``pipe()`` reports ``complete``; the loop tells that apart from a real cancel
and re-infers with the steering message last in the conversation.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable

from transport.asyncio.abort import AbortController, AbortSignal
from transport.messages import UIMessage

from .pipe import Chunk, PipeResult
from .run import Run

__all__ = ["Model", "steering_loop"]

log = logging.getLogger("runwire.agent")

Model = Callable[[list[UIMessage], AbortSignal], AsyncIterable[str | Chunk]]
"""``model(messages, signal)``: a model call that stops when ``signal`` fires."""

STEERED = "steered"
"""The abort reason of a model call interrupted by steering."""


async def steering_loop(
    run: Run, model: Model, *, max_iterations: int | None = None
) -> PipeResult | None:
    """Run ``model`` until the Run has no unanswered input, then end the Run.

    Starts the Run if needed. The Run ends ``cancelled`` on an accepted
    cancel, ``error`` (with the exception's text) if the model raises,
    ``complete`` otherwise (also when ``max_iterations`` model calls were
    made). Any ``on_steer`` already set is still called. Returns the last
    ``PipeResult`` (``None`` if the model was never called).
    """
    step = AbortController()
    chained = run.on_steer

    def on_steer() -> None:
        step.abort(STEERED)  # only this model call, never the Run
        if chained is not None:
            chained()

    run.on_steer = on_steer
    result: PipeResult | None = None
    try:
        if not run.started:
            await run.start()
        iterations = 0
        while not run.abort_signal.aborted and run.has_input():
            if max_iterations is not None and iterations >= max_iterations:
                log.info("run %s: stopping after %d model calls", run.run_id, iterations)
                break
            iterations += 1
            step = AbortController()
            messages = [vm.message for vm in run.view.messages()]
            signal = AbortSignal.any(run.abort_signal, step.signal)
            try:
                stream = model(messages, signal)
            except Exception as exc:
                result = PipeResult("error", None, exc)
                break
            result = await run.pipe(stream)
            steer_interrupted = (
                result.reason == "complete" and step.signal.aborted and not run.abort_signal.aborted
            )
            if steer_interrupted:
                continue  # has_input() now drains the steering that interrupted
            if result.reason != "complete":
                break
    finally:
        run.on_steer = chained
    if result is not None and result.reason == "error":
        await run.end("error", error=result.error)
    elif run.abort_signal.aborted:
        await run.end("cancelled")
    else:
        await run.end("complete")
    return result
