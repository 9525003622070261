"""A relay on a loopback port, and the three providers' adapters pointed at a fake provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

import relay
from agent_side._loop import Model
from agent_side.models.anthropic import anthropic_model
from agent_side.models.openai_chat import openai_chat_model
from agent_side.models.openai_responses import openai_responses_model


@pytest.fixture
async def relay_url() -> AsyncIterator[str]:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        yield server.url


@dataclass(frozen=True)
class Provider:
    """One provider's adapter, and how to read what it sent."""

    name: str
    make: Callable[..., Model]
    """``make(base_url, tools=...)``: the adapter's model, its client aimed at ``base_url``."""
    last_user_text: Callable[[Any], str]
    """The text of the last user turn of a request body."""
    tool_results: Callable[[Any], list[tuple[str, str]]]
    """``(call id, output)`` of every tool result in a request body."""


SYSTEM = "Be brief."


def _openai(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="test-key", base_url=f"{base_url}/v1", max_retries=0)


def _chat_last_user(body: Any) -> str:
    user = [m for m in body["messages"] if m["role"] == "user"][-1]
    return str(user["content"])


def _responses_last_user(body: Any) -> str:
    user = [m for m in body["input"] if m.get("role") == "user"][-1]
    return str(user["content"])


def _anthropic_last_user(body: Any) -> str:
    last = body["messages"][-1]
    assert last["role"] == "user"
    return "".join(b.get("text", "") for b in last["content"] if b["type"] == "text")


PROVIDERS = [
    Provider(
        "openai_chat",
        lambda url, **kw: openai_chat_model(_openai(url), "gpt-test", system="Be brief.", **kw),
        _chat_last_user,
        lambda body: [
            (m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"
        ],
    ),
    Provider(
        "openai_responses",
        lambda url, **kw: openai_responses_model(
            _openai(url), "gpt-test", system="Be brief.", **kw
        ),
        _responses_last_user,
        lambda body: [
            (i["call_id"], i["output"])
            for i in body["input"]
            if i.get("type") == "function_call_output"
        ],
    ),
    Provider(
        "anthropic",
        lambda url, **kw: anthropic_model(
            AsyncAnthropic(api_key="test-key", base_url=url, max_retries=0),
            "claude-test",
            system=SYSTEM,
            **kw,
        ),
        _anthropic_last_user,
        lambda body: [
            (b["tool_use_id"], b["content"])
            for m in body["messages"]
            if m["role"] == "user"
            for b in m["content"]
            if b["type"] == "tool_result"
        ],
    ),
]


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    return request.param  # type: ignore[no-any-return]
