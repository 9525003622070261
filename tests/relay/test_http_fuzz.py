"""Hypothesis throws arbitrary HTTP requests at a live relay (memory and SQLite): every one
gets a well-formed response with a stable error code, and a session others use is untouched."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay
from relay._http_api import STATUS
from relay.auth import mint_token

from .test_fuzz import json_values

pytestmark = pytest.mark.anyio

SECRET = "http-fuzz-secret-" + "0123456789abcdef" * 3
ALL = ["subscribe", "publish", "steer", "cancel"]
CODES = set(STATUS) | {"INTERRUPT_ANSWER_INVALID", "CANCEL_DENIED"}

good_token = mint_token(user="fuzzer", sessions={"fuzz*": ALL}, secret=SECRET)
tokens = st.sampled_from(
    [
        None,
        good_token,
        mint_token(user="fuzzer", sessions={"fuzz*": ALL}, secret=SECRET, ttl=-10),  # expired
        mint_token(user="fuzzer", sessions={"*": ALL}, secret="forged-" + SECRET),
        mint_token(user="fuzzer", sessions={"fuzz*": ["subscribe"]}, secret=SECRET),
        good_token[:-3] + "abc",
        "not.a.jwt",
        "Basic x",
    ]
)
session_ids = st.sampled_from(["fuzz", "fuzz:1", "fuzz-" + "x" * 195, "shared", "", "a b"]) | (
    st.text(max_size=12).map(lambda t: quote(t, safe=""))
)
run_ids = st.sampled_from(["r1", "nope", "%FF", "a%2Fb", "x" * 201]) | st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#%"),
    min_size=1,
    max_size=10,
)
numbers = (
    st.integers(-(2**70), 2**70).map(str)
    | st.sampled_from(["", "1e3", "nan", "inf", "0x10", "1_0", "٣", "25.5", "-0", "9" * 40])
    | st.text(max_size=6)
)
positions = numbers | st.builds(
    lambda n, e: f"{n}@{e}", st.integers(0, 10**16), st.text("abcdef0123456789", max_size=20)
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    session = draw(session_ids)
    route = draw(
        st.sampled_from(["messages", "history", "events", "runs/{run}/cancel", "runs/{run}/resume"])
        | st.text(max_size=8)
    )
    path = f"/v1/sessions/{session}/{route.replace('{run}', quote(draw(run_ids), safe='%'))}"
    params = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["before", "from", "limit", "wait", "token", "x"]), positions
            ),
            max_size=3,
        )
    )
    if draw(st.booleans()):
        params.append(("wait", "0"))  # an event stream that would wait answers at once
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params)
    return path + ("?" + query if query else "")


bodies = st.one_of(
    st.none(),
    st.binary(max_size=40),
    json_values.map(orjson.dumps),
    st.fixed_dictionaries(
        {},
        optional={
            "message": st.sampled_from(["hi", ""]) | json_values,
            "message_id": json_values,
            "run_id": st.sampled_from(["r1", "x" * 201]) | json_values,
            "intent": st.sampled_from(["prompt", "steer", "follow_up", "inject", "x"]),
            "multitask": json_values,
            "agent": json_values,
            "client_id": st.sampled_from(["relay", "c", ""]) | json_values,
            "responses": json_values,
            "decline": json_values,
            "reason": json_values,
            "id": json_values,
            "unknown": json_values,
        },
    ).map(orjson.dumps),
    st.just(b'{"message": "' + b"x" * 5000 + b'"}'),  # over max_frame_bytes
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """One raw HTTP request: odd methods, paths, headers, bodies and framing."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "OPTIONS", "HEAD", "DELETE", "BREW"]))
    target = draw(paths()).encode()
    lines = [b"%s %s HTTP/1.1" % (method.encode(), target), b"Host: relay"]
    token = draw(tokens)
    if token is not None:
        lines.append(f"Authorization: Bearer {token}".encode())
    if draw(st.booleans()):
        lines.append(b"Last-Event-ID: " + draw(positions).encode("utf-8")[:40])
    if draw(st.booleans()):
        lines.append(
            b"X-Odd: " + draw(st.binary(max_size=10)).replace(b"\r", b"").replace(b"\n", b"")
        )
    body = draw(bodies)
    framing = draw(st.sampled_from(["length", "chunked", "short", "none"]))
    if body is None or framing == "none":
        return b"\r\n".join(lines) + b"\r\n\r\n"
    if framing == "chunked":
        lines.append(b"Transfer-Encoding: chunked")
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7])
            for i in range(0, len(body), 7)
        )
        return b"\r\n".join(lines) + b"\r\n\r\n" + chunks + b"0\r\n\r\n"
    declared = len(body) if framing == "length" else len(body) // 2  # "short": bytes left over
    lines.append(b"Content-Length: %d" % declared)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` and nothing more (a half-close), and read every answer until the relay
    closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def check_response(request: bytes, raw: bytes) -> None:
    """A whole HTTP response; an error is JSON with a known code, never a fault of the relay's.
    Bytes left over after the request (a short ``Content-Length``) may get a second
    response after the first: the first must end where its ``Content-Length`` says."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 "), (request, raw)
    status = int(head.split(b" ", 2)[1])
    headers = dict(
        line.decode("latin-1").lower().split(": ", 1) for line in head.split(b"\r\n")[1:]
    )
    # The answer to HEAD is a head without a body (unless the request line was unreadable).
    is_head = request.startswith(b"HEAD ") and (not body or body.startswith(b"HTTP/1.1 "))
    if "content-length" in headers:
        length = 0 if is_head else int(headers["content-length"])
        body, after = body[:length], body[length:]
        assert len(body) == length, (request, raw)
        assert not after or after.startswith(b"HTTP/1.1 "), (request, raw)
    assert status < 500, (request, raw)
    if status >= 400 and not is_head and request.split(b" ", 2)[1].startswith(b"/v1/"):
        error = json.loads(body)["error"]
        assert error["code"] in CODES, (request, error)
        assert isinstance(error["message"], str) and isinstance(error["details"], dict)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_arbitrary_http_requests_are_answered_and_disturb_no_one(
    store: str, tmp_path: Path
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'fuzz.db'}"
    async with relay.serve(port=0, store=url, secret=SECRET, max_frame_bytes=4000) as server:
        bystander = mint_token(user="bob", sessions={"shared": ALL}, secret=SECRET)
        head = (
            b"POST /v1/sessions/shared/messages HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer %s\r\n"
            % (bystander.encode())
        )
        published: list[int] = []

        async def publish() -> None:
            body = orjson.dumps({"message": f"m{len(published)}"})
            raw = await anyio.to_thread.run_sync(
                exchange, server.port, head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            reply = json.loads(raw.partition(b"\r\n\r\n")[2])
            published.append(reply["serial"])

        @settings(
            max_examples=60,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(requests())
        def check(request: bytes) -> None:
            anyio.from_thread.run(exercise, request)

        async def exercise(request: bytes) -> None:
            check_response(request, await anyio.to_thread.run_sync(exchange, server.port, request))
            await publish()  # someone else's session carries on, serial after serial

        with anyio.fail_after(60):
            await anyio.to_thread.run_sync(check)
            assert published == list(range(1, len(published) + 1))
            get = b"GET /v1/sessions/shared/history?limit=1000 HTTP/1.1\r\nHost: r\r\n%s\r\n"
            auth = b"Authorization: Bearer %s\r\n" % bystander.encode()
            raw = await anyio.to_thread.run_sync(exchange, server.port, get % auth)
        page: dict[str, Any] = json.loads(raw.partition(b"\r\n\r\n")[2])
        assert [e["serial"] for e in page["entries"]] == published
        assert [e["message"]["parts"][0]["text"] for e in page["entries"]] == [
            f"m{i}" for i in range(len(published))
        ]
