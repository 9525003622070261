"""HTTP/1.1 keep-alive on the relay's port (``relay._http_front``): several requests on one
connection, pipelined too, ``Connection: close`` and HTTP/1.0 honoured, an idle timeout, and
every limit still answered with its code on a connection that served a request before."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

import relay
from relay.auth import mint_token

from .wire import RawPeer

pytestmark = pytest.mark.anyio

SECRET = "keepalive-test-secret-" + "0123456789abcdef" * 2


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Conn:
    """One TCP connection to the relay: raw bytes out, responses read one by one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self, *, head_only: bool = False) -> Answer:
        """The next response, read to the end of its ``Content-Length``."""
        with anyio.fail_after(10):
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            match = re.fullmatch(r"HTTP/1\.1 (\d{3}) .*", lines[0])
            assert match, head
            headers = {
                name.lower(): value
                for name, _, value in (line.partition(": ") for line in lines[1:] if line)
            }
            length = 0 if head_only else int(headers.get("content-length", "0"))
            body = await self.reader.readexactly(length)
        return Answer(int(match[1]), headers, body)

    async def closed_by_relay(self, within: float = 5.0) -> bool:
        """Whether the relay closes the connection within ``within`` seconds."""
        with anyio.move_on_after(within):
            return await self.reader.read(1) == b""
        return False


@asynccontextmanager
async def connect(server: relay.Server) -> AsyncIterator[Conn]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        yield Conn(reader, writer)
    finally:
        writer.close()


def get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: r", *extra]) + "\r\n\r\n").encode()


def post(path: str, body: bytes, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: r", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


MESSAGE = b'{"message": "hi", "message_id": "m1"}'


@pytest.fixture
async def server() -> AsyncIterator[relay.Server]:
    async with relay.serve(port=0, store="memory://", max_frame_bytes=2000) as s:
        yield s


async def test_several_requests_go_one_after_another_on_one_connection(
    server: relay.Server,
) -> None:
    async with connect(server) as conn:
        conn.send(post("/v1/sessions/s-1/messages", MESSAGE))
        posted = await conn.answer()
        assert posted.status == 201 and posted.json()["serial"] == 1
        assert "connection" not in posted.headers  # it stays open
        conn.send(get("/v1/sessions/s-1/history"))
        page = await conn.answer()
        assert page.status == 200 and [e["id"] for e in page.json()["entries"]] == ["m1"]
        conn.send(get("/healthz"))
        assert (await conn.answer()).status == 200
        # Connection: close is honoured: the answer says so, and the relay closes.
        conn.send(get("/healthz", "Connection: close"))
        last = await conn.answer()
        assert last.status == 200 and last.headers["connection"] == "close"
        assert await conn.closed_by_relay()
    await _released(server)


async def test_pipelined_requests_are_answered_in_order(server: relay.Server) -> None:
    async with connect(server) as conn:
        # Three requests in one write: each is read once the one before it is answered.
        conn.send(
            post("/v1/sessions/s-1/messages", MESSAGE)
            + get("/v1/sessions/s-1/history")
            + get("/v1/nothing")
            + b"HEAD /healthz HTTP/1.1\r\nHost: r\r\n\r\n"
        )
        assert (await conn.answer()).status == 201
        page = await conn.answer()
        assert [e["id"] for e in page.json()["entries"]] == ["m1"]
        missing = await conn.answer()
        assert (missing.status, missing.json()["error"]["code"]) == (404, "NOT_FOUND")
        head = await conn.answer(head_only=True)  # a HEAD answer has no body
        assert head.status == 200 and int(head.headers["content-length"]) > 0
        conn.send(get("/healthz"))  # and the connection is still good
        assert (await conn.answer()).status == 200


async def test_http_1_0_closes_after_its_answer(server: relay.Server) -> None:
    async with connect(server) as conn:
        conn.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert (await conn.answer()).status == 200
        assert await conn.closed_by_relay()


async def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    async with relay.serve(port=0, store="memory://", http_idle_timeout=0.3) as server:
        async with connect(server) as conn:
            conn.send(get("/healthz"))
            assert (await conn.answer()).status == 200
            started = anyio.current_time()
            assert await conn.closed_by_relay(within=5)
            assert anyio.current_time() - started < 3
        await _released(server)


async def test_every_limit_answers_with_its_code_after_a_request_was_served() -> None:
    token = mint_token(user="alice", sessions={"s-*": ["subscribe", "publish"]}, secret=SECRET)
    async with relay.serve(
        port=0, store="memory://", secret=SECRET, max_frame_bytes=2000, request_timeout=0.5
    ) as server:
        auth = f"Authorization: Bearer {token}"
        cases: list[tuple[bytes, int, str]] = [
            # A body over max_frame_bytes, refused from its Content-Length, unread.
            (
                f"POST /v1/sessions/s-1/messages HTTP/1.1\r\nHost: r\r\n{auth}\r\n"
                "Content-Length: 5000\r\n\r\n".encode(),
                413,
                "PAYLOAD_TOO_LARGE",
            ),
            # A body without a good token is not read.
            (post("/v1/sessions/s-1/messages", MESSAGE), 401, "UNAUTHORIZED"),
            # A request line too long, a header line too long, a head too large.
            (get("/v1/sessions/s-1/history?q=" + "x" * 50_000, auth), 414, "PAYLOAD_TOO_LARGE"),
            (get("/healthz", "X-Junk: " + "x" * 9000), 431, "PAYLOAD_TOO_LARGE"),
            (
                get("/healthz", *(f"X-Pad-{i}: {'p' * 1200}" for i in range(120))),
                431,
                "PAYLOAD_TOO_LARGE",
            ),
            # A malformed head.
            (b"GET /healthz HTTP/1.1\r\nNo-Colon\r\n\r\n", 400, "PROTOCOL_ERROR"),
            # Half a request, then nothing: 408 once request_timeout passed.
            (b"GET /healthz HTTP/1.1\r\nHost: r", 408, "PROTOCOL_ERROR"),
        ]
        for data, status, code in cases:
            async with connect(server) as conn:
                conn.send(get("/v1/sessions/s-1/history", auth))  # served first
                assert (await conn.answer()).status == 200
                conn.send(data)
                answer = await conn.answer()
                assert answer.status == status, (data[:80], answer)
                error = answer.json()["error"]
                assert error["code"] == code, error
                assert answer.headers["connection"] == "close"
                assert await conn.closed_by_relay()
        await _released(server)


async def test_a_websocket_handshake_is_passed_to_websockets_on_the_same_port(
    server: relay.Server,
) -> None:
    async with connect(server) as conn:
        conn.send(get("/healthz"))
        assert (await conn.answer()).status == 200
    peer = await RawPeer.open(server.url, client_id="phone")
    await peer.attach("s-1")
    await peer.close()


async def _released(server: relay.Server) -> bool:
    with anyio.fail_after(10):  # every connection closed is let go of
        while server.admission.total:
            await anyio.sleep(0.01)
    return True


async def test_a_client_that_expects_100_continue_gets_it_before_sending_its_body(
    server: relay.Server,
) -> None:
    async with connect(server) as conn:
        head = post("/v1/sessions/s-1/messages", b"", "Expect: 100-continue")
        conn.send(head.replace(b"Content-Length: 0", b"Content-Length: %d" % len(MESSAGE)))
        go_on = await conn.answer()
        assert go_on.status == 100
        conn.send(MESSAGE)
        assert (await conn.answer()).status == 201


async def test_keep_alive_over_tls_on_the_same_port(tmp_path: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    async with relay.serve(
        port=0, store="memory://", ssl_certfile=str(cert), ssl_keyfile=str(key)
    ) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client)
        conn = Conn(reader, writer)
        try:
            conn.send(post("/v1/sessions/s-1/messages", MESSAGE) + get("/healthz"))
            assert (await conn.answer()).status == 201
            assert (await conn.answer()).status == 200
            conn.send(get("/v1/sessions/s-1/history", "Connection: close"))
            page = await conn.answer()
            assert [e["id"] for e in page.json()["entries"]] == ["m1"]
            assert await conn.closed_by_relay()
        finally:
            writer.close()


async def test_headers_given_twice_are_answered_not_a_fault() -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as server:
        token = mint_token(user="alice", sessions={"s-*": ["subscribe"]}, secret=SECRET)
        twice = [f"Authorization: Bearer {token}", "Authorization: Bearer x.y.z"]
        async with connect(server) as conn:
            conn.send(get("/v1/sessions/s-1/history", *twice))
            refused = await conn.answer()
            assert (refused.status, refused.json()["error"]["code"]) == (401, "UNAUTHORIZED")
            one = f"Authorization: Bearer {token}"
            conn.send(get("/v1/sessions/s-1/events?wait=0", one, "Accept: a/b", "Accept: c/d"))
            assert (await conn.answer()).status == 200
            conn.send(get("/healthz", "Upgrade: h2c", "Upgrade: other"))
            assert (await conn.answer()).status == 200
