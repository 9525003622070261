"""pydantic-ai and the OpenAI Agents SDK, each over the fake provider, inside Runs on a relay."""

from __future__ import annotations

import socket
from typing import Any

import anyio
import pytest
from agents import Agent as AgentsAgent
from agents import OpenAIResponsesModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import agent_side
from agent_side import steering_loop
from agent_side.models.openai_agents import openai_agents_model
from agent_side.models.pydantic_ai import pydantic_ai_model, to_pydantic_ai_history
from transport.messages import TextPart, ToolCallPart, ToolResultPart, UIMessage, user_message

from ..agent_side.helpers import client_end
from .fake_provider import FakeProvider, Reply

pytestmark = pytest.mark.anyio

set_tracing_disabled(True)  # the Agents SDK would export traces to OpenAI: no network here


def _openai(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="test-key", base_url=f"{url}/v1", max_retries=0)


def pydantic_agent(url: str) -> PydanticAgent[None, str]:
    model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=_openai(url)))
    return PydanticAgent(model, instructions="Be brief.")


async def run_loop(relay_url: str, sid: str, run_id: str, model: Any) -> None:
    async with agent_side.connect(relay_url, sid) as session:
        run = session.create_run(run_id)
        with anyio.fail_after(15):
            await steering_loop(run, model)


async def test_pydantic_ai_streams_a_reply_into_the_run(relay_url: str) -> None:
    async with (
        FakeProvider(Reply("openai_chat_text.sse")) as fake,
        client_end(relay_url, "pai-text") as client,
    ):
        run_id = await client.prompt("Tell me about Lisbon")
        await run_loop(
            relay_url, "pai-text", run_id, pydantic_ai_model(pydantic_agent(fake.base_url))
        )
        await client.wait_status(run_id, "complete")
    assert client.response_texts(run_id) == ["Lisbon in spring is lovely."]
    sent = fake.exchanges[0].body["messages"]
    assert sent[-1] == {"role": "user", "content": "Tell me about Lisbon"}


async def test_pydantic_ai_with_its_provider_unreachable_ends_the_run_error(relay_url: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = pydantic_ai_model(pydantic_agent(f"http://127.0.0.1:{port}"))
    async with client_end(relay_url, "pai-down") as client:
        run_id = await client.prompt("hello")
        await run_loop(relay_url, "pai-down", run_id, model)
        await client.wait_status(run_id, "error")
    info = client.tree.run(run_id)
    assert info is not None and info.error is not None
    assert "Connection" in info.error["message"]


def test_the_conversation_becomes_pydantic_ai_history_with_the_last_user_turn_as_prompt() -> None:
    messages = [
        user_message("Weather?", id="u1"),
        UIMessage(
            id="a1",
            role="assistant",
            parts=[
                ToolCallPart(tool_call_id="c1", tool_name="get_weather", input={"city": "Lisbon"}),
                ToolResultPart(tool_call_id="c1", tool_name="get_weather", output={"temp": 21}),
                TextPart(text="Warm."),
            ],
        ),
        user_message("And tomorrow?", id="u2"),
    ]
    prompt, history = to_pydantic_ai_history(messages)
    assert prompt == "And tomorrow?"
    kinds = [(m.kind, [p.part_kind for p in m.parts]) for m in history]
    assert kinds == [
        ("request", ["user-prompt"]),
        ("response", ["tool-call"]),
        ("request", ["tool-return"]),
        ("response", ["text"]),
    ]


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 21C"


async def test_openai_agents_runs_its_tool_and_streams_the_answer(relay_url: str) -> None:
    replies = (Reply("openai_responses_tool.sse"), Reply("openai_responses_text.sse"))
    async with FakeProvider(*replies) as fake, client_end(relay_url, "oa-tools") as client:
        agent = AgentsAgent(
            name="assistant",
            instructions="Be brief.",
            model=OpenAIResponsesModel(model="gpt-test", openai_client=_openai(fake.base_url)),
            tools=[get_weather],
        )
        run_id = await client.prompt("Weather in Lisbon?")
        await run_loop(relay_url, "oa-tools", run_id, openai_agents_model(agent))
        await client.wait_status(run_id, "complete")
    [reply] = [vm.message for vm in client.tree.messages() if vm.message.role == "assistant"]
    results = [p for p in reply.parts if isinstance(p, ToolResultPart)]
    assert [(r.tool_call_id, r.output) for r in results] == [("call_1", "Lisbon: 21C")]
    assert reply.text() == "Lisbon in spring is lovely."
    assert reply.metadata["usage"] == {"inputTokens": 24, "outputTokens": 10, "totalTokens": 34}
    second = fake.exchanges[1].body["input"]
    assert any(i.get("type") == "function_call_output" for i in second)
