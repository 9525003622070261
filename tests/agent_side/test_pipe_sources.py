"""``pipe()`` and the source it is given: closed on abort, ``error`` chunks, pydantic chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

import agent_side
from agent_side import AbortSignal, Run, steering_loop
from agent_side._pipe import ModelStreamError, Normalizer
from transport.asyncio._abort import AbortController
from transport.messages import UIMessage

from .helpers import client_end
from .test_agent import serving
from .test_pipe import FakeRelay, run_pipe

pytestmark = pytest.mark.anyio


class HttpLikeStream:
    """A provider's stream: ``aiter()`` gives an inner generator, ``aclose()`` ends the
    "HTTP response". It never looks at any signal."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.closed = anyio.Event()
        self.first = anyio.Event()

    async def aclose(self) -> None:
        self.closed.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[str]:
        for token in self.tokens:
            yield token
            self.first.set()
        while not self.closed.is_set():  # keeps "streaming" until the response is closed
            await anyio.sleep(0.001)
            yield "."


class SyncOnly(HttpLikeStream):
    """A source with only a plain ``close()``."""

    def __init__(self, tokens: list[str]) -> None:
        super().__init__(tokens)
        self.aclose = None  # type: ignore[assignment,method-assign]

    def close(self) -> None:
        self.closed.set()


@pytest.mark.parametrize("kind", [HttpLikeStream, SyncOnly])
async def test_an_abort_closes_the_source_object_not_only_its_iterator(kind: type) -> None:
    relay = FakeRelay()
    abort = AbortController()
    source = kind(["partial"])

    async def cancel_soon() -> None:
        await source.first.wait()
        abort.abort("cancel")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_soon)
            result = await run_pipe(source, relay, abort.signal)
    assert result.reason == "cancelled"
    assert source.closed.is_set()
    assert relay.close().message.text().startswith("partial")


async def test_a_stop_signal_closes_the_source_and_reports_complete() -> None:
    relay = FakeRelay()
    stop = AbortController()
    source = HttpLikeStream(["so far"])

    async def steer_soon() -> None:
        await source.first.wait()
        stop.abort("steered")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(steer_soon)
            result = await run_pipe(source, relay, stop_signal=stop.signal)
    assert result.reason == "complete"
    assert source.closed.is_set()
    assert "interrupted" not in relay.close().message.metadata


async def test_an_error_chunk_ends_the_pipe_with_its_text() -> None:
    relay = FakeRelay()
    closed = anyio.Event()

    async def stream() -> AsyncIterator[Any]:
        try:
            yield "half"
            yield {"type": "error", "errorText": "upstream unreachable"}
            yield "never"
        finally:
            closed.set()

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay)
    assert closed.is_set()
    assert result.reason == "error"
    assert isinstance(result.error, ModelStreamError)
    assert str(result.error) == "upstream unreachable"
    assert relay.close().message.text() == "half"


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class TextDelta(_Camel):
    type: str = "text-delta"
    id: str
    delta: str
    provider_metadata: dict[str, Any] | None = None


def test_pydantic_chunk_objects_are_taken_as_their_camel_case_dump() -> None:
    chunks = Normalizer().feed(TextDelta(id="t", delta="hi"))
    assert chunks == [{"type": "text-delta", "id": "t", "delta": "hi"}]


async def test_pydantic_chunks_fold_into_the_reply() -> None:
    relay = FakeRelay()

    async def stream() -> AsyncIterator[Any]:
        yield TextDelta(id="t", delta="from ")
        yield TextDelta(id="t", delta="pydantic")

    with anyio.fail_after(5):
        result = await run_pipe(stream(), relay)
    assert result.reason == "complete"
    assert relay.close().message.text() == "from pydantic"


async def test_steering_closes_a_model_stream_that_ignores_its_signal(relay_url: str) -> None:
    sources: list[HttpLikeStream] = []
    calls: list[list[UIMessage]] = []

    def model(messages: list[UIMessage], signal: AbortSignal) -> HttpLikeStream:
        calls.append(messages)
        source = HttpLikeStream(["Planning"] if not sources else ["Re-planned"])
        if sources:  # the second call ends by itself
            source.closed.set()
        sources.append(source)
        return source

    async with client_end(relay_url, "pipe-steer-close") as client:
        run_id = await client.prompt("plan")
        async with agent_side.connect(relay_url, "pipe-steer-close") as session:
            run = session.create_run(run_id)

            async def steer() -> None:
                while not sources:
                    await anyio.sleep(0.001)
                await sources[0].first.wait()
                await client.steer(run_id, "shorter")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer)
                    result = await steering_loop(run, model)
        assert result is not None and result.reason == "complete"
        await client.wait_status(run_id, "complete")
    assert sources[0].closed.is_set()
    assert len(calls) == 2 and calls[1][-1].text() == "shorter"


async def test_an_error_chunk_ends_a_steering_loop_run_error(relay_url: str) -> None:
    async def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Any]:
        yield {"type": "error", "errorText": "Connection error: provider unreachable"}

    async with client_end(relay_url, "pipe-error-chunk") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "pipe-error-chunk") as session:
            run = session.create_run(run_id)
            with anyio.fail_after(10):
                result = await steering_loop(run, model)
        assert result is not None and result.reason == "error"
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error is not None
    assert info.error["message"] == "Connection error: provider unreachable"


async def test_a_worker_whose_last_pipe_got_an_error_chunk_ends_the_run_error(
    relay_url: str,
) -> None:
    async def model() -> AsyncIterator[Any]:
        yield "partial"
        yield {"type": "error", "errorText": "rate limited by the provider"}

    async def handle(run: Run) -> None:
        await run.pipe(model())

    async with serving(relay_url, handle), client_end(relay_url, "w-error-chunk") as client:
        run_id = await client.prompt("go")
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error is not None
    assert info.error["message"] == "rate limited by the provider"
