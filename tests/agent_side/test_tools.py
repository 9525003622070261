"""The tool runner: ``tool()`` with pydantic parameters, and one step of tool calls."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from agent_side import AbortController, Tool, tool, tool_calls
from agent_side._tools import execute_tools
from transport.errors import RunwireError
from transport.frames import EntryBody, ResponseAppend, ResponseClose, ResponseOpen
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

pytestmark = pytest.mark.anyio


class Flight(BaseModel):
    to: str
    passengers: int = 1


class Fare(BaseModel):
    to: str
    eur: float


@tool
async def search_flights(params: Flight) -> list[Fare]:
    """Search flights to a city."""
    return [Fare(to=params.to, eur=99.0 * params.passengers)]


def call(cid: str, name: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool_call_id=cid, tool_name=name, input=args)


class Published:
    def __init__(self) -> None:
        self.entries: list[EntryBody] = []
        self.n = 0

    async def __call__(self, entry: EntryBody) -> None:
        self.entries.append(entry)

    def entry_id(self) -> str:
        self.n += 1
        return f"e{self.n}"


async def run(calls: list[ToolCallPart], tools: list[Tool], **kw: Any) -> tuple[Any, Published]:
    published = Published()
    signal = kw.pop("signal", AbortController().signal)
    out, _message, _questions = await execute_tools(
        calls,
        tools,
        run_id="r1",
        message_id="r1.s2.tools",
        signal=signal,
        publish=published,
        entry_id=published.entry_id,
        **kw,
    )
    return out, published


def test_tool_takes_its_parameters_name_and_description_from_the_function() -> None:
    assert search_flights.name == "search_flights"
    assert search_flights.description == "Search flights to a city."
    assert search_flights.parameters is Flight
    schema = search_flights.schema()
    assert schema["parameters"]["required"] == ["to"]

    @tool(name="book", description="Book a seat", parameters=Flight)
    def book(params: Any) -> str:
        return "ok"

    assert (book.name, book.description, book.parameters) == ("book", "Book a seat", Flight)
    with pytest.raises(TypeError):

        @tool
        def untyped(params: dict[str, Any]) -> None:
            return None


async def test_a_step_writes_each_result_as_it_finishes_then_closes() -> None:
    (result,), published = await run([call("c1", "search_flights", to="LIS")], [search_flights])
    assert (result.status, result.output) == ("ok", [{"to": "LIS", "eur": 99.0}])
    kinds = [type(e) for e in published.entries]
    assert kinds == [ResponseOpen, ResponseAppend, ResponseClose]
    close = published.entries[-1]
    assert isinstance(close, ResponseClose)
    (part,) = close.message.parts
    assert isinstance(part, ToolResultPart) and part.output == [{"to": "LIS", "eur": 99.0}]


async def test_failures_are_results_with_a_code() -> None:
    @tool
    async def slow(params: Flight) -> str:
        await anyio.sleep(10)
        return "late"

    @tool
    def picky(params: Flight) -> str:
        raise RunwireError("NO_SEATS", "sold out")

    @tool
    def broken(params: Flight) -> str:
        raise ValueError("boom")

    calls = [
        call("c1", "nope", to="LIS"),
        call("c2", "search_flights", passengers=2),
        call("c3", "slow", to="LIS"),
        call("c4", "picky", to="LIS"),
        call("c5", "broken", to="LIS"),
    ]
    with anyio.fail_after(5):
        out, _ = await run(calls, [search_flights, slow, picky, broken], timeout=0.05)
    codes = [(r.status, r.code) for r in out]
    assert codes == [
        ("error", "TOOL_NOT_FOUND"),
        ("error", "VALIDATION_ERROR"),
        ("error", "TOOL_TIMEOUT"),
        ("error", "NO_SEATS"),
        ("error", "TOOL_ERROR"),
    ]
    assert out[3].output == {"code": "NO_SEATS", "message": "sold out"}


@pytest.mark.parametrize(("parallel", "max_parallel", "expected"), [(False, None, 1), (True, 2, 2)])
async def test_calls_run_one_after_another_or_side_by_side(
    parallel: bool, max_parallel: int | None, expected: int
) -> None:
    running = 0
    most = 0

    @tool
    async def work(params: Flight) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0.02)
        running -= 1
        return params.to

    calls = [call(f"c{i}", "work", to=str(i)) for i in range(4)]
    with anyio.fail_after(5):
        out, _ = await run(calls, [work], parallel=parallel, max_parallel=max_parallel)
    assert [r.output for r in out] == ["0", "1", "2", "3"]
    assert most == expected


async def test_a_step_stopped_before_it_started_aborts_every_call() -> None:
    stop = AbortController()
    stop.abort("cancel")
    out, published = await run(
        [call("c1", "search_flights", to="LIS"), call("c2", "search_flights", to="OPO")],
        [search_flights],
        signal=stop.signal,
    )
    assert [(r.status, r.code) for r in out] == [("aborted", "ABORTED_BEFORE_DISPATCH")] * 2
    assert len(published.entries) == 4  # open, two results, close


def test_tool_calls_lists_the_calls_a_message_does_not_answer() -> None:
    message = UIMessage(
        id="m",
        role="assistant",
        parts=[
            call("c1", "a"),
            call("c2", "b"),
            ToolResultPart(tool_call_id="c1", tool_name="a", output=1),
        ],
    )
    assert [c.tool_call_id for c in tool_calls(message)] == ["c2"]
    assert tool_calls(None) == []
