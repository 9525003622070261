"""The provider examples, run from the command line against the fake provider and a live relay."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from ..agent_side.helpers import client_end
from .fake_provider import FakeProvider, Reply

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = [
    # example, its SSE files, the environment that points its SDK at the fake provider
    ("openai_agent.py", "openai_chat", "OPENAI_BASE_URL", "{url}/v1", "gpt-test"),
    ("anthropic_agent.py", "anthropic", "ANTHROPIC_BASE_URL", "{url}", "claude-test"),
    ("pydantic_ai_agent.py", "openai_responses", "OPENAI_BASE_URL", "{url}/v1", "openai:gpt-test"),
]


@pytest.mark.parametrize(("example", "sse", "variable", "base", "model"), CASES)
async def test_the_example_answers_with_a_tool_round_through_a_live_relay(
    relay_url: str, example: str, sse: str, variable: str, base: str, model: str
) -> None:
    replies = (Reply(f"{sse}_tool.sse"), Reply(f"{sse}_text.sse"))
    async with FakeProvider(*replies) as fake:
        env = {
            **os.environ,
            "OPENAI_API_KEY": "test-key",
            "ANTHROPIC_API_KEY": "test-key",
            variable: base.format(url=fake.base_url),
        }
        command = [sys.executable, str(EXAMPLES / example), "--url", relay_url, "--model", model]
        async with await anyio.open_process(command, env=env) as process:
            try:
                async with client_end(relay_url, f"example-{example}") as client:
                    run_id = await client.prompt("Weather in Lisbon?")
                    await client.wait_status(run_id, "complete", "error", timeout=30)
            finally:
                process.send_signal(signal.SIGINT)
                with anyio.fail_after(10):
                    await process.wait()
    info = client.tree.run(run_id)
    assert info is not None and info.status == "complete", [e.body for e in fake.exchanges]
    assert client.response_texts(run_id)[-1] == "Lisbon in spring is lovely."
    first, second = fake.exchanges
    assert "get_weather" in str(first.body)
    assert "temp_c" in str(second.body)  # the tool's result went back to the model
