"""The agent's views: ``session.view`` is the View both SDKs share, ``run.view`` filters it."""

from __future__ import annotations

import anyio
import pytest

import agent_side
import client_side
from transport.tree import MessageEvent, RunEvent

from .helpers import client_end

pytestmark = pytest.mark.anyio


def test_both_sdks_export_the_same_view_class() -> None:
    assert agent_side.View is client_side.View
    for name in ("messages", "runs", "has_older", "load_older", "on", "events", "branches"):
        assert hasattr(agent_side.RunView, name), name
    assert hasattr(agent_side.RunView, "select_branch")


async def test_the_agents_view_has_an_events_iterator(relay_url: str) -> None:
    async with client_end(relay_url, "agent-events") as client:
        first = await client.prompt("first")
        async with agent_side.connect(relay_url, "agent-events") as session:
            stream = session.view.events()
            run = session.create_run(first)
            await run.start()
            await run.end()
            await client.wait_status(first, "complete")
            statuses: list[str] = []
            with anyio.fail_after(10):
                async for event in stream:
                    if isinstance(event, RunEvent) and event.run.run_id == first:
                        statuses.append(event.run.status)
                        if event.run.status == "complete":
                            break
            assert statuses == ["active", "complete"]

            # A Run prompted while the stream is open is reported too: the Run, then its prompt.
            second = await client.prompt("second", run_id="run-second")
            kinds: list[tuple[str, str]] = []
            with anyio.fail_after(10):
                async for event in stream:
                    if isinstance(event, RunEvent) and event.run.run_id == second:
                        kinds.append(("run", event.run.status))
                    elif isinstance(event, MessageEvent) and event.message.run_id == second:
                        kinds.append(("message", event.message.message.text()))
                        break
            assert kinds == [("run", "pending"), ("message", "second")]
            await stream.aclose()


async def test_a_runs_view_filters_the_sessions_view_to_its_turn(relay_url: str) -> None:
    async with client_end(relay_url, "run-view") as client:
        one = await client.prompt("one", run_id="run-one")
        two = await client.prompt("two", run_id="run-two")  # alongside: after one's prompt
        async with agent_side.connect(relay_url, "run-view") as session:
            run = session.create_run(one)
            assert isinstance(run.view, agent_side.RunView)
            texts = [vm.message.text() for vm in session.view.messages()]
            assert texts == ["one", "two"]
            assert [vm.message.text() for vm in run.view.messages()] == ["one"]
            assert [info.run_id for info in run.view.runs()] == [one, two]
            assert run.view.has_older() is session.view.has_older()
            assert run.view.branches(run.view.messages()[0].message.id)
