"""OpenTelemetry: one trace from a client's send through the relay to the agent's Run,
its model call and its tool (the SDK's in-memory exporter)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

import agent_side
import client_side
import relay
from agent_side import Agent, Run
from transport import _tracing as tracing

pytestmark = pytest.mark.anyio

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture
def spans() -> InMemorySpanExporter:
    # The global provider can be set once a process; this module's is the one tests see.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(_provider)
    assert trace.get_tracer_provider() is _provider
    EXPORTER.clear()
    return EXPORTER


class City(BaseModel):
    city: str


@agent_side.tool
def weather(params: City) -> str:
    """The weather in a city."""
    return f"sunny in {params.city}"


async def ask_tool(messages: Any, signal: Any) -> AsyncIterator[dict[str, Any]]:
    yield {
        "type": "tool-input-available",
        "toolCallId": "call_1",
        "toolName": "weather",
        "input": {"city": "Lisbon"},
    }


async def answer() -> AsyncIterator[str]:
    yield "It is sunny."


def one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in found if s.name == name]
    assert len(named) == 1, [s.name for s in found]
    return named[0]


async def test_a_send_the_relay_the_run_its_model_call_and_tool_are_one_trace(
    spans: InMemorySpanExporter,
) -> None:
    assert tracing.ENABLED
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        agent = Agent(server.url)

        @agent.on_run
        async def handle(run: Run) -> None:
            asked = await run.pipe(ask_tool(None, None))
            await run.run_tools(asked, [weather])
            await run.pipe(answer())

        async with agent, client_side.connect(server.url, "traced") as session:
            run = await session.send("Weather in Lisbon?")
            assert (await run.result()).status == "complete"
            assert run.prompt is not None
            prompt = session.view.tree.message(run.prompt.id)
            assert prompt is not None
            traceparent = prompt.message.metadata["traceparent"]
    found = list(spans.get_finished_spans())
    send = one(found, "runwire.send")
    publish = one(found, "runwire.relay.publish")
    handled = one(found, "runwire.run")
    tool = one(found, "runwire.tool")
    calls = [s for s in found if s.name == "runwire.model_call"]
    assert len(calls) == 2
    trace_id = send.context.trace_id
    assert {s.context.trace_id for s in [publish, handled, tool, *calls]} == {trace_id}
    assert traceparent.split("-")[1] == f"{trace_id:032x}"
    assert traceparent.split("-")[2] == f"{send.context.span_id:016x}"
    assert publish.parent is not None and publish.parent.span_id == send.context.span_id
    assert handled.parent is not None and handled.parent.span_id == send.context.span_id
    for child in [tool, *calls]:
        assert child.parent is not None and child.parent.span_id == handled.context.span_id
    assert tool.attributes is not None and tool.attributes["runwire.tool"] == "weather"
    assert handled.attributes is not None
    assert handled.attributes["runwire.session_id"] == "traced"


async def test_without_a_span_nothing_is_added(spans: InMemorySpanExporter) -> None:
    metadata: dict[str, Any] = {}
    tracing.inject(metadata)
    assert metadata == {}
    assert tracing.carrier_of({"traceparent": 3}) is None
