"""A connection that hangs up before its request is logged at DEBUG, not as an ERROR."""

from __future__ import annotations

import logging
import socket

import anyio
import pytest

import relay

pytestmark = pytest.mark.anyio


async def hang_up(port: int, data: bytes = b"") -> None:
    def go() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            if data:
                sock.sendall(data)

    await anyio.to_thread.run_sync(go)


async def test_a_hang_up_before_the_request_is_no_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="websockets.server")
    async with relay.serve(port=0, store="memory://") as server:
        await hang_up(server.port)
        with anyio.fail_after(10):
            while not any("before it sent its request" in r.getMessage() for r in caplog.records):
                await anyio.sleep(0.01)
    records = [r for r in caplog.records if r.name.startswith("websockets.server")]
    assert not [r for r in records if r.levelno >= logging.ERROR]
    (quiet,) = [r for r in records if "before it sent its request" in r.getMessage()]
    assert quiet.levelno == logging.DEBUG and quiet.exc_info is None


async def test_a_broken_request_stays_an_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="websockets.server")
    async with relay.serve(port=0, store="memory://") as server:
        await hang_up(server.port, b"NOT HTTP AT ALL\r\n\r\n")
        with anyio.fail_after(10):
            while not any(r.levelno >= logging.ERROR for r in caplog.records):
                await anyio.sleep(0.01)
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.getMessage() == "opening handshake failed" and error.exc_info is not None
