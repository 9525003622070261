"""A steering-aware agent worker: the agent loop of steering_loop, written out by hand.

Run a relay, then this worker, then talk to it from a client::

    runwire relay --store memory://
    python examples/steering_agent.py --url ws://127.0.0.1:8787

The "model" is scripted: it streams a trip plan word by word for the last
thing the user said (``"Plan a 3-day trip"`` gets three days, a steering
message ``"Make it 5 days"`` gets five). Each model call has its own
``AbortController``; ``on_steer`` aborts only that call, never the Run, so a
steering message cuts the current answer short and the loop answers again
with the steering message last in the conversation. A real cancel fires
``run.abort_signal`` and ends the Run ``cancelled``.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio

import agent_side
from agent_side import AbortController, AbortSignal, PipeResult, Run
from transport.errors import RunwireError
from transport.messages import UIMessage

log = logging.getLogger("steering_agent")

SIGHTS = ["the castle", "Alfama", "Belém", "the river front", "Sintra", "LX Factory", "a fado bar"]


def script(request: str) -> str:
    """The scripted answer to ``request``: a day-by-day plan, as many days as it asks."""
    found = re.search(r"(\d+)\s*-?\s*days?", request)
    days = int(found.group(1)) if found else 3
    plan = " ".join(f"Day {d}: {SIGHTS[(d - 1) % len(SIGHTS)]}." for d in range(1, days + 1))
    budget = re.search(r"£\s?\d+", request)
    extra = f" Kept under {budget.group(0)}." if budget else ""
    return f"Here is a {days}-day plan. {plan}{extra}"


async def fake_model(
    messages: list[UIMessage], signal: AbortSignal, *, delay: float = 0.05
) -> AsyncIterator[str]:
    """Stream the scripted answer to the last user message, stopping when ``signal`` fires."""
    last_user = next((m for m in reversed(messages) if m.role == "user"), None)
    words = script(last_user.text() if last_user else "").split(" ")
    for i, word in enumerate(words):
        if signal.aborted:
            return
        yield word if i == 0 else " " + word
        with anyio.move_on_after(delay):  # pace like a model; wake at once on abort
            await signal.wait()


def make_handler(delay: float = 0.05) -> Callable[[Run], Awaitable[None]]:
    """The ``on_run`` handler: the seed's loop with ``on_steer`` and the steer-interrupt test."""

    async def handle(run: Run) -> None:
        step = AbortController()

        def on_steer() -> None:
            # Abort only the current model call, never run.abort_signal, so a
            # steering message stops the response without cancelling the Run.
            step.abort("steered")

        run.on_steer = on_steer

        # run.messages is only this Run's turn; the model gets the whole view.
        while run.view.has_older():
            await run.view.load_older()
        await run.start()

        result: PipeResult | None = None
        while run.has_input():
            step = AbortController()
            conversation = [vm.message for vm in run.view.messages()]
            # Abort on a genuine cancel (run.abort_signal) OR a steering message (step).
            signal = AbortSignal.any(run.abort_signal, step.signal)
            result = await run.pipe(fake_model(conversation, signal, delay=delay))

            # pipe() races only run.abort_signal: a steering abort ends the stream
            # cleanly ("complete"), a real cancel ends it "cancelled".
            steer_interrupted = (
                result.reason == "complete" and step.signal.aborted and not run.abort_signal.aborted
            )
            if steer_interrupted:
                log.info("run %s: steered, answering again", run.run_id)
                continue  # has_input() is true: the steering message is in the view
            if result.reason != "complete":
                break

        if result is not None and result.reason == "error":
            await run.end("error", error=result.error)
        elif run.abort_signal.aborted:
            await run.end("cancelled")
        else:
            await run.end("complete")

    return handle


def build_agent(
    url: str, *, name: str = "default", token: str | None = None, delay: float = 0.05
) -> agent_side.Agent:
    """A worker of ``name`` that answers with the scripted model."""
    agent = agent_side.Agent(url, token=token, name=name)
    agent.on_run(make_handler(delay))
    return agent


async def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8787", help="the relay's ws:// URL")
    parser.add_argument("--name", default="default", help="the agent name to serve")
    parser.add_argument("--token", default=None, help="a JWT with the agent capability")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between words")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    agent = build_agent(args.url, name=args.name, token=args.token, delay=args.delay)
    log.info("serving agent %r at %s", args.name, args.url)
    await agent.serve()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    except RunwireError as exc:
        raise SystemExit(f"steering_agent: {exc}") from None
