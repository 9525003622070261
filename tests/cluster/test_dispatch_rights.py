"""A worker whose token does not cover a Run's session, on a Redis node: the node leaves the
Run on the stream for others without reading it again and again."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

import relay
from relay.auth import mint_token
from relay.cluster import RedisDispatcher
from relay.store.redis import RedisStore
from transport.messages import new_id

from ..relay.wire import RawPeer, prompt
from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio

SECRET = "cluster-rights-secret-" + "0123456789abcdef" * 3


async def dial(url: str, sessions: dict[str, list[str]], role: str = "client") -> RawPeer:
    token = mint_token(user=f"u-{role}", sessions=sessions, secret=SECRET)
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"})
    peer = RawPeer(ws)
    await peer.send({"type": "hello", "v": 1, "role": role})
    welcome = await peer.recv()
    assert welcome["type"] == "welcome", welcome
    return peer


async def test_a_run_no_local_worker_may_take_is_not_read_again_in_a_busy_loop(
    redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore(REDIS_URL, prefix=redis_prefix)
    given_back = 0
    requeue = store.requeue

    async def counting(*args: Any, **kwargs: Any) -> None:
        nonlocal given_back
        given_back += 1
        await requeue(*args, **kwargs)

    monkeypatch.setattr(store, "requeue", counting)
    async with relay.serve(port=0, store=store, secret=SECRET) as node:
        assert isinstance(node.hub.dispatcher, RedisDispatcher)
        # A worker for tenant a's sessions only; a Run of tenant b's.
        other = await dial(node.url, {"a-*": ["agent"]}, role="agent")
        assert (await other.request({"type": "worker", "agent": "default"}))["type"] == "ack"
        client = await dial(node.url, {"*": ["subscribe", "publish"]})
        await client.attach("b-1")
        run_id = new_id()
        assert (await client.publish("b-1", prompt(run_id)))["type"] == "ack"
        started = time.process_time()
        await anyio.sleep(1.5)
        # It went back to the stream a few times (the pause doubles up to read_block),
        # not thousands of times a second, each a Redis script and a read.
        assert 1 <= given_back <= 30, given_back
        assert time.process_time() - started < 0.5
        assert not any(f["type"] == "dispatch" for f in other.inbox)
        # A worker that may take it, registering on this node, gets it at once.
        right = await dial(node.url, {"b-*": ["agent"]}, role="agent")
        assert (await right.request({"type": "worker", "agent": "default"}))["type"] == "ack"
        with anyio.fail_after(2):
            assert (await right.next("dispatch", timeout=2))["run_id"] == run_id
        for peer in (other, client, right):
            await peer.close()
