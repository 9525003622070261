"""The app ``runwire worker worker_app:make`` runs in tests/runwire/test_worker.py.

``make(**options)`` builds an Agent whose handler answers by the prompt's text:
``wait PATH`` streams ``working``, then finishes once the file PATH exists;
``stall`` streams ``working`` and never finishes; anything else is echoed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import anyio

from agent_side import Agent, Run

built = Agent("ws://127.0.0.1:9", name="prebuilt")
"""An Agent built at import time (the worker runs it as it is)."""

not_an_agent = 42


def make(**options: Any) -> Agent:
    """A worker; ``options`` come from runwire worker's flags, environment and file."""
    agent = Agent(**options)

    @agent.on_run
    async def handle(run: Run) -> None:
        text = run.messages[-1].text()
        if text.startswith("wait "):
            gate = anyio.Path(text.removeprefix("wait "))
            await run.pipe(words("working"))
            while not await gate.exists():  # the test creates the file once the worker was told
                await anyio.sleep(0.02)
            await run.pipe(words(f"done by {os.getpid()}"))
        elif text == "stall":
            await run.pipe(words("working"))
            await anyio.sleep_forever()
        else:
            await run.pipe(words(f"echo {text}"))

    return agent


async def words(text: str) -> AsyncIterator[str]:
    yield text
