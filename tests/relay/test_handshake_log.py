"""A connection that hangs up before its request is no error in the relay's log."""

from __future__ import annotations

import logging
import socket
import sys

import anyio
import pytest
from websockets.exceptions import InvalidMessage

import relay
from relay._handshake_log import HangUpBeforeRequest


async def hang_up(port: int, data: bytes = b"") -> None:
    def go() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            if data:
                sock.sendall(data)

    await anyio.to_thread.run_sync(go)


@pytest.mark.anyio
@pytest.mark.parametrize("data", [b"", b"GET / HTTP/1.1\r\nHost: r"])
async def test_a_hang_up_before_the_request_logs_no_error(
    data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with relay.serve(port=0, store="memory://") as server:
        await hang_up(server.port, data)
        with anyio.fail_after(10):  # counted, then let go: the relay is done with it
            while server.admission.total:
                await anyio.sleep(0.01)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.anyio
async def test_a_broken_handshake_is_answered() -> None:
    # A WebSocket handshake websockets cannot take (no Sec-WebSocket-Key) goes to websockets,
    # which answers it 400; other broken requests never reach websockets: the HTTP front
    # answers them 400 itself.
    async with relay.serve(port=0, store="memory://") as server:
        for data in (
            b"GET / HTTP/1.1\r\nHost: r\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            b"NOT HTTP AT ALL\r\n\r\n",
        ):
            assert (await answer(server.port, data)).startswith(b"HTTP/1.1 400 "), data


async def answer(port: int, data: bytes) -> bytes:
    def go() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(data)
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
            return out

    return await anyio.to_thread.run_sync(go)


def test_any_other_handshake_failure_stays_an_error() -> None:
    exc = InvalidMessage("did not receive a valid HTTP request")
    exc.__cause__ = ValueError("unsupported HTTP method")
    loud = record(exc)
    assert HangUpBeforeRequest().filter(loud)
    assert loud.levelno == logging.ERROR and loud.exc_info is not None


def record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        info = sys.exc_info()
    return logging.LogRecord(
        "websockets.server", logging.ERROR, __file__, 1, "opening handshake failed", None, info
    )


def test_the_filter_turns_a_hang_up_into_one_debug_line() -> None:
    exc = InvalidMessage("did not receive a valid HTTP request")
    exc.__cause__ = EOFError("connection closed while reading HTTP request line")
    quiet = record(exc)
    logging.getLogger("websockets.server").setLevel(logging.DEBUG)
    try:
        assert HangUpBeforeRequest().filter(quiet)
    finally:
        logging.getLogger("websockets.server").setLevel(logging.NOTSET)
    assert (quiet.levelno, quiet.exc_info) == (logging.DEBUG, None)
    assert quiet.getMessage() == "a connection closed before it sent its request"
    broken = InvalidMessage("did not receive a valid HTTP request")
    broken.__cause__ = ValueError("unsupported protocol")
    loud = record(broken)
    assert HangUpBeforeRequest().filter(loud)
    assert loud.levelno == logging.ERROR and loud.exc_info is not None
