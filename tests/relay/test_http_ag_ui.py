"""``GET /v1/sessions/{id}/events?format=ag-ui``: the event stream as AG-UI events
(``transport.agui``), unnamed ``data:`` events an AG-UI client reads as they are, resumable by
the same last event id as the entry stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

import relay
from relay import Server
from transport import agui

from .test_http_api import at, call, cancel, events, post

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with relay.serve(port=0, store="memory://", agent_grace=0.3) as s:
        yield s


async def test_the_stream_as_ag_ui_events_is_the_mapping_of_its_entries(server: Server) -> None:
    first = await post(server, "trip-9", {"message": "Plan a trip."})
    run_id = first.json()["run_id"]
    await cancel(server, "trip-9", run_id, {"reason": "changed my mind"})
    await post(server, "trip-9", {"message": "And Porto?"})
    history = await call(server, "GET", "/v1/sessions/trip-9/history")
    entries = history.json()["entries"]
    _, found, left = await events(server, "trip-9", "from=0&format=ag-ui")
    assert all(e.event == "message" for e in found), "unnamed events: EventSource's message"
    got = [json.loads(e.data) for e in found]
    assert got == agui.session_events(entries, "trip-9")
    kinds = [(e["type"], e.get("name")) for e in got]
    assert ("TEXT_MESSAGE_START", None) in kinds and ("CUSTOM", "runwire.cancel") in kinds
    assert got[0]["role"] == "user" and got[1]["delta"] == "Plan a trip."
    # Each entry's last event carries its serial; the stream ends at the head, with the epoch.
    ids = [int(e.id) for e in found if e.id is not None]
    assert ids == sorted(ids) and ids[-1] == entries[-1]["serial"]
    assert at(left) == entries[-1]["serial"]
    # Resuming from an entry gives only what came after it.
    _, rest, _ = await events(server, "trip-9", "format=ag-ui", last_id=str(entries[0]["serial"]))
    assert [json.loads(e.data) for e in rest] == agui.session_events(entries[1:], "trip-9")


async def test_an_unknown_format_is_refused(server: Server) -> None:
    reply = await call(server, "GET", "/v1/sessions/trip-9/events?format=xml&wait=0")
    assert reply.status == 400
    assert reply.code == "VALIDATION_ERROR"
