"""``examples/steering_agent.py``: the hand-written seed loop reacts to steering and cancels."""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from .helpers import ClientEnd, client_end

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "steering_agent.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("steering_agent_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripted_model_answers_what_was_asked() -> None:
    example = load_example()
    assert example.script("Plan a 3-day trip").startswith("Here is a 3-day plan. Day 1:")
    five = example.script("Make it 5 days, and keep it under £800.")
    assert "Day 5:" in five and "Day 6" not in five and five.endswith("Kept under £800.")


async def steer_after_first_tokens(client: ClientEnd, run_id: str) -> str:
    await client.wait_for(lambda: bool(client.of(run_id, "response_append")))
    return await client.steer(run_id, "Make it 5 days, and keep it under £800.")


async def test_the_example_worker_is_steered_mid_answer(relay_url: str) -> None:
    example = load_example()
    agent = example.build_agent(relay_url, delay=0.05)
    async with client_end(relay_url, "example") as client, agent:
        run_id = await client.prompt("Plan a 3-day trip to Lisbon.")
        steer_id = await steer_after_first_tokens(client, run_id)
        await client.wait_status(run_id, "complete")
    first, second = client.response_texts(run_id)
    full_first = example.script("Plan a 3-day trip to Lisbon.")
    assert full_first.startswith(first) and first != full_first  # cut short by the steer
    assert second == example.script("Make it 5 days, and keep it under £800.")
    outcome = client.tree.outcome(steer_id)
    assert outcome is not None and outcome.consumed


async def test_the_example_worker_honours_a_cancel(relay_url: str) -> None:
    example = load_example()
    agent = example.build_agent(relay_url, delay=0.05)
    async with client_end(relay_url, "example-cancel") as client, agent:
        run_id = await client.prompt("Plan a 7-day trip.")
        await client.wait_for(lambda: bool(client.of(run_id, "response_append")))
        await client.cancel(run_id)
        await client.wait_status(run_id, "cancelled")
    (text,) = client.response_texts(run_id)
    assert "Day 7" not in text


async def test_the_example_runs_from_the_command_line(relay_url: str) -> None:
    command = [sys.executable, str(EXAMPLE), "--url", relay_url, "--delay", "0.001"]
    async with await anyio.open_process(command) as process:
        try:
            async with client_end(relay_url, "example-cli") as client:
                run_id = await client.prompt("Plan a 2-day trip.")
                await client.wait_status(run_id, "complete", timeout=30)
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(10):
                await process.wait()
    example = load_example()
    assert client.response_texts(run_id) == [example.script("Plan a 2-day trip.")]
