"""What a relay node on Redis holds back for company (``linger_ms``) and what it never does."""

from __future__ import annotations

import time

import anyio
import pytest

import relay
from relay.store._redis import RedisStore
from tests.relay.wire import RawPeer, append, prompt, run_status, steer
from transport.messages import new_id

from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio

LINGER_MS = 1000.0


async def test_only_streamed_deltas_wait_for_company(redis_prefix: str) -> None:
    store = RedisStore(REDIS_URL, prefix=redis_prefix, linger_ms=LINGER_MS)
    async with relay.serve(host="127.0.0.1", port=0, store=store) as server:
        client = await RawPeer.open(server.url)
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-l")
        await client.attach("s")
        await agent.attach("s")
        run_id = new_id()
        opened = {"kind": "response_open", "id": new_id(), "run_id": run_id, "message_id": "a1"}
        # A user's message, a Run's status, a response opening, a steer: someone waits on
        # each, so none waits out the linger (far longer than this whole block).
        with anyio.fail_after(LINGER_MS / 2000):
            assert (await client.publish("s", prompt(run_id)))["type"] == "ack"
            assert (await agent.publish("s", run_status(run_id, "active")))["type"] == "ack"
            assert (await agent.publish("s", opened))["type"] == "ack"
            assert (await client.publish("s", steer(run_id, "shorter")))["type"] == "ack"
        # A streamed delta alone lingers, so that deltas of other sessions can share its trip.
        began = time.monotonic()
        assert (await agent.publish("s", append(run_id, "a1", "Hi")))["type"] == "ack"
        assert time.monotonic() - began >= LINGER_MS / 2000
        store.linger_ms = 0  # closing sends nothing more that would wait
        await client.close()
        await agent.close()
