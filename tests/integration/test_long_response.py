"""A response longer than the relay's ``max_frame_bytes`` streams, closes and reads whole.

Every append fits a frame, but a ``response_close`` carrying the whole message
would not: the agent SDK closes such a response without its message, and every
reader (the client's view, the agent's own view, the HTTP history) freezes
what the appends built.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator

import anyio
import pytest

import client_side
import relay
from agent_side import Agent, Run
from transport._tree import ConversationTree

pytestmark = pytest.mark.anyio

LIMIT = 16 * 1024
TEXT = "".join(f"line {i}: the report goes on, é ✓ \u0001\n" for i in range(2000))


async def long_answer() -> AsyncIterator[str]:
    """The text, a few words per delta, several times ``LIMIT`` in all."""
    for start in range(0, len(TEXT), 40):
        yield TEXT[start : start + 40]


def _http_history(http_url: str, session_id: str) -> list[dict[str, object]]:
    """Every entry of the session through the HTTP API (one page is enough here)."""
    url = f"{http_url}/v1/sessions/{session_id}/history?limit=1000"
    with urllib.request.urlopen(url, timeout=10) as response:
        entries: list[dict[str, object]] = json.load(response)["entries"]
    return entries


async def test_a_response_longer_than_a_frame_closes_whole() -> None:
    assert len(TEXT.encode()) > 4 * LIMIT
    seen_by_agent: dict[str, str] = {}
    async with relay.serve(port=0, store="memory://", max_frame_bytes=LIMIT) as server:
        agent = Agent(server.url)

        @agent.on_run
        async def handle(run: Run) -> None:
            result = await run.pipe(long_answer())
            assert result.message is not None
            seen_by_agent["result"] = result.message.text()
            seen_by_agent["reason"] = result.reason
            seen_by_agent["view"] = run.view.messages()[-1].message.text()
            await run.end(result.reason)

        async with agent, client_side.connect(server.url, "long-answer") as session:
            run = await session.send("Write the whole report.")
            with anyio.fail_after(30):
                result = await run.result()
            answer = [vm for vm in session.view.messages() if vm.message.role == "assistant"]
            assert result.status == "complete", session.view.runs()
            assert seen_by_agent == {"result": TEXT, "reason": "complete", "view": TEXT}
            assert len(answer) == 1 and answer[0].message.text() == TEXT
            entries = await anyio.to_thread.run_sync(_http_history, server.http_url, "long-answer")
    tree = ConversationTree()
    tree.fold_older(entries)
    (state,) = tree.responses(run.run_id)
    assert state.closed and state.view.message.text() == TEXT
