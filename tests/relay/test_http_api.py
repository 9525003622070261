"""The relay's HTTP API over real loopback HTTP: every route, tokens, error codes and statuses,
idempotent publishing, and the resumable event stream (``Last-Event-ID``)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import pytest

import client_side
import relay
from relay import Server
from relay.auth import mint_token
from transport import checks
from transport.messages import user_message

from ..integration.conductor import Conductor, stack, status, until
from .wire import RawPeer, sized_token

pytestmark = pytest.mark.anyio

SECRET = "http-api-test-secret-" + "0123456789abcdef" * 3
ALL = ["subscribe", "publish", "steer", "cancel"]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def code(self) -> str:
        code = self.json()["error"]["code"]
        assert isinstance(code, str)
        return code


def _request(
    port: int,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    chunked: bool,
) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if chunked:
            assert body is not None
            conn.putrequest(method, path)
            conn.putheader("Transfer-Encoding", "chunked")
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            for i in range(0, len(body), 5):
                part = body[i : i + 5]
                conn.send(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            conn.send(b"0\r\nX-Trailer: yes\r\n\r\n")
        else:
            conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read())
    finally:
        conn.close()


async def call(
    server: Server,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    chunked: bool = False,
) -> Reply:
    """One HTTP request to the relay, from a thread (``http.client``)."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    if data is not None and not chunked:
        sent.setdefault("Content-Type", "application/json")
    return await anyio.to_thread.run_sync(_request, server.port, method, path, data, sent, chunked)


async def post(server: Server, session: str, body: Any, **kw: Any) -> Reply:
    return await call(server, "POST", f"/v1/sessions/{session}/messages", body, **kw)


async def cancel(server: Server, session: str, run_id: str, body: Any = None, **kw: Any) -> Reply:
    return await call(server, "POST", f"/v1/sessions/{session}/runs/{run_id}/cancel", body, **kw)


@dataclass
class Event:
    id: str | None
    event: str
    data: str


def sse(body: bytes) -> tuple[list[Event], int | None, str | None]:
    """Parse an event stream as EventSource does: dispatched events (with data), the retry
    time, and the last event id the stream leaves behind."""
    events: list[Event] = []
    retry: int | None = None
    last_id: str | None = None
    buffer_id: str | None = None
    kind, data = "", []
    for line in body.decode().split("\n"):
        if line == "":
            last_id = buffer_id if buffer_id is not None else last_id
            if data:
                events.append(Event(buffer_id, kind or "message", "\n".join(data)))
            kind, data = "", []
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "id":
            buffer_id = value
        elif field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "retry":
            retry = int(value)
    return events, retry, last_id


async def events(
    server: Server, session: str, query: str = "", *, last_id: str | None = None, **kw: Any
) -> tuple[Reply, list[Event], str | None]:
    headers = {"Last-Event-ID": last_id} if last_id is not None else {}
    reply = await call(
        server, "GET", f"/v1/sessions/{session}/events?{query}", headers=headers, **kw
    )
    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    found, retry, left = sse(reply.body)
    assert retry == relay._http_api.RETRY_MS
    return reply, found, left


def at(last_id: str | None) -> int:
    """The serial of a stream's last event id (``<serial>@<epoch>``; checks the epoch is
    the session's)."""
    assert last_id is not None
    serial, at_sign, epoch = last_id.partition("@")
    assert at_sign and len(epoch) == 16, last_id
    return int(serial)


def serials(found: list[Event]) -> list[int]:
    assert all(e.event == "entry" for e in found)
    out = [json.loads(e.data)["serial"] for e in found]
    assert out == [int(e.id or "") for e in found]
    return out


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with relay.serve(port=0, store="memory://", agent_grace=0.3) as s:
        yield s


@pytest.fixture
async def secured() -> AsyncIterator[Server]:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as s:
        yield s


def token(user: str = "alice", caps: list[str] | None = None, **kw: Any) -> str:
    return mint_token(user=user, sessions={"trip-*": caps or ALL}, secret=SECRET, **kw)


# ------------------------------------------------------------------ messages --


async def test_a_posted_prompt_reaches_a_websocket_client_and_an_agent(server: Server) -> None:
    phone = await RawPeer.open(server.url, client_id="phone")
    await phone.attach("trip-1")
    agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
    assert (await agent.request({"type": "worker", "agent": "planner"}))["type"] == "ack"

    reply = await post(server, "trip-1", {"message": "Plan Lisbon.", "agent": "planner"})
    assert reply.status == 201, reply.body
    got = reply.json()
    assert got["serial"] == 1 and got["duplicate"] is False
    [entry] = await phone.entries(1)
    assert entry["run_id"] == got["run_id"] and entry["id"] == got["message_id"]
    assert entry["message"]["parts"] == [{"type": "text", "text": "Plan Lisbon."}]
    assert (entry["intent"], entry["agent"], entry["client_id"]) == ("prompt", "planner", "http")
    assert "user_id" not in entry  # an anonymous relay stamps no user
    dispatch = await agent.next("dispatch")
    assert (dispatch["session_id"], dispatch["run_id"]) == ("trip-1", got["run_id"])
    assert dispatch["message_id"] == got["message_id"]
    await phone.close()
    await agent.close()


async def test_a_retried_post_answers_the_first_serial_and_run(server: Server) -> None:
    body = {"message": "Plan Lisbon.", "message_id": "m-1"}
    first = await post(server, "trip-1", body)
    again = await post(server, "trip-1", body)  # no run_id: the first one's comes back
    assert (first.status, again.status) == (201, 201)
    assert again.json() == {**first.json(), "duplicate": True}
    message = user_message("Then Porto.", id="m-2").model_dump(mode="json")
    chosen = await post(server, "trip-1", {"message": message, "run_id": "r-2"})
    repeat = await post(server, "trip-1", {"message": message, "run_id": "r-2"})
    assert chosen.json() == {"serial": 2, "run_id": "r-2", "message_id": "m-2", "duplicate": False}
    assert repeat.json()["duplicate"] is True and repeat.json()["serial"] == 2
    page = (await call(server, "GET", "/v1/sessions/trip-1/history")).json()
    assert [e["id"] for e in page["entries"]] == ["m-1", "m-2"]


async def test_steering_over_http_and_the_run_rules_refusals(server: Server) -> None:
    run_id = (await post(server, "trip-1", {"message": "Plan Lisbon."})).json()["run_id"]
    steer = await post(server, "trip-1", {"message": "5 days", "intent": "steer", "run_id": run_id})
    assert steer.status == 201 and steer.json()["run_id"] == run_id
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"message": "x", "intent": "steer"}, 400, "VALIDATION_ERROR"),
        ({"message": "x", "intent": "steer", "run_id": "nope"}, 404, "RUN_NOT_FOUND"),
        ({"message": "x", "run_id": run_id}, 409, "DUPLICATE_RUN"),
        ({"message": "x", "multitask": "reject"}, 409, "THREAD_BUSY"),
        ({"message": "x", "multitask": "sometimes"}, 400, "VALIDATION_ERROR"),
        ({"message": {"id": "m", "role": "robot", "parts": []}}, 400, "VALIDATION_ERROR"),
        ({"message": "x", "message_id": "a", "extra": 1}, 400, "VALIDATION_ERROR"),
        ({"text": "x"}, 400, "VALIDATION_ERROR"),
    ]
    for body, status_code, code in cases:
        reply = await post(server, "trip-1", body)
        assert (reply.status, reply.code) == (status_code, code), (body, reply.body)
    unknown = (await post(server, "trip-1", {"text": "x"})).json()["error"]
    assert unknown["details"]["errors"][0]["loc"] == ["message"]
    page = (await call(server, "GET", "/v1/sessions/trip-1/history")).json()
    assert len(page["entries"]) == 2  # the refusals wrote nothing


async def test_bad_requests_get_json_errors_with_http_statuses(server: Server) -> None:
    path = "/v1/sessions/trip-1/messages"
    not_json = await call(server, "POST", path, raw=b"{nope")
    assert (not_json.status, not_json.code) == (400, "PROTOCOL_ERROR")
    assert "body" in not_json.json()["error"]["message"]
    array = await call(server, "POST", path, raw=b"[1, 2]")
    assert (array.status, array.code) == (400, "PROTOCOL_ERROR")
    empty = await call(server, "POST", path)
    assert (empty.status, empty.code) == (400, "VALIDATION_ERROR")
    bad_session = await post(server, quote("trip 1/x", safe=""), {"message": "x"})
    assert (bad_session.status, bad_session.code) == (400, "VALIDATION_ERROR")
    for route in ("/v1/sessions/trip-1/nothing", "/v1/", "/v1/sessions/trip-1/runs/r/pause"):
        missing = await call(server, "GET", route)
        assert (missing.status, missing.code) == (404, "NOT_FOUND"), route
    wrong = await call(server, "GET", path)
    assert (wrong.status, wrong.code) == (405, "PROTOCOL_ERROR")
    assert wrong.headers["Allow"] == "POST, OPTIONS"
    for query in ("events?limit=0", "events?wait=99", "events?from=-1", "events?wait=soon"):
        reply = await call(server, "GET", f"/v1/sessions/trip-1/{query}")
        assert (reply.status, reply.code) == (400, "VALIDATION_ERROR"), query
    for query in ("history?before=x", "history?limit=1001"):
        reply = await call(server, "GET", f"/v1/sessions/trip-1/{query}")
        assert (reply.status, reply.code) == (400, "VALIDATION_ERROR"), query
    odd_id = await call(server, "GET", "/v1/sessions/trip-1/events", headers={"Last-Event-ID": "x"})
    assert (odd_id.status, odd_id.code) == (400, "VALIDATION_ERROR")
    preflight = await call(server, "OPTIONS", path, headers={"Origin": "http://localhost:5173"})
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    # Other paths take GET only (a body no longer drops the connection).
    assert (await call(server, "POST", "/healthz", raw=b"x")).status == 405
    assert (await call(server, "GET", "/healthz")).status == 200


async def test_a_body_over_max_frame_bytes_is_payload_too_large() -> None:
    async with relay.serve(port=0, store="memory://", max_frame_bytes=2000) as server:
        big = {"message": "x" * 3000}
        reply = await post(server, "trip-1", big)
        assert (reply.status, reply.code) == (413, "PAYLOAD_TOO_LARGE")
        assert reply.json()["error"]["details"]["limit"] == 2000
        chunked = await post(server, "trip-1", big, chunked=True)
        assert (chunked.status, chunked.code) == (413, "PAYLOAD_TOO_LARGE")
        fits = await post(server, "trip-1", {"message": "x" * 1000})
        assert fits.status == 201


def exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes, and nothing more (a half-close: connections stay open between
    requests), and read everything the relay answers until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


async def test_bytes_after_a_request_are_not_read_as_websocket_frames(server: Server) -> None:
    # A Content-Length shorter than the body, or a second request pipelined behind the
    # first: the relay answers the first and ignores the rest (websockets parsed it as
    # frames, failed, and dropped the connection without an answer).
    post = b"POST /v1/sessions/trip-1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    text = b'{"message": "hi", "message_id": "m1"}'
    get = b"GET /v1/sessions/trip-1/history HTTP/1.1\r\nHost: x\r\n\r\n"
    for data in (
        post % len(text) + text + b"\x81\xffjunk",
        post % len(text) + text + get,
        post % (len(text) - 2) + text,
        get + get,
        get + b"\x88\x80" * 4,
    ):
        reply = await anyio.to_thread.run_sync(exchange, server.port, data)
        assert reply.startswith(b"HTTP/1.1 "), (data, reply)
        status = int(reply.split(b" ", 2)[1])
        assert status in (200, 201, 400), (data, reply)
    page = (await call(server, "GET", "/v1/sessions/trip-1/history")).json()
    assert [e["id"] for e in page["entries"]] == ["m1"]


async def test_a_malformed_request_head_gets_an_answer(server: Server) -> None:
    # websockets drops the connection, unanswered, of a request it cannot parse.
    history = b"/v1/sessions/trip-1/history"
    for head, expected, code in (
        (b"GET /v1/x\xff HTTP/1.1\r\n", 404, "NOT_FOUND"),
        (b"GET /v1/sessions/caf\xc3\xa9/history HTTP/1.1\r\n", 400, "VALIDATION_ERROR"),
        (b"GET /v1/sessions/trip-1/history?q=\x01\x7f HTTP/1.1\r\n", 200, None),
        (b"GET " + history + b"\r\n", 400, "PROTOCOL_ERROR"),
        (b"GET  " + history + b" HTTP/1.1\r\n", 400, "PROTOCOL_ERROR"),
        (b"GET " + history + b" HTTP/2\r\n", 400, "PROTOCOL_ERROR"),
        (b"GET " + history + b" HTTP/1.1\r\nX A: b\r\n", 400, "PROTOCOL_ERROR"),
        (b"GET " + history + b" HTTP/1.1\r\nX-A: \x01\r\n", 400, "PROTOCOL_ERROR"),
        (b"GET " + history + b" HTTP/1.1\r\n folded\r\n", 400, "PROTOCOL_ERROR"),
        (b"POST /healthz HTTP/1.1\r\nNo-Colon\r\n", 400, "PROTOCOL_ERROR"),
    ):
        data = head + b"Host: x\r\n\r\n"
        reply = await anyio.to_thread.run_sync(exchange, server.port, data)
        assert reply.startswith(b"HTTP/1.1 %d " % expected), (data, reply)
        if code is not None:
            body = json.loads(reply.partition(b"\r\n\r\n")[2])
            assert body["error"]["code"] == code, (data, body)


async def test_a_chunked_body_is_read(server: Server) -> None:
    reply = await post(server, "trip-1", {"message": "in chunks", "message_id": "c1"}, chunked=True)
    assert reply.status == 201, reply.body
    page = (await call(server, "GET", "/v1/sessions/trip-1/history")).json()
    assert page["entries"][0]["message"]["parts"][0]["text"] == "in chunks"


# -------------------------------------------------------------- cancel/resume --


async def test_cancel_over_http_ends_the_run_for_the_agent_and_every_client() -> None:
    agent = Conductor()
    async with (
        stack(agent) as server,
        client_side.connect(server.url, "trip-1") as phone,
    ):
        reply = await post(server, "trip-1", {"message": "long answer"})
        run_id = reply.json()["run_id"]
        await agent.wait(lambda: run_id in agent.started)
        await until(phone, lambda: status(phone, run_id) == "active")
        # The agent got the prompt posted over HTTP, and the phone sees its answer stream.
        texts = lambda: [vm.message.text() for vm in phone.view.messages()]  # noqa: E731
        await until(phone, lambda: texts() == ["long answer", "long answer: started"])

        stop = await cancel(server, "trip-1", run_id, {"reason": "enough", "id": "c-1"})
        assert stop.status == 202, stop.body
        assert stop.json()["run_id"] == run_id and stop.json()["duplicate"] is False
        await agent.wait(lambda: (run_id, "cancelled") in agent.ended)
        assert agent.requests[0].reason == "enough"
        await until(phone, lambda: status(phone, run_id) == "cancelled")

        again = await cancel(server, "trip-1", run_id, {"id": "c-1"})  # a retry
        assert again.status == 202 and again.json() == {**stop.json(), "duplicate": True}
        late = await cancel(server, "trip-1", run_id)
        assert (late.status, late.code) == (409, "RUN_NOT_ACTIVE")
        missing = await cancel(server, "trip-1", "no-such-run")
        assert (missing.status, missing.code) == (404, "RUN_NOT_FOUND")
        _, found, _ = await events(server, "trip-1", "from=0&wait=0")
        kinds = [(json.loads(e.data)["kind"], json.loads(e.data).get("status")) for e in found]
        assert ("cancel", None) in kinds and kinds[-1] == ("run", "cancelled")


async def test_resume_of_a_run_that_waits_on_nothing_is_refused(server: Server) -> None:
    run_id = (await post(server, "trip-1", {"message": "x"})).json()["run_id"]
    path = f"/v1/sessions/trip-1/runs/{run_id}/resume"
    reply = await call(server, "POST", path, {"responses": {"q#0": 1}})
    assert (reply.status, reply.code) == (400, "VALIDATION_ERROR")
    reply = await call(server, "POST", path, {"responses": "nope"})
    assert (reply.status, reply.code) == (400, "VALIDATION_ERROR")


# ------------------------------------------------------------------- reading --


async def test_history_pages_backwards(server: Server) -> None:
    for i in range(5):
        await post(server, "trip-1", {"message": f"m{i}"})
    newest = (await call(server, "GET", "/v1/sessions/trip-1/history?limit=2")).json()
    assert [e["serial"] for e in newest["entries"]] == [4, 5]
    assert newest["has_older"] is True and newest["head"] == 5 and newest["epoch"]
    older = (await call(server, "GET", "/v1/sessions/trip-1/history?before=4&limit=2")).json()
    assert [e["serial"] for e in older["entries"]] == [2, 3] and older["has_older"] is True
    oldest = (await call(server, "GET", "/v1/sessions/trip-1/history?before=2")).json()
    assert [e["serial"] for e in oldest["entries"]] == [1] and oldest["has_older"] is False
    empty = (await call(server, "GET", "/v1/sessions/trip-2/history")).json()
    assert empty["entries"] == [] and empty["has_older"] is False and empty["head"] == 0


async def test_events_resume_by_last_event_id_with_no_gap_and_no_duplicate(
    server: Server,
) -> None:
    for i in range(5):
        await post(server, "trip-1", {"message": f"m{i}"})
    _, found, left = await events(server, "trip-1", "from=0&limit=3")
    assert serials(found) == [1, 2, 3] and at(left) == 3
    # The header wins over the URL's from=, as when EventSource reconnects.
    _, found, left = await events(server, "trip-1", "from=0&limit=3", last_id=left)
    assert serials(found) == [4, 5] and at(left) == 5

    async with anyio.create_task_group() as tg:
        result: list[tuple[list[Event], str | None, float]] = []

        async def poll() -> None:
            started = time.monotonic()
            _, got, last = await events(server, "trip-1", "wait=10", last_id="5")
            result.append((got, last, time.monotonic() - started))

        tg.start_soon(poll)
        await anyio.sleep(0.3)  # it waits: nothing after serial 5 yet
        assert not result
        await post(server, "trip-1", {"message": "m5"})
    [(got, last, took)] = result
    assert serials(got) == [6] and at(last) == 6 and took < 5

    # A reader that reconnects with each response's last id while entries keep coming
    # sees every serial once, in order.
    seen: list[int] = []
    async with anyio.create_task_group() as tg:

        async def publish() -> None:
            for i in range(30):
                await post(server, "trip-1", {"message": f"n{i}"})

        tg.start_soon(publish)
        position = "0"
        with anyio.fail_after(30):
            while len(seen) < 36:
                _, got, left = await events(server, "trip-1", "limit=4&wait=5", last_id=position)
                seen.extend(serials(got))
                assert left is not None
                position = left
    assert seen == list(range(1, 37))


async def test_events_without_a_position_start_at_the_head(server: Server) -> None:
    await post(server, "trip-1", {"message": "old"})
    await post(server, "trip-1", {"message": "older"})
    started = time.monotonic()
    _, found, left = await events(server, "trip-1", "wait=0.3")
    assert found == [] and at(left) == 2 and time.monotonic() - started >= 0.25
    await post(server, "trip-1", {"message": "new"})
    _, found, _ = await events(server, "trip-1", "wait=0", last_id=left)
    assert serials(found) == [3]


async def test_a_position_the_channel_cannot_continue_from_gets_a_reset(server: Server) -> None:
    await post(server, "trip-1", {"message": "a"})
    await post(server, "trip-1", {"message": "b"})
    _, found, left = await events(server, "trip-1", "wait=0", last_id="41")
    assert found[0].event == "reset"
    assert json.loads(found[0].data)["head"] == 2
    assert serials(found[1:]) == [1, 2] and at(left) == 2


async def test_a_position_in_a_history_the_relay_lost_gets_a_reset_even_below_the_head() -> None:
    """The stream's ids carry the history's epoch: a relay that lost it (here a relay on the
    memory store, restarted) resets a stream resuming from it, even from a serial its new
    history also has, instead of going on with entries of another history."""
    async with relay.serve(port=0, store="memory://") as before:
        for n in range(3):
            await post(before, "trip-1", {"message": f"old-{n}"})
        _, found, left = await events(before, "trip-1", "from=0&wait=0")
        assert serials(found) == [1, 2, 3] and at(left) == 3
    async with relay.serve(port=0, store="memory://") as after:
        for n in range(5):
            await post(after, "trip-1", {"message": f"new-{n}"})
        for query, last_id in (("wait=0", left), (f"from={left}&wait=0", None)):
            _, found, again = await events(after, "trip-1", query, last_id=last_id)
            assert found[0].event == "reset", query
            assert serials(found[1:]) == [1, 2, 3, 4, 5] and at(again) == 5
        # The old form, a bare serial, is still taken (without a check of the history).
        _, found, _ = await events(after, "trip-1", "wait=0", last_id="3")
        assert serials(found) == [4, 5]
        _, found, _ = await events(after, "trip-1", "wait=0", last_id=again)
        assert found == []


async def test_waiting_for_events_pins_no_session(server: Server) -> None:
    await post(server, "trip-1", {"message": "a"})
    assert "trip-1" not in server.hub.channels  # a publish holds it only while it lasts
    result: list[Reply] = []

    async def poll() -> None:
        result.append(await call(server, "GET", "/v1/sessions/trip-1/events?from=1&wait=0.5"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        with anyio.fail_after(5):
            while "trip-1" not in server.hub.channels:
                await anyio.sleep(0.01)
        channel = server.hub.channels["trip-1"]
        assert channel.holds == 1 and len(channel.listeners) == 1
    assert sse(result[0].body)[0] == []
    assert channel.holds == 0 and channel.listeners == []
    assert "trip-1" not in server.hub.channels  # released once the wait ended


async def test_a_waiting_request_is_answered_when_the_relay_stops() -> None:
    result: list[Reply] = []
    async with anyio.create_task_group() as tg:
        async with relay.serve(port=0, store="memory://") as server:

            async def poll() -> None:
                result.append(await call(server, "GET", "/v1/sessions/trip-1/events?wait=25"))

            tg.start_soon(poll)
            with anyio.fail_after(5):
                while "trip-1" not in server.hub.channels:
                    await anyio.sleep(0.01)
            stopping = time.monotonic()
    assert time.monotonic() - stopping < 5
    assert result[0].status == 200 and sse(result[0].body)[0] == []


# -------------------------------------------------------------------- tokens --


async def test_requests_without_a_good_token_are_refused(secured: Server) -> None:
    path = "/v1/sessions/trip-1/messages"
    body = {"message": "x"}
    expired = token(ttl=-10)
    forged = mint_token(user="alice", sessions={"*": ALL}, secret="another-" + SECRET)
    for tok, code, reason in (
        (None, "UNAUTHORIZED", "missing"),
        (forged, "UNAUTHORIZED", "signature"),
        ("not-a-jwt", "UNAUTHORIZED", "malformed"),
        (expired, "TOKEN_EXPIRED", None),
    ):
        reply = await call(secured, "POST", path, body, token=tok)
        assert (reply.status, reply.code) == (401, code), reply.body
        assert reply.json()["error"]["details"].get("reason") == reason
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    for route in ("history", "events?wait=0", "runs/r/cancel", "runs/r/resume"):
        method = "GET" if route[0] in "he" else "POST"
        reply = await call(secured, method, f"/v1/sessions/trip-1/{route}")
        assert (reply.status, reply.code) == (401, "UNAUTHORIZED"), route
    # Nothing was written.
    page = await call(secured, "GET", "/v1/sessions/trip-1/history", token=token())
    assert page.json()["entries"] == []


MAX_TOKEN = 32 * 1024  # RelayOptions.max_token_bytes


async def test_a_large_token_is_accepted_up_to_the_limit_and_refused_clearly_past_it(
    secured: Server,
) -> None:
    # Before, a token over about 8 KiB got websockets' plain-text 414 / 431.
    history = "/v1/sessions/trip-1/history"
    under = sized_token(MAX_TOKEN, secret=SECRET, sessions={"trip-*": ALL})
    assert (await call(secured, "GET", history, token=under)).status == 200
    assert (await call(secured, "GET", f"{history}?token={under}")).status == 200
    for size in (MAX_TOKEN + 3, 10 * MAX_TOKEN):
        over = sized_token(size, secret=SECRET, sessions={"trip-*": ALL})
        for reply in (
            await call(secured, "GET", history, token=over),
            await call(secured, "GET", f"{history}?token={over}"),
            await post(secured, "trip-1", {"message": "x"}, token=over),
        ):
            assert (reply.status, reply.code) == (401, "UNAUTHORIZED"), reply.body[:200]
            details = reply.json()["error"]["details"]
            assert details["reason"] == "too_large" and details["limit"] == MAX_TOKEN
            assert details["size"] >= len(over)
            assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await call(secured, "GET", history, token=under)).json()["entries"] == []


async def test_a_head_line_too_long_gets_a_json_answer(server: Server, secured: Server) -> None:
    # Lines other than the token's keep websockets' limit (8 KiB), answered in JSON now.
    long = "x" * 9000
    reply = await call(secured, "GET", "/v1/sessions/trip-1/history", headers={"X-Junk": long})
    assert (reply.status, reply.code) == (431, "PAYLOAD_TOO_LARGE"), reply.body[:200]
    reply = await call(server, "GET", f"/v1/sessions/trip-1/history?q={long * 5}")
    assert (reply.status, reply.code) == (414, "PAYLOAD_TOO_LARGE"), reply.body[:200]
    details = reply.json()["error"]["details"]
    assert details["size"] > 45000 and details["limit"] > 8192
    # A WebSocket handshake too: refused, with the same answer.
    head = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    key = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    data = head + key + b"X-Junk: " + long.encode() + b"\r\n\r\n"
    raw = await anyio.to_thread.run_sync(exchange, server.port, data)
    assert raw.startswith(b"HTTP/1.1 431 "), raw[:200]
    assert json.loads(raw.partition(b"\r\n\r\n")[2])["error"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_a_token_in_the_query_works_as_for_browsers(secured: Server) -> None:
    tok = token()
    reply = await call(
        secured, "POST", f"/v1/sessions/trip-1/messages?token={tok}", {"message": "x"}
    )
    assert reply.status == 201
    _, found, _ = await events(secured, "trip-1", f"from=0&wait=0&token={tok}")
    assert serials(found) == [1]


async def test_the_identity_is_stamped_from_the_token(secured: Server) -> None:
    alice = token()
    await post(secured, "trip-1", {"message": "a"}, token=alice)
    await post(secured, "trip-1", {"message": "b", "client_id": "bob/backend"}, token=alice)
    pinned = token(client_id="alice-server")
    await post(secured, "trip-1", {"message": "c", "client_id": "x"}, token=pinned)
    page = await call(secured, "GET", "/v1/sessions/trip-1/history", token=alice)
    stamped = [(e["user_id"], e["client_id"]) for e in page.json()["entries"]]
    assert stamped == [
        ("alice", "alice/http"),
        ("alice", "alice/bob/backend"),  # another user's client id is scoped to alice
        ("alice", "alice-server"),
    ]
    relay_id = await post(secured, "trip-1", {"message": "d", "client_id": "relay"}, token=alice)
    assert (relay_id.status, relay_id.code) == (400, "PROTOCOL_ERROR")


async def test_a_missing_capability_is_forbidden(secured: Server) -> None:
    viewer = token("grandma", ["subscribe"])
    writer = token("svc", ["publish"])
    refused = await post(secured, "trip-1", {"message": "hi"}, token=viewer)
    assert (refused.status, refused.code) == (403, "UNAUTHORIZED")
    assert refused.json()["error"]["details"]["needs"] == "publish"
    run_id = (await post(secured, "trip-1", {"message": "hi"}, token=writer)).json()["run_id"]
    for route in ("history", "events?wait=0"):
        reply = await call(secured, "GET", f"/v1/sessions/trip-1/{route}", token=writer)
        assert (reply.status, reply.code) == (403, "UNAUTHORIZED"), route
        assert reply.json()["error"]["details"]["needs"] == "subscribe"
    steer = {"message": "more", "intent": "steer", "run_id": run_id}
    assert (await post(secured, "trip-1", steer, token=writer)).status == 403
    elsewhere = await post(secured, "work-1", {"message": "hi"}, token=token())  # not trip-*
    assert (elsewhere.status, elsewhere.code) == (403, "UNAUTHORIZED")
    # Cancel rights: one's own Runs with cancel, anyone's with cancel-any.
    alice_run = (await post(secured, "trip-1", {"message": "mine"}, token=token())).json()
    bob = await cancel(secured, "trip-1", alice_run["run_id"], token=token("bob"))
    assert (bob.status, bob.code) == (403, "UNAUTHORIZED")
    assert bob.json()["error"]["details"]["needs"] == "cancel-any"
    admin = token("admin", [*ALL, "cancel-any"])
    assert (await cancel(secured, "trip-1", alice_run["run_id"], token=admin)).status == 202
    assert (await cancel(secured, "trip-1", run_id, token=token())).status == 403


async def test_another_users_run_makes_a_strategy_thread_access_denied(secured: Server) -> None:
    await post(secured, "trip-1", {"message": "alice's"}, token=token())
    bob = await post(
        secured, "trip-1", {"message": "bob's", "multitask": "enqueue"}, token=token("bob")
    )
    assert (bob.status, bob.code) == (409, "THREAD_ACCESS_DENIED")
    alongside = await post(secured, "trip-1", {"message": "bob's"}, token=token("bob"))
    assert alongside.status == 201


async def test_an_event_stream_waits_no_longer_than_its_token_lives(secured: Server) -> None:
    # The token is good when the request comes, and expires during its wait: an entry
    # stored after that is not the token's to read (a socket is closed 4003 then).
    short = token(ttl=2)
    writer = token("bob")

    async def publish_late() -> None:
        await anyio.sleep(3.5)
        await post(secured, "trip-9", {"message": "after the expiry"}, token=writer)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(publish_late)
        with anyio.fail_after(10):
            _, found, _ = await events(secured, "trip-9", "from=0&wait=8", token=short)
        assert time.monotonic() - started < 3.4  # it ended at the expiry, not at the entry
    assert found == []
    again = await call(secured, "GET", "/v1/sessions/trip-9/events?from=0&wait=0", token=short)
    assert (again.status, again.code) == (401, "TOKEN_EXPIRED")


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "input-checks"])
async def test_a_repeated_id_tells_nothing_to_a_token_without_the_right(checked: bool) -> None:
    # A token for trip-* posting into work-1 with the message id (or cancel id) of an
    # entry stored there got 201 "duplicate" with that entry's serial and Run: an oracle
    # for any session's ids ("order-1234"), across tenants. Now: 403, as for a new id.
    options: dict[str, Any] = {"input_checks": [checks.pii()]} if checked else {}
    async with relay.serve(port=0, store="memory://", secret=SECRET, **options) as secured:
        owner = mint_token(user="alice", sessions={"work-*": ALL}, secret=SECRET)
        first = await post(
            secured, "work-1", {"message": "x", "message_id": "order-1"}, token=owner
        )
        assert first.status == 201
        run_id = first.json()["run_id"]
        mallory = token("mallory")  # trip-* only
        again = await post(
            secured, "work-1", {"message": "y", "message_id": "order-1"}, token=mallory
        )
        assert (again.status, again.code) == (403, "UNAUTHORIZED"), again.body
        assert run_id.encode() not in again.body
        stop = await cancel(secured, "work-1", run_id, {"id": "stop-1"}, token=owner)
        assert stop.status == 202
        repeat = await cancel(secured, "work-1", run_id, {"id": "stop-1"}, token=mallory)
        assert (repeat.status, repeat.code) == (403, "UNAUTHORIZED")
        # The owner's own retries are still acknowledged as duplicates.
        retry = await post(
            secured, "work-1", {"message": "x", "message_id": "order-1"}, token=owner
        )
        assert (retry.status, retry.json()["duplicate"]) == (201, True)
        retry_stop = await cancel(secured, "work-1", run_id, {"id": "stop-1"}, token=owner)
        assert (retry_stop.status, retry_stop.json()["duplicate"]) == (202, True)
