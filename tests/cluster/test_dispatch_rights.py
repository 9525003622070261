"""A worker whose token does not cover a Run's session, on a Redis node: the node leaves the
Run on the stream for others without reading it again and again."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

import relay
from relay._cluster import RedisDispatcher
from relay.auth import mint_token
from relay.store._redis import RedisStore
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


async def test_a_client_claiming_an_agents_client_id_does_not_keep_it_present(
    redis_prefix: str,
) -> None:
    # A connection of the same user with user rights, role "agent" and the agent's client
    # id, on another node: it was marked present in Redis for that client id, so the
    # sweep never ended the lost agent's Run AGENT_LOST.
    def node() -> Any:
        store = RedisStore(REDIS_URL, prefix=redis_prefix)
        return relay.serve(port=0, store=store, secret=SECRET, agent_grace=0.6)

    def hello(sessions: dict[str, list[str]], role: str) -> tuple[str, dict[str, Any]]:
        token = mint_token(user="svc", sessions=sessions, secret=SECRET)
        return token, {"type": "hello", "v": 1, "role": role, "client_id": "w1"}

    async def as_svc(url: str, sessions: dict[str, list[str]], role: str) -> RawPeer:
        token, frame = hello(sessions, role)
        ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"})
        peer = RawPeer(ws)
        await peer.send(frame)
        welcome = await peer.recv()
        assert welcome["client_id"] == "svc/w1", welcome
        return peer

    async with node() as a, node() as b:
        client = await dial(a.url, {"*": ["subscribe", "publish"]})
        await client.attach("trip-1")
        run_id = new_id()
        await client.publish("trip-1", prompt(run_id))
        agent = await as_svc(a.url, {"*": ["agent"]}, "agent")
        await agent.attach("trip-1")
        started = {"kind": "run", "id": new_id(), "run_id": run_id, "status": "active"}
        assert (await agent.publish("trip-1", started))["type"] == "ack"
        impostor = await as_svc(b.url, {"*": ["subscribe", "publish"]}, "agent")
        agent.ws.transport.abort()
        with anyio.fail_after(10):
            while True:
                [entry] = await client.entries(1, timeout=10)
                if entry["kind"] == "run" and entry["status"] != "active":
                    break
        assert entry["status"] == "error" and entry["error"]["code"] == "AGENT_LOST", entry
        await impostor.close()
        await client.close()
