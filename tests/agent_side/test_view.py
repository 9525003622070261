"""The agent's views: ``session.view`` is the View both SDKs share, ``run.view`` filters it."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import agent_side
import client_side
from agent_side import AgentSession
from transport._tree import MessageEvent, RunEvent
from transport.frames import Attach, Attached

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


class ScriptedConn:
    """Stands in for the link's ``Connection``: each request gets the next scripted reply."""

    def __init__(self, replies: list[Attached]) -> None:
        self.replies = replies
        self.sent: list[Any] = []
        self.client_id = "agent-1"

    async def request(self, frame: Any, *, wait_ready: bool = True) -> Attached:
        self.sent.append(frame)
        return self.replies.pop(0)


class ScriptedLink:
    def __init__(self, conn: ScriptedConn) -> None:
        self.conn = conn


def prompt(serial: int, message_id: str, run_id: str) -> dict[str, Any]:
    return {
        "serial": serial,
        "kind": "message",
        "id": message_id,
        "run_id": run_id,
        "intent": "prompt",
        "message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "hi"}]},
    }


def attached(entries: list[dict[str, Any]], head: int, epoch: str, reset: bool) -> Attached:
    return Attached(
        req=1, session_id="s", epoch=epoch, head=head, entries=entries, has_older=False, reset=reset
    )


async def test_an_agents_view_rebuilds_on_a_new_epoch_as_a_clients_does() -> None:
    conn = ScriptedConn(
        [
            attached([prompt(5, "old", "r1")], head=5, epoch="E1", reset=False),
            attached([prompt(1, "new", "r2")], head=1, epoch="E2", reset=True),
        ]
    )
    session = AgentSession(ScriptedLink(conn), "s")  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    session.view.on("message", lambda e: seen.append((e.op, e.message.message.id)))
    session.view.on("run", lambda e: seen.append((e.op, e.run.run_id)))
    await session.port.attach()
    assert session.port.attached.is_set()
    await session.port.attach()
    resume = conn.sent[1]
    assert isinstance(resume, Attach) and (resume.from_serial, resume.epoch) == (5, "E1")
    assert [vm.message.id for vm in session.view.messages()] == ["new"]
    assert ("removed", "old") in seen and ("removed", "r1") in seen
    assert (session.epoch, session.last_serial) == ("E2", 1)
