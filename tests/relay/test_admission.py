"""Memory before authentication is bounded: bodies over the API's limit are refused from their
``Content-Length`` unread, a body without a good token is not read, a request has
``request_timeout`` to arrive, and connections are capped in total and per address."""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

import relay
from relay.auth import mint_token

pytestmark = pytest.mark.anyio

SECRET = "admission-test-secret-" + "0123456789abcdef" * 2
MIB = 1024 * 1024


@contextmanager
def raw(port: int) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        yield sock
    finally:
        sock.close()


def read_response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the relay's first response (read to its
    ``Content-Length``: a connection served stays open for the next request)."""
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head) if sep else None
        if length is not None and len(body) >= int(length[1]):
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data[:200]
    status = int(head.split(b" ")[1])
    return status, json.loads(body) if b"application/json" in head else {"text": body}


async def exchange(port: int, *parts: bytes) -> tuple[int, dict[str, Any]]:
    def go() -> tuple[int, dict[str, Any]]:
        with raw(port) as sock:
            for part in parts:
                sock.sendall(part)
            return read_response(sock)

    with anyio.fail_after(20):
        return await anyio.to_thread.run_sync(go)


def post_head(length: int | None, *, token: str | None = None, chunked: bool = False) -> bytes:
    lines = ["POST /v1/sessions/s-1/messages HTTP/1.1", "Host: relay"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_body_over_the_api_limit_is_refused_from_its_content_length_unread() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        # The head only: the body never comes, and the answer does not wait for it.
        status, body = await exchange(server.port, post_head(2 * MIB))
        assert status == 413
        assert body["error"]["code"] == "PAYLOAD_TOO_LARGE"
        assert body["error"]["details"] == {"size": 2 * MIB, "limit": MIB}


async def test_a_chunked_body_is_cut_off_at_the_limit() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        chunk = b"%x\r\n%s\r\n" % (256 * 1024, b"x" * 256 * 1024)
        # Five chunks of 256 KiB, over 1 MiB, and no last chunk: answered all the same.
        status, body = await exchange(server.port, post_head(None, chunked=True), chunk * 5)
        assert status == 413
        assert body["error"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_a_body_without_a_good_token_is_not_read() -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as server:
        status, body = await exchange(server.port, post_head(500_000))
        assert status == 401
        assert body["error"]["details"]["reason"] == "missing"
        status, body = await exchange(server.port, post_head(500_000, token="x.y.z"))
        assert status == 401
        # With a good token the body is read, and the request served.
        token = mint_token(user="alice", sessions={"s-*": ["publish"]}, secret=SECRET)
        text = json.dumps({"message": "hello"}).encode()
        status, body = await exchange(server.port, post_head(len(text), token=token), text)
        assert status == 201, body


async def test_a_request_that_does_not_arrive_in_time_is_answered_408() -> None:
    async with relay.serve(port=0, store="memory://", request_timeout=0.5) as server:
        half_head = b"GET /healthz HTTP/1.1\r\nHost: rel"
        status, body = await exchange(server.port, half_head)
        assert status == 408
        assert body["error"]["details"] == {"limit": "request_timeout", "value": 0.5}
        half_body = post_head(100) + b'{"message":'
        status, body = await exchange(server.port, half_body)
        assert status == 408
        # A request that arrives in time is served as before, even a slow long-poll.
        status, body = await exchange(
            server.port, b"GET /v1/sessions/s-1/events?wait=1 HTTP/1.1\r\nHost: r\r\n\r\n"
        )
        assert status == 200


async def test_a_head_too_large_is_431() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1200) for i in range(120))
        status, body = await exchange(
            server.port, b"GET /healthz HTTP/1.1\r\nHost: r\r\n" + headers + b"\r\n"
        )
        assert status == 431
        assert body["error"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_connections_over_the_caps_are_refused_and_logged_once_per_burst(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runwire.relay")
    async with relay.serve(port=0, store="memory://", max_connections=3) as server:
        with raw(server.port), raw(server.port), raw(server.port):
            with anyio.fail_after(10):  # three stalled connections, counted
                while server.admission.total < 3:
                    await anyio.sleep(0.01)
            for _ in range(4):
                status, body = await exchange(
                    server.port, b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n"
                )
                assert status == 503
                assert body["error"]["code"] == "RATE_LIMITED"
                assert body["error"]["details"] == {"limit": "max_connections", "value": 3}
        # Once they closed, a connection is served again.
        with anyio.fail_after(10):
            while True:
                status, _ = await exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n")
                if status == 200:
                    break
                await anyio.sleep(0.05)
    logged = [r for r in caplog.records if "--max-connections)" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]


async def test_connections_over_the_per_address_cap_are_429() -> None:
    async with relay.serve(port=0, store="memory://", max_connections_per_ip=2) as server:
        with raw(server.port), raw(server.port):
            status, body = await exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n")
            assert status == 429
            assert body["error"]["details"] == {"limit": "max_connections_per_ip", "value": 2}
            assert "127.0.0.1" in body["error"]["message"]


@pytest.mark.parametrize(
    "options",
    [{"max_connections": 0}, {"max_connections_per_ip": -1}, {"request_timeout": 0}],
)
async def test_limits_that_make_no_sense_stop_serve(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        async with relay.serve(port=0, store="memory://", **options):
            pass
