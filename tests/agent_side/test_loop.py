"""``steering_loop`` over a real relay: steering re-infers, cancel cancels, errors end the Run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import agent_side
import relay
from agent_side import AbortSignal, steering_loop
from agent_side._loop import Model
from relay.store._memory import MemoryStore
from transport.frames import EntryBody, ResponseClose
from transport.messages import ToolResultPart, UIMessage

from .helpers import ClientEnd, client_end

pytestmark = pytest.mark.anyio


class ScriptedModel:
    """Records the messages of every call; ``turns[i]`` says what call ``i`` does."""

    def __init__(self) -> None:
        self.calls: list[list[UIMessage]] = []
        self.first_token = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        self.calls.append(messages)
        n = len(self.calls)
        if n == 1:
            yield "Planning 3 days"
            self.first_token.set()
            await self.wait(signal)
            yield "" if signal.aborted else " (done)"
        else:
            last = messages[-1].text()
            yield f"Answer {n} to: {last}"

    async def wait(self, signal: AbortSignal) -> None:
        await signal.wait()


async def run_loop_with(
    client: ClientEnd,
    relay_url: str,
    session_id: str,
    run_id: str,
    model: object,
    *,
    max_in_flight: int = 1,
    **kw: object,
) -> agent_side.PipeResult | None:
    async with agent_side.connect(relay_url, session_id, max_in_flight=max_in_flight) as session:
        run = session.create_run(run_id)
        with anyio.fail_after(10):
            return await steering_loop(run, model, **kw)  # type: ignore[arg-type]


async def test_steering_interrupts_the_call_and_reinfers_with_the_steer_last(
    relay_url: str,
) -> None:
    model = ScriptedModel()
    async with client_end(relay_url, "loop-steer") as client:
        run_id = await client.prompt("Plan a 3-day trip to Lisbon.")
        async with agent_side.connect(relay_url, "loop-steer") as session:
            run = session.create_run(run_id)
            chained: list[str] = []
            run.on_steer = lambda: chained.append("user hook")

            async def steer_when_streaming() -> None:
                await model.first_token.wait()
                await client.steer(run_id, "Make it 5 days.")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer_when_streaming)
                    result = await steering_loop(run, model)
            assert result is not None and result.reason == "complete"
            assert chained == ["user hook"]
            assert run.on_steer is not None and run.on_steer() is None
            assert chained == ["user hook", "user hook"]  # the user's hook is back in place
        await client.wait_status(run_id, "complete")
    assert len(model.calls) == 2
    assert [m.text() for m in model.calls[0]] == ["Plan a 3-day trip to Lisbon."]
    second = model.calls[1]
    assert second[-1].role == "user" and second[-1].text() == "Make it 5 days."
    assert second[-2].role == "assistant" and second[-2].text() == "Planning 3 days"
    opens = client.of(run_id, "response_open")
    steer = client.of(run_id, "message")[1]
    assert [o["seen"] for o in opens] == [[], [steer["message"]["id"]]]
    assert client.response_texts(run_id) == [
        "Planning 3 days",
        "Answer 2 to: Make it 5 days.",
    ]


async def test_several_steering_messages_feed_one_model_call(relay_url: str) -> None:
    model = ScriptedModel()
    async with client_end(relay_url, "loop-many") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "loop-many") as session:
            run = session.create_run(run_id)
            both = anyio.Event()
            count = 0

            def on_steer() -> None:
                nonlocal count
                count += 1
                if count == 2:
                    both.set()

            run.on_steer = on_steer

            async def ignore_signal_until_both(signal: AbortSignal) -> None:
                await both.wait()  # a slow model: it notices the abort only later

            model.wait = ignore_signal_until_both  # type: ignore[method-assign]

            async def steer_twice() -> None:
                await model.first_token.wait()
                await client.steer(run_id, "one")
                await client.steer(run_id, "two")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer_twice)
                    result = await steering_loop(run, model)
            assert result is not None and result.reason == "complete"
        await client.wait_status(run_id, "complete")
    assert len(model.calls) == 2
    assert [m.text() for m in model.calls[1][-2:]] == ["one", "two"]
    steer_ids = [e["message"]["id"] for e in client.of(run_id, "message")[1:]]
    assert client.of(run_id, "response_open")[1]["seen"] == steer_ids
    assert all(client.tree.outcome(i).consumed for i in steer_ids)  # type: ignore[union-attr]


async def test_a_cancel_ends_the_run_cancelled(relay_url: str) -> None:
    model = ScriptedModel()
    async with client_end(relay_url, "loop-cancel") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "loop-cancel") as session:
            run = session.create_run(run_id)

            async def cancel_when_streaming() -> None:
                await model.first_token.wait()
                await client.cancel(run_id)

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_when_streaming)
                    result = await steering_loop(run, model)
            assert result is not None and result.reason == "cancelled"
            assert run.abort_signal.aborted
        await client.wait_status(run_id, "cancelled")
    assert len(model.calls) == 1
    assert client.response_texts(run_id) == ["Planning 3 days"]


async def test_a_model_that_raises_ends_the_run_error(relay_url: str) -> None:
    async def broken(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        yield "half an answer"
        raise RuntimeError("the model fell over")

    async with client_end(relay_url, "loop-error") as client:
        run_id = await client.prompt("go")
        result = await run_loop_with(client, relay_url, "loop-error", run_id, broken)
        assert result is not None and result.reason == "error"
        assert isinstance(result.error, RuntimeError)
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error is not None
    assert info.error["code"] == "AGENT_ERROR"
    assert info.error["message"] == "the model fell over"
    assert client.response_texts(run_id) == ["half an answer"]


async def test_a_model_that_raises_when_called_ends_the_run_error(relay_url: str) -> None:
    def not_even_a_stream(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        raise LookupError("no such model")

    async with client_end(relay_url, "loop-call") as client:
        run_id = await client.prompt("go")
        result = await run_loop_with(client, relay_url, "loop-call", run_id, not_even_a_stream)
        assert result is not None and result.reason == "error"
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error == {
        "code": "AGENT_ERROR",
        "message": "no such model",
        "details": {},
    }


async def test_max_iterations_stops_the_loop_and_completes(relay_url: str) -> None:
    model = ScriptedModel()
    async with client_end(relay_url, "loop-max") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "loop-max") as session:
            run = session.create_run(run_id)

            async def steer_when_streaming() -> None:
                await model.first_token.wait()
                await client.steer(run_id, "more")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer_when_streaming)
                    await steering_loop(run, model, max_iterations=1)
        await client.wait_status(run_id, "complete")
    assert len(model.calls) == 1
    steer_id = client.of(run_id, "message")[1]["message"]["id"]
    outcome = client.tree.outcome(steer_id)
    assert outcome is not None and not outcome.consumed


async def test_many_tokens_ride_few_append_frames(relay_url: str) -> None:
    tokens = [f"t{i} " for i in range(2000)]

    async def burst(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        for token in tokens:
            yield token  # no pause: far faster than a relay round trip

    async with client_end(relay_url, "loop-burst") as client:
        run_id = await client.prompt("go")
        result = await run_loop_with(client, relay_url, "loop-burst", run_id, burst)
        assert result is not None and result.reason == "complete"
        await client.wait_status(run_id, "complete")
    appends = client.of(run_id, "response_append")
    assert 1 <= len(appends) <= 20
    deltas = [c["delta"] for a in appends for c in a["chunks"] if c["type"] == "text-delta"]
    assert "".join(deltas) == "".join(tokens)
    assert client.response_texts(run_id) == ["".join(tokens)]


class SlowStore(MemoryStore):
    """A memory store whose writes take a while: a slow relay round trip."""

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        await anyio.sleep(0.02)
        return await super().append(*args, **kwargs)


@pytest.mark.parametrize("max_in_flight", [1, 4])
async def test_a_slow_relay_round_trip_coalesces_paced_tokens(max_in_flight: int) -> None:
    tokens = [f"w{i} " for i in range(300)]

    async def paced(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        for token in tokens:
            yield token
            await anyio.sleep(0.001)  # a model producing ~1000 tokens/s

    async with relay.serve(host="127.0.0.1", port=0, store=SlowStore()) as server:
        async with client_end(server.url, "slow") as client:
            run_id = await client.prompt("go")
            result = await run_loop_with(
                client, server.url, "slow", run_id, paced, max_in_flight=max_in_flight
            )
            assert result is not None and result.reason == "complete"
            await client.wait_status(run_id, "complete")
    appends = client.of(run_id, "response_append")
    assert len(appends) <= len(tokens) // 5
    assert client.response_texts(run_id) == ["".join(tokens)]


class City(BaseModel):
    city: str


def booked_then_steered(booked: list[str], calls: list[list[UIMessage]]) -> None:
    """The hotel was booked once, and the second model call read its result, then the steer."""
    assert booked == ["Lisbon"]
    assert len(calls) == 2
    results = [p for m in calls[1] for p in m.parts if isinstance(p, ToolResultPart)]
    assert [(r.output, r.is_error) for r in results] == [("booked in Lisbon", False)]
    assert calls[1][-1].text() == "Near the river, please."


def hotel_model(calls: list[list[UIMessage]]) -> Model:
    """A model that asks to book a hotel in Lisbon, then notes the last message it read;
    every call's messages go to ``calls``."""

    async def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Any]:
        calls.append(messages)
        if len(calls) == 1:
            yield {
                "type": "tool-input-available",
                "toolCallId": "call_1",
                "toolName": "book_hotel",
                "input": {"city": "Lisbon"},
            }
        else:
            yield f"Done; noted: {messages[-1].text()}"

    return model


async def test_steering_while_a_tool_runs_keeps_its_result_and_joins_the_next_call(
    relay_url: str,
) -> None:
    tool_running = anyio.Event()
    release = anyio.Event()
    booked: list[str] = []

    @agent_side.tool
    async def book_hotel(params: City) -> str:
        """Book a hotel (a side effect: it must not be cut off by a steer)."""
        tool_running.set()
        await release.wait()
        booked.append(params.city)
        return f"booked in {params.city}"

    calls: list[list[UIMessage]] = []
    model = hotel_model(calls)

    async with client_end(relay_url, "loop-steer-tool") as client:
        run_id = await client.prompt("Book me a hotel in Lisbon.")
        async with agent_side.connect(relay_url, "loop-steer-tool") as session:
            run = session.create_run(run_id)

            async def steer_while_the_tool_runs() -> None:
                await tool_running.wait()
                steer_id = await client.steer(run_id, "Near the river, please.")
                await client.wait_for(lambda: client.tree.message(steer_id) is not None)
                await anyio.sleep(0.05)  # the agent has had the steer (and on_steer) by now
                release.set()

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer_while_the_tool_runs)
                    result = await steering_loop(run, model, tools=[book_hotel])
            assert result is not None and result.reason == "complete"
        await client.wait_status(run_id, "complete")
    booked_then_steered(booked, calls)


async def test_steering_that_lands_while_a_whole_response_closes_keeps_its_tool_calls(
    relay_url: str,
) -> None:
    booked: list[str] = []

    @agent_side.tool
    async def book_hotel(params: City) -> str:
        """Book a hotel."""
        booked.append(params.city)
        return f"booked in {params.city}"

    calls: list[list[UIMessage]] = []
    model = hotel_model(calls)

    async with client_end(relay_url, "loop-steer-close") as client:
        run_id = await client.prompt("Book me a hotel in Lisbon.")
        async with agent_side.connect(relay_url, "loop-steer-close") as session:
            run = session.create_run(run_id)
            steered = anyio.Event()
            run.on_steer = steered.set
            publish = session._publish
            closes = 0

            async def close_after_a_steer(entry: EntryBody) -> None:
                """The stream has ended; a steer lands before the first close is acknowledged."""
                nonlocal closes
                if isinstance(entry, ResponseClose):
                    closes += 1
                    if closes == 1:
                        await client.steer(run_id, "Near the river, please.")
                        await steered.wait()
                await publish(entry)

            session._publish = close_after_a_steer  # type: ignore[method-assign]
            with anyio.fail_after(10):
                result = await steering_loop(run, model, tools=[book_hotel])
            assert result is not None and result.reason == "complete"
        await client.wait_status(run_id, "complete")
    booked_then_steered(booked, calls)


class ModelAborted(Exception):
    """What a model client raises when its call is aborted (many do)."""


async def test_a_model_that_raises_when_steering_aborts_it_is_steered_not_failed(
    relay_url: str,
) -> None:
    calls: list[list[UIMessage]] = []
    streaming = anyio.Event()

    async def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        calls.append(messages)
        if len(calls) == 1:
            yield "Planning 3 days"
            streaming.set()
            await signal.wait()
            raise ModelAborted(f"aborted: {signal.reason}")
        yield f"5 days, as asked: {messages[-1].text()}"

    async with client_end(relay_url, "loop-raise-steer") as client:
        run_id = await client.prompt("Plan a 3-day trip to Lisbon.")
        async with agent_side.connect(relay_url, "loop-raise-steer") as session:
            run = session.create_run(run_id)

            async def steer_when_streaming() -> None:
                await streaming.wait()
                await client.steer(run_id, "Make it 5 days.")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer_when_streaming)
                    result = await steering_loop(run, model)
            assert result is not None and result.reason == "complete"
        await client.wait_status(run_id, "complete", "error")
    assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
    assert client.response_texts(run_id) == [
        "Planning 3 days",
        "5 days, as asked: Make it 5 days.",
    ]


async def test_a_model_that_raises_when_a_cancel_aborts_it_ends_the_run_cancelled(
    relay_url: str,
) -> None:
    streaming = anyio.Event()

    async def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        yield "Planning 3 days"
        streaming.set()
        try:
            await signal.wait()
        finally:
            raise ModelAborted("aborted")  # even as pipe() stops reading

    async with client_end(relay_url, "loop-raise-cancel") as client:
        run_id = await client.prompt("Plan a 3-day trip to Lisbon.")
        async with agent_side.connect(relay_url, "loop-raise-cancel") as session:
            run = session.create_run(run_id)

            async def cancel_when_streaming() -> None:
                await streaming.wait()
                await client.cancel(run_id)

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_when_streaming)
                    await steering_loop(run, model)
        await client.wait_status(run_id, "cancelled", "error")
    assert client.tree.run(run_id).status == "cancelled"  # type: ignore[union-attr]
