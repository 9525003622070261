"""The adapters with the real SDKs, over HTTP to a fake provider, inside Runs on a real relay.

Per provider: a reply streams and its usage lands in the metadata; steering
mid-stream closes the old HTTP stream at once and the next call ends with
the steer; a cancel closes it at once; an unreachable provider and a
mid-stream error end the Run ``error`` with the provider's message; tool
calls round-trip through the tool runner, and an approval pauses the Run.

``CLOSE_BOUND`` is generous against the 50 ms the issue asks for (the
machine is shared), and far below what a stream left open would take: the
fake provider holds it open for 30 s.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import agent_side
import client_side
from agent_side import Agent, Run, steering_loop, tool
from transport.messages import UIMessage

from ..agent_side.helpers import ClientEnd, client_end
from .conftest import Provider
from .fake_provider import FakeProvider, Reply

pytestmark = pytest.mark.anyio

CLOSE_BOUND = 0.25
"""Seconds between the abort and the provider seeing the HTTP stream closed."""


class City(BaseModel):
    city: str


@tool
async def get_weather(params: City) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": params.city, "temp": 21}


@tool(requires_approval=True)
async def get_weather_approved(params: City) -> dict[str, Any]:
    """The weather in a city (asks first)."""
    return {"city": params.city, "temp": 22}


def reply_of(client: ClientEnd, run_id: str, index: int = 0) -> UIMessage:
    replies = [
        vm.message
        for vm in client.tree.messages()
        if vm.run_id == run_id and vm.message.role == "assistant"
    ]
    return replies[index]


def streamed(client: ClientEnd, run_id: str) -> bool:
    """True once the partial reply's last words reached the client."""
    return "three days" in "".join(client.response_texts(run_id))


async def loop(relay_url: str, session_id: str, run_id: str, model: Any, **kw: Any) -> Run:
    async with agent_side.connect(relay_url, session_id) as session:
        run = session.create_run(run_id)
        with anyio.fail_after(15):
            await steering_loop(run, model, **kw)
        return run


async def test_a_reply_streams_and_its_usage_lands_in_the_metadata(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-text"
    async with (
        FakeProvider(Reply(f"{provider.name}_text.sse")) as fake,
        client_end(relay_url, sid) as client,
    ):
        run_id = await client.prompt("Tell me about Lisbon")
        await loop(relay_url, sid, run_id, provider.make(fake.base_url))
        await client.wait_status(run_id, "complete")
    assert client.response_texts(run_id) == ["Lisbon in spring is lovely."]
    usage = reply_of(client, run_id).metadata["usage"]
    assert usage == {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}
    assert provider.last_user_text(fake.exchanges[0].body) == "Tell me about Lisbon"


async def test_steering_closes_the_old_http_stream_and_the_next_call_ends_with_it(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-steer"
    replies = (Reply(f"{provider.name}_partial.sse", hold=True), Reply(f"{provider.name}_text.sse"))
    aborted: list[float] = []
    async with FakeProvider(*replies) as fake, client_end(relay_url, sid) as client:
        run_id = await client.prompt("Plan a 3-day trip")
        async with agent_side.connect(relay_url, sid) as session:
            run = session.create_run(run_id)
            run.on_steer = lambda: aborted.append(time.monotonic())  # after the call's abort

            async def steer() -> None:
                await client.wait_for(
                    lambda: "three days" in "".join(client.response_texts(run_id))
                )
                await client.steer(run_id, "Make it 5 days.")

            with anyio.fail_after(15):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(steer)
                    await steering_loop(run, provider.make(fake.base_url))
        await client.wait_status(run_id, "complete")
    first, second = fake.exchanges
    assert first.closed_at is not None and aborted
    assert first.closed_at - aborted[0] < CLOSE_BOUND
    assert provider.last_user_text(second.body) == "Make it 5 days."
    assert "Planning three days" in str(second.body)
    assert client.response_texts(run_id) == ["Planning three days", "Lisbon in spring is lovely."]


async def test_a_cancel_closes_the_http_stream_and_keeps_the_interrupted_reply(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-cancel"
    cancelled: list[float] = []
    async with (
        FakeProvider(Reply(f"{provider.name}_partial.sse", hold=True)) as fake,
        client_end(relay_url, sid) as client,
    ):
        run_id = await client.prompt("Plan a 3-day trip")
        async with agent_side.connect(relay_url, sid) as session:
            run = session.create_run(run_id)
            run.abort_signal.add_callback(lambda _reason: cancelled.append(time.monotonic()))

            async def cancel() -> None:
                await client.wait_for(
                    lambda: "three days" in "".join(client.response_texts(run_id))
                )
                await client.cancel(run_id)

            with anyio.fail_after(15):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel)
                    await steering_loop(run, provider.make(fake.base_url))
        await client.wait_status(run_id, "cancelled")
    [exchange] = fake.exchanges
    assert exchange.closed_at is not None and cancelled
    assert exchange.closed_at - cancelled[0] < CLOSE_BOUND
    reply = reply_of(client, run_id)
    assert reply.text() == "Planning three days" and reply.metadata.get("interrupted") is True


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_an_unreachable_provider_ends_the_run_error_with_its_message(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-unreachable"
    model = provider.make(f"http://127.0.0.1:{_closed_port()}")
    async with client_end(relay_url, sid) as client:
        run_id = await client.prompt("hello")
        await loop(relay_url, sid, run_id, model)
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error is not None
    assert info.error["message"].startswith("Connection")  # the SDK's own words


async def test_a_mid_stream_error_ends_the_run_error_with_the_providers_message(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-midstream"
    async with (
        FakeProvider(Reply(f"{provider.name}_error.sse")) as fake,
        client_end(relay_url, sid) as client,
    ):
        run_id = await client.prompt("hello")
        await loop(relay_url, sid, run_id, provider.make(fake.base_url))
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error is not None
    assert "The model is overloaded, try again later" in info.error["message"]
    assert client.response_texts(run_id) == ["Half "]


async def test_tool_calls_round_trip_through_the_tool_runner(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-tools"
    replies = (Reply(f"{provider.name}_tool.sse"), Reply(f"{provider.name}_text.sse"))
    async with FakeProvider(*replies) as fake, client_end(relay_url, sid) as client:
        run_id = await client.prompt("Weather in Lisbon?")
        model = provider.make(fake.base_url, tools=[get_weather])
        await loop(relay_url, sid, run_id, model, tools=[get_weather])
        await client.wait_status(run_id, "complete")
    first, second = fake.exchanges
    assert "get_weather" in str(first.body["tools"])
    [(call_id, output)] = provider.tool_results(second.body)
    assert call_id == "call_1" and '"temp": 21' in output
    call = reply_of(client, run_id).parts
    assert any(getattr(p, "input", None) == {"city": "Lisbon"} for p in call)
    assert client.response_texts(run_id)[-1] == "Lisbon in spring is lovely."


async def test_a_tool_that_asks_for_approval_pauses_the_run_until_answered(
    relay_url: str, provider: Provider
) -> None:
    sid = f"{provider.name}-approval"

    agent = Agent(relay_url, durable=True)
    tool_sse = f"{provider.name}_tool.sse"
    async with FakeProvider(Reply(tool_sse), Reply(f"{provider.name}_text.sse")) as fake:
        # The recorded stream calls get_weather: the tool is offered under that name.
        approved = dataclasses.replace(get_weather_approved, name="get_weather")
        model = provider.make(fake.base_url, tools=[approved])

        @agent.on_run
        async def handle(run: Run) -> None:
            await steering_loop(run, model, tools=[approved])

        async with agent, client_side.connect(relay_url, sid) as session:
            run = await session.send("Weather in Lisbon?")
            with anyio.fail_after(15):
                paused = await run.result()
            [question] = paused.interrupts
            assert (question.id, question.kind) == ("call_1", "approval")
            await session.resume(run.run_id, {"call_1": {"approved": True}})
            with anyio.fail_after(15):
                while run.status != "complete":
                    await session._wait_change()
    assert len(fake.exchanges) == 2
    [(_, output)] = provider.tool_results(fake.exchanges[1].body)
    assert '"temp": 22' in output
