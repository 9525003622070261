"""Frames queued together leave the relay in one write, in order, intact."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from relay._wsconn import RelayConnection, send_frames

pytestmark = pytest.mark.anyio


async def _exchange(
    frames: list[bytes], connection: type[ServerConnection]
) -> tuple[list[str], int]:
    """Serve a connection that sends ``frames`` by ``send_frames``: what arrived, writes made."""
    writes = 0
    counted = -1
    sent = anyio.Event()

    async def handler(ws: ServerConnection) -> None:
        nonlocal writes, counted
        write = ws.transport.write

        def counting(data: Any) -> None:
            nonlocal writes
            writes += 1
            write(data)

        ws.transport.write = counting  # type: ignore[method-assign]
        await send_frames(ws, frames)
        counted = writes  # before the closing handshake writes its own frame
        sent.set()
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0, create_connection=connection) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", max_size=None) as client:
            got = []
            with anyio.fail_after(5):
                for _ in frames:
                    message = await client.recv()
                    assert isinstance(message, str)  # text frames
                    got.append(message)
                await sent.wait()
    return got, counted


async def test_frames_queued_together_go_out_in_one_write_in_order() -> None:
    frames = [b'{"type":"ack","req":1}', b"x" * 70_000, '{"t":"é"}'.encode(), b"{}"]
    got, writes = await _exchange(frames, RelayConnection)
    assert got == [f.decode() for f in frames]
    assert writes == 1


async def test_a_plain_connection_gets_the_same_frames_one_write_each() -> None:
    frames = [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    got, writes = await _exchange(frames, ServerConnection)
    assert got == [f.decode() for f in frames]
    assert writes == 3


async def test_one_frame_is_a_plain_send() -> None:
    got, writes = await _exchange([b'{"only":true}'], RelayConnection)
    assert got == ['{"only":true}']
    assert writes == 1


async def test_closing_still_half_closes_after_batched_writes() -> None:
    closed = anyio.Event()

    async def handler(ws: ServerConnection) -> None:
        await send_frames(ws, [b"1", b"2"])
        await ws.close(4008, "bye")
        closed.set()

    async with serve(handler, "127.0.0.1", 0, create_connection=RelayConnection) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as client:
            assert [await client.recv(), await client.recv()] == ["1", "2"]
            with anyio.fail_after(5):
                await closed.wait()
                await client.wait_closed()
            assert client.close_code == 4008
