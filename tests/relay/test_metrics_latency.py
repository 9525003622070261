"""Latency histograms, Runs by end, process metrics; every metric the Grafana dashboard uses."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import relay
from agent_side import Agent, Run
from relay.store._base import Store
from tests.agent_side.helpers import client_end
from transport.errors import RunwireError

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "runwire-dashboard.json"


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text


def sample(text: str, name: str) -> float:
    """The value of the sample named exactly ``name`` (with its labels, if any)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in /metrics")


async def scrape_after_runs(store: str | Store = "memory://") -> str:
    """Three Runs (complete, failed, steered) and a refused steer; then ``/metrics``."""
    async with (
        relay.serve(host="127.0.0.1", port=0, store=store) as server,
        client_end(server.url, "measured") as client,
    ):
        agent = Agent(server.url)
        steered = anyio.Event()

        @agent.on_run
        async def handle(run: Run) -> None:
            text = run.messages[-1].text()
            if text == "fail":
                raise RuntimeError("the model is down")
            if text == "wait for a steer":
                await run.start()
                await steered.wait()

            async def reply() -> AsyncIterator[str]:
                yield "fine"

            await run.pipe(reply())

        async with agent:
            ok = await client.prompt("hello")
            await client.wait_status(ok, "complete", "error")
            failed = await client.prompt("fail")
            await client.wait_status(failed, "complete", "error")
            steer_me = await client.prompt("wait for a steer")
            await client.wait_status(steer_me, "active")
            await client.steer(steer_me, "shorter")
            steered.set()
            await client.wait_status(steer_me, "complete", "error")
            with pytest.raises(RunwireError):
                await client.steer("no-such-run", "hello?")
        return await anyio.to_thread.run_sync(get, server.http_url + "/metrics")


async def test_latency_histograms_runs_by_end_and_process_metrics() -> None:
    text = await scrape_after_runs()
    # Three prompts, a steer and the agent's entries were published and acknowledged.
    assert sample(text, "runwire_publish_ack_seconds_count") >= 4
    assert sample(text, "runwire_publish_deliver_seconds_count") >= 4
    assert sample(text, "runwire_steer_dispatch_seconds_count") == 1
    assert sample(text, "runwire_run_duration_seconds_count") == 3
    assert sample(text, 'runwire_runs_ended_total{code="",status="complete"}') == 2
    assert sample(text, 'runwire_runs_ended_total{code="AGENT_ERROR",status="error"}') == 1
    assert sample(text, "process_cpu_seconds_total") > 0
    assert sample(text, "process_resident_memory_bytes") > 0
    assert "python_info{" in text
