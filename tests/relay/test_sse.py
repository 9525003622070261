"""The event stream that stays open (``relay._sse``): an ``Accept: text/event-stream`` request
gets a chunked response that carries each entry as it is stored, with the ids, resume and
``event: reset`` of the one-response form, until the client or the relay ends it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import h11
import pytest

import relay
from relay import Server

from .test_http_api import Event, call, post, sse
from .wire import RawPeer, run_status

pytestmark = pytest.mark.anyio

SECRET = "sse-test-secret-" + "0123456789abcdef" * 3


class Client:
    """One event-stream request, read with h11 (chunks decoded) as they come."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = h11.Connection(h11.CLIENT)
        self.response: h11.Response | h11.InformationalResponse | None = None
        self.body = b""
        self.ended = False

    async def _next(self) -> Any:
        while True:
            event = self.parser.next_event()
            if event is h11.NEED_DATA:
                self.parser.receive_data(await self.reader.read(65536))
                continue
            return event

    async def head(self) -> h11.Response:
        event = await self._next()
        assert isinstance(event, h11.Response), event
        self.response = event
        return event

    def headers(self) -> dict[str, str]:
        assert self.response is not None
        return {k.decode(): v.decode() for k, v in self.response.headers}

    async def until(self, done: Any) -> tuple[list[Event], int | None, str | None]:
        """Read until ``done(parsed)`` holds for what has come so far."""
        while True:
            parsed = sse(self.body)
            if done(parsed) or self.ended:
                return parsed
            event = await self._next()
            if isinstance(event, h11.Data):
                self.body += bytes(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                self.ended = True


@asynccontextmanager
async def stream(server: Server, path: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    client = Client(reader, writer)
    sent = {"Host": f"127.0.0.1:{server.port}", "Accept": "text/event-stream", **headers}
    request = h11.Request(method="GET", target=path, headers=list(sent.items()))
    writer.write(client.parser.send(request) + client.parser.send(h11.EndOfMessage()))
    try:
        yield client
    finally:
        writer.close()


def entries(events: list[Event]) -> list[int]:
    return [json.loads(e.data)["serial"] for e in events if e.event == "entry"]


async def test_the_stream_stays_open_and_carries_each_entry_as_it_is_stored() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        with anyio.fail_after(30):
            for i in range(3):
                assert (await post(server, "s1", {"message": f"m{i}"})).status == 201
            async with stream(server, "/v1/sessions/s1/events?from=0", {}) as client:
                response = await client.head()
                assert response.status_code == 200
                headers = client.headers()
                assert headers["content-type"] == "text/event-stream; charset=utf-8"
                assert headers["transfer-encoding"] == "chunked"
                assert "connection" not in headers
                got, retry, _ = await client.until(lambda p: len(entries(p[0])) >= 3)
                assert entries(got) == [1, 2, 3] and retry == 25
                for i in range(3, 5):  # later entries, on the same response
                    assert (await post(server, "s1", {"message": f"m{i}"})).status == 201
                got, _, last = await client.until(lambda p: len(entries(p[0])) >= 5)
                assert entries(got) == [1, 2, 3, 4, 5]
                page = (await call(server, "GET", "/v1/sessions/s1/history")).json()
                assert last == f"5@{page['epoch']}"
                assert not client.ended
            # The client hung up: its connection is no longer counted.
            while server.admission.total:
                await anyio.sleep(0.01)


async def test_last_event_id_resumes_and_another_epoch_gets_the_same_reset() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        with anyio.fail_after(30):
            for i in range(4):
                await post(server, "s2", {"message": f"m{i}"})
            epoch = (await call(server, "GET", "/v1/sessions/s2/history")).json()["epoch"]
            resume = {"Last-Event-ID": f"2@{epoch}"}
            async with stream(server, "/v1/sessions/s2/events", resume) as client:
                await client.head()
                got, _, last = await client.until(lambda p: len(entries(p[0])) >= 2)
                assert entries(got) == [3, 4] and last == f"4@{epoch}"
            other = {"Last-Event-ID": "3@anotherhistory"}
            async with stream(server, "/v1/sessions/s2/events", other) as client:
                await client.head()
                got, _, _ = await client.until(lambda p: len(entries(p[0])) >= 4)
                assert got[0].event == "reset" and got[0].id == "0"
                assert json.loads(got[0].data) == {"epoch": epoch, "head": 4, "first": 1}
                assert entries(got) == [1, 2, 3, 4]
                # The one-response form answers the same reset block, byte for byte.
                one = await call(server, "GET", "/v1/sessions/s2/events?wait=0", headers=other)
                assert sse(one.body)[0][0] == got[0]


async def test_refusals_are_whole_json_responses_as_before() -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as server:
        with anyio.fail_after(30):
            async with stream(server, "/v1/sessions/s3/events", {}) as client:
                response = await client.head()
                assert response.status_code == 401
                await client.until(lambda p: False)
                assert json.loads(client.body)["error"]["code"] == "UNAUTHORIZED"
                assert client.headers()["www-authenticate"] == 'Bearer realm="runwire"'
            origin = {"Origin": "https://elsewhere.example"}
            async with stream(server, "/v1/sessions/s3/events", origin) as client:
                response = await client.head()
                assert response.status_code == 403
                await client.until(lambda p: False)
                assert json.loads(client.body)["error"]["details"]["reason"] == "origin"


async def test_the_relay_stopping_ends_the_stream() -> None:
    with anyio.fail_after(30):
        async with AsyncExitStack() as open_client:
            async with relay.serve(port=0, store="memory://") as server:
                client = await open_client.enter_async_context(
                    stream(server, "/v1/sessions/s4/events", {})
                )
                await client.head()
                await client.until(lambda p: p[1] == 25)  # the stream has begun
            # The relay stopped, the client still listens: the body ends properly.
            await client.until(lambda p: False)
            assert client.ended


async def test_a_pause_on_questions_reaches_the_open_stream_as_interrupt_required() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        with anyio.fail_after(30):
            async with stream(server, "/v1/sessions/s5/events?from=0", {}) as client:
                await client.head()
                await client.until(lambda p: p[1] == 25)  # open before anything happens
                run_id = (await post(server, "s5", {"message": "deploy it"})).json()["run_id"]
                agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
                try:
                    await agent.attach("s5")
                    await agent.publish("s5", run_status(run_id, "active"))
                    question = {"id": "q1", "reason": "approval", "message": "Deploy?"}
                    paused = {"kind": "interrupt", "id": "p1", "run_id": run_id}
                    ack = await agent.publish(
                        "s5", {**paused, "status": "paused", "interrupts": [question]}
                    )
                    assert ack["type"] == "ack", ack
                finally:
                    await agent.close()
                got, _, _ = await client.until(
                    lambda p: any(e.event == "interrupt-required" for e in p[0])
                )
                required = got[-1]
                assert required.event == "interrupt-required" and required.id == got[-2].id
                assert json.loads(required.data)["interrupts"][0]["id"] == "q1"


async def test_the_open_stream_speaks_ag_ui_when_asked() -> None:
    from transport import agui

    async with relay.serve(port=0, store="memory://") as server:
        with anyio.fail_after(30):
            assert (await post(server, "ag", {"message": "Plan a trip."})).status == 201
            stored = (await call(server, "GET", "/v1/sessions/ag/history")).json()["entries"]
            want = agui.session_events(stored, "ag")
            path = "/v1/sessions/ag/events?from=0&format=ag-ui"
            async with stream(server, path, {}) as client:
                assert (await client.head()).status_code == 200
                got, _, _ = await client.until(lambda p: len(p[0]) >= len(want))
                assert [json.loads(e.data) for e in got] == want
                assert not client.ended  # it stays open, as the entries stream does
            async with stream(server, "/v1/sessions/ag/events?format=xml", {}) as client:
                assert (await client.head()).status_code == 400
