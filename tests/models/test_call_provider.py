"""``call_provider``: the stream it opens is closed however the read ends, and a backlog the
SDK buffered never holds the event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from agent_side.models._common import call_provider
from transport.asyncio._abort import AbortController

pytestmark = pytest.mark.anyio


class Buffered:
    """A provider stream whose events are all buffered: reading them never suspends."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        for i in range(self.n):
            yield {"type": "text-delta", "id": "t", "delta": str(i)}


async def test_other_tasks_run_between_the_chunks_of_a_buffered_backlog() -> None:
    source = Buffered(200)
    ran_during: list[int] = []
    reading = True

    async def other() -> None:
        while reading:
            ran_during.append(1)
            await anyio.lowlevel.checkpoint()

    async def start() -> Buffered:
        return source

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        await anyio.lowlevel.checkpoint()
        before = len(ran_during)
        got = [c async for c in call_provider(start, Buffered.events, AbortController().signal)]
        reading = False
    assert len(got) == 200 and source.closed
    assert len(ran_during) - before >= 100  # the other task ran between the chunks


async def test_a_provider_error_is_an_error_chunk_unless_the_call_was_aborted() -> None:
    async def start() -> Buffered:
        raise ConnectionError("Connection refused")

    chunks = [c async for c in call_provider(start, Buffered.events, AbortController().signal)]
    assert chunks == [{"type": "error", "errorText": "Connection refused"}]
    aborted = AbortController()
    aborted.abort("steered")
    assert [c async for c in call_provider(start, Buffered.events, aborted.signal)] == []
