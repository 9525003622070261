"""Durable Runs adopted by a second worker, in one process over a real relay.

The first worker is an explicit-mode connection that goes away mid-Run (its
block exits without ending the Run); after ``agent_grace`` the relay hands
the Run, with its last checkpoint, to a worker of the agent name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import agent_side
import relay
from agent_side import AbortSignal, Run, steering_loop
from transport.messages import ToolResultPart, UIMessage

from .helpers import client_end

pytestmark = pytest.mark.anyio


class City(BaseModel):
    city: str


class Recorder:
    """A model that records what each call read and answers with a fixed text."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[list[UIMessage]] = []

    async def __call__(self, messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        self.calls.append(messages)
        yield self.answer


async def call_tool(name: str, **arguments: Any) -> AsyncIterator[dict[str, Any]]:
    yield {
        "type": "tool-input-available",
        "toolCallId": "call_1",
        "toolName": name,
        "input": arguments,
    }


async def test_a_run_adopted_right_after_a_tool_step_calls_the_model_with_its_results() -> None:
    booked: list[str] = []

    @agent_side.tool
    async def book_hotel(params: City) -> str:
        """Book a hotel."""
        booked.append(params.city)
        return f"booked in {params.city}"

    model = Recorder("Your hotel in Lisbon is booked.")
    adopted: list[bool] = []
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-tools") as client,
    ):
        run_id = await client.prompt("Book me a hotel in Lisbon.")
        async with agent_side.connect(server.url, "adopt-tools", durable=True) as session:
            run = session.create_run(run_id)
            assert run.has_input()
            asked = await run.pipe(call_tool("book_hotel", city="Lisbon"))
            await run.run_tools(asked, [book_hotel])
            await client.wait_for(lambda: len(client.of(run_id, "checkpoint")) == 2)
        # The worker went away after the tool step, before the model read its results.
        worker = agent_side.Agent(server.url, durable=True)

        @worker.on_run
        async def handle(r: Run) -> None:
            adopted.append(r.adopted)
            await steering_loop(r, model, tools=[book_hotel])

        async with worker:
            await client.wait_status(run_id, "complete", "error", timeout=10)
        assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
    assert adopted == [True]
    assert booked == ["Lisbon"]  # not booked twice
    assert len(model.calls) == 1
    results = [p for m in model.calls[0] for p in m.parts if isinstance(p, ToolResultPart)]
    assert [r.output for r in results] == ["booked in Lisbon"]
    assert client.response_texts(run_id)[-1] == "Your hotel in Lisbon is booked."


async def test_an_adopted_run_keeps_the_steering_it_had_and_takes_what_it_had_not() -> None:
    model = Recorder("5 days, under £800, with vegan options.")
    streaming = anyio.Event()

    async def half_answer() -> AsyncIterator[str]:
        yield "Day 1 of 5"
        streaming.set()
        await anyio.sleep(30)  # the worker goes away mid-answer
        yield "never"

    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-steer") as client,
    ):
        run_id = await client.prompt("Plan a 3-day trip to Lisbon.")
        async with agent_side.connect(server.url, "adopt-steer", durable=True) as session:
            run = session.create_run(run_id)
            assert run.has_input()
            await run.pipe(call_text("3 days: ..."))
            taken = await client.steer(run_id, "Make it 5 days, under £800.")
            await client.wait_for(lambda: run.has_input())
            with anyio.move_on_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run.pipe, half_answer())
                    await streaming.wait()
                    await client.wait_for(lambda: "Day 1 of 5" in client.response_texts(run_id))
                    tg.cancel_scope.cancel()
        late = await client.steer(run_id, "Also vegan options.")  # while no worker is up
        worker = agent_side.Agent(server.url, durable=True)

        @worker.on_run
        async def handle(r: Run) -> None:
            await steering_loop(r, model)

        async with worker:
            await client.wait_status(run_id, "complete", "error", timeout=10)
    assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
    assert len(model.calls) == 1
    read = [(m.role, m.text()) for m in model.calls[0]]
    assert read == [
        ("user", "Plan a 3-day trip to Lisbon."),
        ("assistant", "3 days: ..."),
        ("user", "Make it 5 days, under £800."),
        ("user", "Also vegan options."),
    ]
    assert client.response_texts(run_id) == [
        "3 days: ...",
        "5 days, under £800, with vegan options.",
    ]
    for message_id in (taken, late):
        outcome = client.tree.outcome(message_id)
        assert outcome is not None and outcome.consumed
    opens = client.of(run_id, "response_open")
    assert opens[-1]["message_id"] == f"{run_id}.s2"  # the half-published step, retried


async def call_text(text: str) -> AsyncIterator[str]:
    yield text


async def test_an_adopted_run_reads_and_retries_answers_longer_than_a_frame() -> None:
    """Closes of answers over ``max_frame_bytes`` carry no message: adoption still works."""
    first = "".join(f"first report, line {i} ✓\n" for i in range(2000))
    second = "".join(f"second report, line {i} é\n" for i in range(2000))
    model = Recorder(second)  # one delta of the whole text: the coalescer splits it
    streaming = anyio.Event()

    async def half_answer() -> AsyncIterator[str]:
        yield second[:20_000]
        streaming.set()
        await anyio.sleep(30)  # the worker goes away mid-answer
        yield "never"

    async with (
        relay.serve(
            host="127.0.0.1",
            port=0,
            store="memory://",
            agent_grace=0.3,
            max_frame_bytes=16 * 1024,
        ) as server,
        client_end(server.url, "adopt-long") as client,
    ):
        run_id = await client.prompt("Write two long reports.")
        async with agent_side.connect(server.url, "adopt-long", durable=True) as session:
            run = session.create_run(run_id)
            assert run.has_input()
            assert (await run.pipe(call_text(first))).reason == "complete"
            with anyio.move_on_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run.pipe, half_answer())
                    await streaming.wait()
                    await client.wait_for(lambda: second[:20_000] in client.response_texts(run_id))
                    tg.cancel_scope.cancel()
        worker = agent_side.Agent(server.url, durable=True)

        @worker.on_run
        async def handle(r: Run) -> None:
            await steering_loop(r, model)

        async with worker:
            await client.wait_status(run_id, "complete", "error", timeout=10)
        closes = client.of(run_id, "response_close")
    assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
    assert [c.get("message") for c in closes] == [None, None]  # too big for a frame
    assert [(m.role, m.text()) for m in model.calls[0]] == [
        ("user", "Write two long reports."),
        ("assistant", first),
    ]
    assert client.response_texts(run_id) == [first, second]  # the half answer replaced


async def test_an_adopted_run_runs_the_tool_calls_of_a_model_step_no_worker_started() -> None:
    """The worker went away after the model asked for a tool and before the tool step opened
    (nothing ran): the adopter runs the call once and the model reads its result, rather
    than ending the Run ``complete`` on a tool call nobody answered."""
    booked: list[str] = []

    @agent_side.tool
    async def book_hotel(params: City) -> str:
        """Book a hotel."""
        booked.append(params.city)
        return f"booked in {params.city}"

    model = Recorder("Your hotel in Porto is booked.")
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-unrun") as client,
    ):
        run_id = await client.prompt("Book me a hotel in Porto.")
        async with agent_side.connect(server.url, "adopt-unrun", durable=True) as session:
            run = session.create_run(run_id)
            assert run.has_input()
            await run.pipe(call_tool("book_hotel", city="Porto"))
            await client.wait_for(lambda: len(client.of(run_id, "checkpoint")) == 1)
        # Gone before run_tools() published the tool step's response_open.
        worker = agent_side.Agent(server.url, durable=True)

        @worker.on_run
        async def handle(r: Run) -> None:
            await steering_loop(r, model, tools=[book_hotel])

        async with worker:
            await client.wait_status(run_id, "complete", "error", timeout=10)
        assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
        opens = [e["message_id"] for e in client.of(run_id, "response_open")]
    assert booked == ["Porto"]
    assert opens == [f"{run_id}.s1", f"{run_id}.s2.tools", f"{run_id}.s3"]
    assert len(model.calls) == 1
    results = [p for m in model.calls[0] for p in m.parts if isinstance(p, ToolResultPart)]
    assert [r.output for r in results] == ["booked in Porto"]
    assert client.response_texts(run_id)[-1] == "Your hotel in Porto is booked."


async def test_an_adopted_run_does_not_run_the_calls_of_a_model_step_steering_followed() -> None:
    """Steering newer than the unstarted calls' model step waits: the step may have been cut
    off by it, so the calls are answered ABORTED_BEFORE_DISPATCH, never run, and the model
    reads them with the steering after them."""
    booked: list[str] = []

    @agent_side.tool
    async def book_hotel(params: City) -> str:
        """Book a hotel."""
        booked.append(params.city)
        return f"booked in {params.city}"

    model = Recorder("Porto it is not, then.")
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-unrun-steered") as client,
    ):
        run_id = await client.prompt("Book me a hotel in Porto.")
        async with agent_side.connect(server.url, "adopt-unrun-steered", durable=True) as session:
            run = session.create_run(run_id)
            assert run.has_input()
            await run.pipe(call_tool("book_hotel", city="Porto"))
            await client.wait_for(lambda: len(client.of(run_id, "checkpoint")) == 1)
            steer = await client.steer(run_id, "Wait, not Porto.")
            await client.wait_for(lambda: run.has_input())
        worker = agent_side.Agent(server.url, durable=True)

        @worker.on_run
        async def handle(r: Run) -> None:
            await steering_loop(r, model, tools=[book_hotel])

        async with worker:
            await client.wait_status(run_id, "complete", "error", timeout=10)
        assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
        outcome = client.tree.outcome(steer)
    assert booked == []
    assert len(model.calls) == 1
    read = model.calls[0]
    results = [p for m in read for p in m.parts if isinstance(p, ToolResultPart)]
    assert [(r.tool_call_id, r.output["code"]) for r in results] == [
        ("call_1", "ABORTED_BEFORE_DISPATCH")
    ]
    assert (read[-1].role, read[-1].text()) == ("user", "Wait, not Porto.")
    assert outcome is not None and outcome.consumed
