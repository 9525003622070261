"""An agent that answers every message word by word, and changes course when steered.

Start a relay first (``runwire relay``), then run ``python examples/hello_agent.py``.
"""

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import agent_side
from agent_side import AbortSignal
from transport.messages import UIMessage

URL = os.environ.get("RUNWIRE_URL", "ws://127.0.0.1:8787")

agent = agent_side.Agent(URL, name="default")


async def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    """A stand-in for a real model: it answers the last user message, one word at a time."""
    question = next(m for m in reversed(messages) if m.role == "user").text()
    answer = f"You said: {question} Here is my answer, one word at a time, so you can steer me."
    for word in answer.split():
        if signal.aborted:  # a steer or a cancel stops this call
            return
        yield word + " "
        await asyncio.sleep(0.1)


@agent.on_run
async def handle(run: agent_side.Run) -> None:
    await agent_side.steering_loop(run, model)  # start, answer, re-answer on a steer, end


if __name__ == "__main__":
    print(f"hello_agent: serving on {URL}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops it quietly
        asyncio.run(agent.serve())
