"""``Agent(...)``, ``client_side.connect(...)`` and ``agent_side.connect(...)`` need no event loop.

A program makes them at module level, then serves or enters them inside
``asyncio.run``: they start their work there, not when made.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import anyio

import agent_side
import client_side
import relay


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_public_objects_are_made_before_any_event_loop_runs() -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    # No event loop runs here: these only record what to do.
    agent = agent_side.Agent(url, name="default")
    client = client_side.connect(url, "made-outside")
    explicit = agent_side.connect(url, "made-outside-explicit")

    @agent.on_run
    async def handle(run: agent_side.Run) -> None:
        await run.start()
        await run.pipe(iter_words("made", "before", "the", "loop"))
        await run.end()

    results: list[str] = []

    async def main() -> None:
        async with relay.serve(host="127.0.0.1", port=port, store="memory://"):
            async with agent, client as session:
                run = await session.send("hello")
                with anyio.fail_after(30):
                    result = await run.result()
                results.append(result.status)
                results.append(session.view.messages()[-1].message.text())
            async with explicit as agent_session:
                results.append(agent_session.session_id)

    anyio.run(main)
    assert results == ["complete", "made before the loop", "made-outside-explicit"]


async def iter_words(*words: str) -> AsyncIterator[str]:
    for i, word in enumerate(words):
        yield word if i == 0 else " " + word
