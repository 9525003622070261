"""A relay that stops closes its connections 1012 (service restart); the SDKs reconnect at once."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

import relay
from tests.cluster.conftest import Balancer
from transport import _codec as codec
from transport.asyncio._connection import Connection
from transport.errors import CLOSE_CODES, CloseCode
from transport.frames import Hello

pytestmark = pytest.mark.anyio


async def test_a_stopping_relay_closes_1012() -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        ws = await connect(server.url)
        await ws.send(codec.encode(Hello(role="client")).decode())
        await ws.recv()  # welcome
    with anyio.fail_after(10), pytest.raises(ConnectionClosed):
        await ws.recv()
    assert ws.close_code == CloseCode.SERVICE_RESTART == 1012
    assert CLOSE_CODES[1012] == "SERVICE_RESTART"


async def test_the_sdk_connection_reconnects_at_once_after_1012() -> None:
    """With a minute of backoff, only the 1012 rule brings the connection back in time."""
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://") as second,
        anyio.create_task_group() as tg,
        AsyncExitStack() as stack,
    ):
        first = await stack.enter_async_context(
            relay.serve(host="127.0.0.1", port=0, store="memory://")
        )
        lb = Balancer(first.url)
        await tg.start(lb.serve)
        async with Connection(lb.url, backoff_initial=60.0, backoff_max=60.0) as conn:
            assert conn.connects == 1
            lb.point_at(second.url)
            await stack.aclose()  # the first relay stops
            # The connection is back, on the second relay, without a backoff.
            with anyio.fail_after(10):
                while conn.connects < 2:
                    await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
