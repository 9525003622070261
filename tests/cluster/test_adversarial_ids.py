"""Ids with characters Redis keys, glob patterns or the Lua scripts could mis-handle, through
two relay nodes on one Redis: dispatch by agent name, cancel, the AGENT_LOST sweep, history,
the event stream and the sweeper's ``SCAN`` of dispatch streams."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay
from relay._cluster import RedisDispatcher
from relay.store._redis import RedisStore
from transport.messages import new_id

from ..relay.wire import RawPeer, prompt, run_status
from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio

_TRICKY = "{}:*?[]\\\"' \n\t/😀é\x00"
ids = st.one_of(
    st.text(st.sampled_from(_TRICKY + "ab"), min_size=1, max_size=12),
    st.text(min_size=1, max_size=30),
    st.sampled_from(["x" * 200, "{s}", "a:runs", "*", "user/agent", "rw:{s}:log"]),
)
session_ids = st.sampled_from(["s", "a:b", "::", "-.-_", "x" * 200, "a:runs", "agent:x"])


@pytest.fixture
async def two_nodes(redis_prefix: str) -> AsyncIterator[tuple[relay.Server, relay.Server]]:
    def serve() -> Any:
        return relay.serve(
            port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix), agent_grace=0.3
        )

    async with serve() as a, serve() as b:
        yield a, b


def events(port: int, session_id: str) -> list[dict[str, Any]]:
    """The entries of a session's event stream from the start (``from=0``, no wait)."""
    request = (
        f"GET /v1/sessions/{session_id}/events?from=0&wait=0 HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), raw
    return [
        json.loads(line[6:]) for line in body.decode().split("\n") if line.startswith("data: {")
    ]


async def no_dispatch(peer: RawPeer) -> None:
    with pytest.raises(TimeoutError):
        await peer.next("dispatch", timeout=0.05)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)
@given(
    agent=ids,
    worker_id=ids,
    run_id=ids,
    entry_id=ids,
    session_id=session_ids,
)
async def test_any_ids_are_routed_cancelled_swept_and_read_back_exactly(
    two_nodes: tuple[relay.Server, relay.Server],
    anyio_backend: str,
    agent: str,
    worker_id: str,
    run_id: str,
    entry_id: str,
    session_id: str,
) -> None:
    a, b = two_nodes
    suffix = new_id()[:6]  # examples share the Redis prefix: fresh ids each time
    agent, worker_id = agent[:190] + suffix, worker_id[:190] + suffix
    run_id, entry_id = run_id[:190] + suffix, entry_id[:180] + suffix  # room for ":cancel"
    session_id = f"{session_id[:190]}-{suffix}"
    neighbour = agent[:-1] + "*"  # a name the other's pattern-like characters could match
    with anyio.fail_after(20):
        worker = await RawPeer.open(b.url, role="agent", client_id=worker_id)
        decoy = await RawPeer.open(b.url, role="agent", client_id=worker_id + "*")
        for peer, name in ((worker, agent), (decoy, neighbour)):
            assert (await peer.request({"type": "worker", "agent": name}))["type"] == "ack"
        client = await RawPeer.open(a.url)
        await client.attach(session_id)
        first = {**prompt(run_id, agent=agent), "id": entry_id}
        first["message"]["id"] = entry_id
        assert (await client.publish(session_id, first))["type"] == "ack"
        dispatch = await worker.next("dispatch", timeout=10)
        assert (dispatch["session_id"], dispatch["run_id"], dispatch["agent"]) == (
            session_id,
            run_id,
            agent,
        )
        assert dispatch["message_id"] == entry_id
        await worker.attach(session_id)
        assert (await worker.publish(session_id, run_status(run_id, "active")))["type"] == "ack"
        cancel = {"kind": "cancel", "id": entry_id + ":cancel", "run_id": run_id}
        assert (await client.publish(session_id, cancel))["type"] == "ack"
        while True:
            got = [e for e in await worker.entries(1, timeout=10) if e["kind"] == "cancel"]
            if got:
                assert got[0]["run_id"] == run_id
                break
        ended = run_status(run_id, "cancelled")
        assert (await worker.publish(session_id, ended))["type"] == "ack"
        # A second Run of that agent; its worker goes away: the sweep ends it AGENT_LOST.
        second = run_id + "\n2"
        assert (await client.publish(session_id, prompt(second, agent=agent)))["type"] == "ack"
        assert (await worker.next("dispatch", timeout=10))["run_id"] == second
        assert (await worker.publish(session_id, run_status(second, "active")))["type"] == "ack"
        await worker.close()
        while True:
            lost = [
                e
                for e in await client.entries(1, timeout=10)
                if e["kind"] == "run" and e["run_id"] == second and e["status"] == "error"
            ]
            if lost:
                assert lost[0]["error"]["code"] == "AGENT_LOST"
                break
        await no_dispatch(decoy)
        # Both nodes read the same history, by WebSocket and by the event stream.
        page = await client.request(
            {"type": "history", "session_id": session_id, "before": 10**9, "limit": 100}
        )
        serials = [e["serial"] for e in page["entries"]]
        assert serials == list(range(1, len(serials) + 1))
        assert page["entries"][0]["id"] == entry_id
        streamed = await anyio.to_thread.run_sync(events, b.port, session_id)
        assert streamed == page["entries"]
        # The sweeper's SCAN finds every dispatch stream under the prefix and nothing else.
        dispatcher = b.hub.dispatcher
        assert isinstance(dispatcher, RedisDispatcher)
        store = dispatcher.store
        redis = store.client()
        try:
            streams = {
                key.decode()
                async for key in redis.scan_iter(match=store.dispatch_streams, _type="stream")
            }
            assert {store.dispatch_stream(agent), store.dispatch_stream(neighbour)} <= streams
            assert all(s.startswith(store.key("agent", "")) for s in streams)
            assert await redis.xlen(store.dispatch_stream(agent)) == 0  # nothing left waiting
            await dispatcher.sweeper.prune()  # no script error on these names
        finally:
            await redis.aclose()
        for peer in (decoy, client):
            await peer.close()
