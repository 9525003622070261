"""The HTTP event stream says ``interrupt-required``, with the questions, when a Run pauses."""

from __future__ import annotations

import json

import pytest

from relay import Server

from .test_http_api import events, post, server  # noqa: F401  (the fixture)
from .wire import RawPeer, run_status

pytestmark = pytest.mark.anyio


async def test_a_pause_on_questions_is_followed_by_an_interrupt_required_event(
    server: Server,  # noqa: F811
) -> None:
    created = await post(server, "trip-1", {"message": "deploy it"})
    run_id = created.json()["run_id"]
    agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
    try:
        await agent.attach("trip-1")
        assert (await agent.publish("trip-1", run_status(run_id, "active")))["type"] == "ack"
        question = {"id": "q1", "reason": "approval", "message": "Deploy to prod?"}
        paused = {"kind": "interrupt", "id": "p1", "run_id": run_id, "status": "paused"}
        ack = await agent.publish("trip-1", {**paused, "interrupts": [question]})
        assert ack["type"] == "ack", ack
    finally:
        await agent.close()
    _, found, _ = await events(server, "trip-1", "from=0")
    kinds = [e.event for e in found]
    assert kinds == ["entry", "entry", "entry", "interrupt-required"], kinds
    required = found[-1]
    assert required.id == found[-2].id  # the paused entry's serial: no event is skipped
    data = json.loads(required.data)
    assert data["run_id"] == run_id and data["serial"] == int(found[-2].id or "")
    [asked] = data["interrupts"]
    assert (asked["id"], asked["message"]) == ("q1", "Deploy to prod?")
