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
from agent_side._durable import TOOL_STEP, not_started, tool_step_metadata
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

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
    book_hotel = hotel_tool(booked)
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


def hotel_tool(booked: list[str]) -> agent_side.Tool:
    @agent_side.tool
    async def book_hotel(params: City) -> str:
        """Book a hotel."""
        booked.append(params.city)
        return f"booked in {params.city}"

    return book_hotel


async def ask_for_a_tool_and_go(
    url: str, client: Any, *, steer: str | None = None
) -> tuple[str, str | None]:
    """A worker's model asks for ``book_hotel`` and the worker goes away before the tool step
    opens (after ``steer`` arrived, if given); returns the Run's id and the steer's."""
    run_id = await client.prompt("Book me a hotel in Porto.")
    async with agent_side.connect(url, client.session_id, durable=True) as session:
        run = session.create_run(run_id)
        assert run.has_input()
        await run.pipe(call_tool("book_hotel", city="Porto"))
        await client.wait_for(lambda: len(client.of(run_id, "checkpoint")) == 1)
        steer_id = None
        if steer is not None:
            steer_id = await client.steer(run_id, steer)
            await client.wait_for(lambda: run.has_input())
    return run_id, steer_id


async def test_an_adopted_run_runs_the_tool_calls_of_a_model_step_no_worker_started() -> None:
    """The worker went away after the model asked for a tool and before the tool step opened
    (nothing ran): the adopter runs the call once and the model reads its result, rather
    than ending the Run ``complete`` on a tool call nobody answered."""
    booked: list[str] = []
    model = Recorder("Your hotel in Porto is booked.")
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-unrun") as client,
    ):
        run_id, _ = await ask_for_a_tool_and_go(server.url, client)
        await adopt(server.url, client, run_id, [hotel_tool(booked)], model)
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
    model = Recorder("Porto it is not, then.")
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-unrun-steered") as client,
    ):
        run_id, steer = await ask_for_a_tool_and_go(server.url, client, steer="Wait, not Porto.")
        assert steer is not None
        await adopt(server.url, client, run_id, [hotel_tool(booked)], model)
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


class Trip(BaseModel):
    city: str


def call_tools(*calls: tuple[str, str]) -> AsyncIterator[dict[str, Any]]:
    """A model step asking for ``(tool_call_id, tool_name)`` calls, each with city Lisbon."""

    async def stream() -> AsyncIterator[dict[str, Any]]:
        for call_id, name in calls:
            yield {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": name,
                "input": {"city": "Lisbon"},
            }

    return stream()


THREE_CALLS = (("call_1", "check_rooms"), ("call_2", "book_hotel"), ("call_3", "send_receipt"))


def trip_tools(ran: list[str], running: anyio.Event, hang: set[str]) -> list[agent_side.Tool]:
    """Three tools that record their runs; those in ``hang`` never return (the worker dies)."""

    async def act(name: str, city: str) -> str:
        ran.append(name)
        if name in hang:
            running.set()
            await anyio.sleep(30)
        return f"{name} done in {city}"

    @agent_side.tool
    async def check_rooms(params: Trip) -> str:
        """Check for free rooms."""
        return await act("check_rooms", params.city)

    @agent_side.tool
    async def book_hotel(params: Trip) -> str:
        """Book a hotel room (charges the card)."""
        return await act("book_hotel", params.city)

    @agent_side.tool
    async def send_receipt(params: Trip) -> str:
        """Email the receipt."""
        return await act("send_receipt", params.city)

    return [check_rooms, book_hotel, send_receipt]


async def die_in_tool_step(
    url: str,
    client: Any,
    run_id: str,
    tools: list[agent_side.Tool],
    running: anyio.Event,
    *,
    parallel: bool,
    results: int,
) -> None:
    """A worker asks for THREE_CALLS and goes away once a call hangs and ``results`` are out."""
    async with agent_side.connect(url, client.session_id, durable=True) as session:
        run = session.create_run(run_id)
        assert run.has_input()
        asked = await run.pipe(call_tools(*THREE_CALLS))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: run.run_tools(asked, tools, parallel=parallel))
                await running.wait()
                await client.wait_for(
                    lambda: (
                        len(
                            [
                                e
                                for e in client.of(run_id, "response_append")
                                if e["message_id"].endswith(".tools")
                            ]
                        )
                        == results
                    )
                )
                tg.cancel_scope.cancel()  # the worker dies with the call still running


async def adopt(
    url: str, client: Any, run_id: str, tools: list[agent_side.Tool], model: Recorder | None = None
) -> Recorder:
    """A durable worker adopts the Run and completes it with ``model``."""
    model = model or Recorder("Checked what happened.")
    worker = agent_side.Agent(url, durable=True)

    @worker.on_run
    async def handle(r: Run) -> None:
        await steering_loop(r, model, tools=tools)

    async with worker:
        await client.wait_status(run_id, "complete", "error", timeout=10)
    assert client.tree.run(run_id).status == "complete"
    return model


def codes(messages: list[UIMessage]) -> dict[str, Any]:
    """Each tool result's code (its output when it has none), by call id."""
    out = {}
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolResultPart):
                code = p.output.get("code") if isinstance(p.output, dict) else None
                assert p.tool_call_id not in out
                out[p.tool_call_id] = code or p.output
    return out


@pytest.mark.parametrize("hung", [0, 1])
async def test_an_adopted_run_does_not_run_the_sequential_calls_queued_behind_the_running_one(
    hung: int,
) -> None:
    """A sequential step starts a call only once the previous result is published: the worker
    died in call ``hung``, so the calls after it provably never started. They are answered
    ABORTED_BEFORE_DISPATCH (in the stored step, not only by history repair) and never run
    (they were queued behind a call whose outcome is unknown); only the running call reads
    OUTCOME_UNKNOWN."""
    ran: list[str] = []
    running = anyio.Event()
    tools = trip_tools(ran, running, {THREE_CALLS[hung][1]})
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, f"adopt-seq-{hung}") as client,
    ):
        run_id = await client.prompt("Book me a hotel in Lisbon.")
        await die_in_tool_step(
            server.url, client, run_id, tools, running, parallel=False, results=hung
        )
        model = await adopt(server.url, client, run_id, tools)
        step = next(
            r for r in client.tree.responses(run_id) if r.view.message.id == f"{run_id}.s2.tools"
        )
    expected: dict[str, Any] = {"call_1": "check_rooms done in Lisbon"} if hung else {}
    expected[THREE_CALLS[hung][0]] = "OUTCOME_UNKNOWN"
    expected.update({call_id: "ABORTED_BEFORE_DISPATCH" for call_id, _ in THREE_CALLS[hung + 1 :]})
    assert ran == [name for _, name in THREE_CALLS[: hung + 1]]  # nothing ran twice or late
    assert len(model.calls) == 1
    assert codes(model.calls[0]) == expected
    assert step.closed
    stored = codes([step.view.message])
    assert stored == {k: v for k, v in expected.items() if v != "OUTCOME_UNKNOWN"}


async def test_an_adopted_run_keeps_every_unanswered_call_of_a_parallel_step_unknown() -> None:
    """In a parallel step every call may have started: all the unanswered ones read
    OUTCOME_UNKNOWN and none runs again."""
    ran: list[str] = []
    running = anyio.Event()
    tools = trip_tools(ran, running, {"book_hotel", "send_receipt"})
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "adopt-par") as client,
    ):
        run_id = await client.prompt("Book me a hotel in Lisbon.")
        await die_in_tool_step(server.url, client, run_id, tools, running, parallel=True, results=1)
        model = await adopt(server.url, client, run_id, tools)
    assert sorted(ran) == ["book_hotel", "check_rooms", "send_receipt"]
    assert codes(model.calls[0]) == {
        "call_1": "check_rooms done in Lisbon",
        "call_2": "OUTCOME_UNKNOWN",
        "call_3": "OUTCOME_UNKNOWN",
    }


def half_step(metadata: dict[str, Any], *results: tuple[str, str | None]) -> UIMessage:
    """A tool step as a dead worker left it: ``(call id, error code or None for ok)``."""
    parts = [
        ToolResultPart(
            tool_call_id=call_id,
            tool_name="t",
            output="ok" if code is None else {"code": code, "message": "x"},
            is_error=code is not None,
        )
        for call_id, code in results
    ]
    return UIMessage(id="r.s2.tools", role="assistant", parts=parts, metadata=metadata)


def step_calls(*ids: str, parallel: bool) -> dict[str, Any]:
    calls = [ToolCallPart(tool_call_id=i, tool_name="t") for i in ids]
    return tool_step_metadata(calls, parallel=parallel)


@pytest.mark.parametrize(
    ("metadata", "results", "unstarted"),
    [
        # sequential: the first call without a result may have started, the later ones not
        (step_calls("a", "b", "c", parallel=False), [("a", None)], ["c"]),
        (step_calls("a", "b", "c", parallel=False), [], ["b", "c"]),
        # a cancel wrote some ABORTED_BEFORE_DISPATCH results before the worker died
        (
            step_calls("a", "b", "c", "d", parallel=False),
            [("c", "ABORTED_BEFORE_DISPATCH")],
            ["b", "d"],
        ),
        (step_calls("a", "b", parallel=False), [("a", None), ("b", "TOOL_ERROR")], []),
        # a later call has a real result: the entries prove nothing
        (step_calls("a", "b", "c", parallel=False), [("c", None)], []),
        # parallel, or a step whose open does not say (an older worker): all may have started
        (step_calls("a", "b", "c", parallel=True), [("a", None)], []),
        ({}, [("a", None)], []),
        ({TOOL_STEP: {"calls": "a,b", "parallel": False}}, [], []),
    ],
)
def test_which_calls_of_a_half_published_tool_step_provably_never_started(
    metadata: dict[str, Any], results: list[tuple[str, str | None]], unstarted: list[str]
) -> None:
    message = half_step(metadata, *results)
    assert [c.tool_call_id for c in not_started(message)] == unstarted
