"""The relay over real loopback WebSockets, frame by frame."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
import pytest
from websockets.exceptions import ConnectionClosed

import relay
from relay import Server
from transport.messages import new_id

from .wire import RawPeer, append, prompt, run_status, steer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as s:
        yield s


async def http_get(url: str) -> tuple[int, bytes]:
    def get() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    return await anyio.to_thread.run_sync(get)


async def test_publish_is_acked_with_a_serial_and_delivered_in_order(server: Server) -> None:
    a = await RawPeer.open(server.url)
    b = await RawPeer.open(server.url)
    await a.attach("s1")
    await b.attach("s1")
    serials = []
    for i in range(5):
        ack = await a.publish("s1", prompt(text=f"m{i}"))
        assert ack["type"] == "ack", ack
        serials.append(ack["serial"])
    assert serials == [1, 2, 3, 4, 5]
    got = await b.entries(5)
    assert [e["serial"] for e in got] == serials
    assert [e["message"]["parts"][0]["text"] for e in got] == [f"m{i}" for i in range(5)]
    # The relay stamps who sent it.
    assert {e["client_id"] for e in got} == {a.client_id}


async def test_claimed_identity_is_overwritten(server: Server) -> None:
    a = await RawPeer.open(server.url)
    await a.attach("s1")
    entry = {**prompt(), "client_id": "someone-else", "user_id": "mallory"}
    await a.publish("s1", entry)
    [got] = await a.entries(1)
    assert got["client_id"] == a.client_id
    assert "user_id" not in got or got["user_id"] is None


async def test_repeated_entry_id_is_dropped_and_acked_again(server: Server) -> None:
    a = await RawPeer.open(server.url)
    await a.attach("s1")
    entry = prompt()
    first = await a.publish("s1", entry)
    again = await a.publish("s1", entry)
    assert again["serial"] == first["serial"] and again["duplicate"] is True
    other = await a.publish("s1", prompt())
    assert other["serial"] == first["serial"] + 1
    page = await a.request({"type": "history", "session_id": "s1", "before": 100})
    assert [e["serial"] for e in page["entries"]] == [1, 2]


async def test_first_frame_must_be_hello(server: Server) -> None:
    from websockets.asyncio.client import connect

    async with connect(server.url) as ws:
        await ws.send(orjson.dumps({"type": "attach", "req": 1, "session_id": "x"}).decode())
        with anyio.fail_after(5):
            reply = orjson.loads(await ws.recv())
            assert reply["error"]["code"] == "PROTOCOL_ERROR"
            assert reply["req"] == 1
            await ws.wait_closed()
        assert ws.close_code == 4002


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"not json", "PROTOCOL_ERROR"),
        (b"[1,2]", "PROTOCOL_ERROR"),
        (b'{"req": 3}', "PROTOCOL_ERROR"),
        (b'{"type": "explode", "req": 3}', "UNKNOWN_FRAME"),
        (b'{"type": "attach", "req": 3, "session_id": 7}', "VALIDATION_ERROR"),
        (b'{"type": "attach", "req": 3, "session_id": "bad id with spaces"}', "VALIDATION_ERROR"),
        (
            b'{"type": "publish", "req": 3, "session_id": "s", "entry": {"kind": "nope"}}',
            "VALIDATION_ERROR",
        ),
        (
            b'{"type": "history", "req": 3, "session_id": "never-attached", "before": 5}',
            "NOT_ATTACHED",
        ),
        (b'{"type": "hello", "req": 3}', "PROTOCOL_ERROR"),
        # JSON true/false is no integer (Python's bool is an int; the JS client refuses it too).
        (b'{"type": "attach", "req": 3, "session_id": "s", "limit": true}', "VALIDATION_ERROR"),
        (
            b'{"type": "attach", "req": 3, "session_id": "s", "from_serial": false}',
            "VALIDATION_ERROR",
        ),
        (b'{"type": "history", "req": 3, "session_id": "s", "before": true}', "VALIDATION_ERROR"),
        (
            b'{"type": "publish", "req": 3, "session_id": "s", "entry": {"kind": "checkpoint",'
            b' "id": "e", "run_id": "r", "step": true}}',
            "VALIDATION_ERROR",
        ),
        (
            b'{"type": "publish", "req": 3, "session_id": "s", "entry": {"kind": "cancel",'
            b' "id": "e", "run_id": "r", "ts": true}}',
            "VALIDATION_ERROR",
        ),
        (b'{"type": "attach", "req": 3, "session_id": "s", "limit": "5"}', "VALIDATION_ERROR"),
        (b'{"type": "attach", "req": true, "session_id": "s"}', "VALIDATION_ERROR"),
    ],
)
async def test_bad_frames_get_a_stable_code_and_the_connection_lives(
    server: Server, frame: bytes, code: str
) -> None:
    a = await RawPeer.open(server.url)
    await a.send(frame.decode())
    reply = await a.next("error")
    assert reply["error"]["code"] == code
    if b'"req": 3' in frame:
        assert reply["req"] == 3
    # Still usable.
    assert (await a.attach("s-after"))["type"] == "attached"


async def test_oversized_frame_gets_payload_too_large(server: Server) -> None:
    async with relay.serve(port=0, store="memory://", max_frame_bytes=2000) as small:
        a = await RawPeer.open(small.url)
        await a.attach("s")
        big = prompt(text="x" * 5000)
        reply = await a.publish("s", big)
        assert reply["error"]["code"] == "PAYLOAD_TOO_LARGE"
        assert reply["error"]["details"]["limit"] == 2000
        ok = await a.publish("s", prompt(text="small"))
        assert ok["serial"] == 1


async def test_run_rules_refuse_bad_entries(server: Server) -> None:
    client = await RawPeer.open(server.url)
    await client.attach("s")
    run_id = new_id()
    e = await client.publish("s", steer("no-such-run", "hi"))
    assert e["error"]["code"] == "RUN_NOT_FOUND"
    await client.publish("s", prompt(run_id))
    dup = {**prompt(run_id), "id": new_id()}
    dup["message"]["id"] = dup["id"]
    e = await client.publish("s", dup)
    assert e["error"]["code"] == "DUPLICATE_RUN"
    e = await client.publish("s", run_status(run_id, "active"))
    assert e["error"]["code"] == "UNAUTHORIZED"  # clients do not drive Runs
    agent = await RawPeer.open(server.url, role="agent")
    await agent.attach("s")
    assert (await agent.publish("s", run_status(run_id, "active")))["type"] == "ack"
    assert (await agent.publish("s", run_status(run_id, "complete")))["type"] == "ack"
    e = await client.publish("s", steer(run_id, "too late"))
    assert e["error"]["code"] == "RUN_NOT_ACTIVE"
    e = await agent.publish("s", append(run_id, "m1", "tail"))
    assert e["error"]["code"] == "RUN_NOT_ACTIVE"


async def test_another_agent_cannot_stream_into_an_owned_run(server: Server) -> None:
    client = await RawPeer.open(server.url)
    await client.attach("s")
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    owner = await RawPeer.open(server.url, role="agent")
    intruder = await RawPeer.open(server.url, role="agent")
    await owner.attach("s")
    await intruder.attach("s")
    await owner.publish("s", run_status(run_id, "active"))
    e = await intruder.publish("s", append(run_id, "m", "x"))
    assert e["error"]["code"] == "UNAUTHORIZED"


async def test_resume_from_serial_gives_exactly_the_missed_entries(server: Server) -> None:
    a = await RawPeer.open(server.url)
    first = await a.attach("s")
    assert first["head"] == 0 and first["entries"] == [] and first["has_older"] is False
    for i in range(10):
        await a.publish("s", prompt(text=str(i)))
    b = await RawPeer.open(server.url)
    resumed = await b.attach("s", from_serial=4, epoch=first["epoch"])
    assert [e["serial"] for e in resumed["entries"]] == list(range(5, 11))
    assert resumed["reset"] is False
    newest = await b.attach("s", limit=3)
    assert [e["serial"] for e in newest["entries"]] == [8, 9, 10]
    assert newest["has_older"] is True
    page = await b.request({"type": "history", "session_id": "s", "before": 8, "limit": 5})
    assert [e["serial"] for e in page["entries"]] == [3, 4, 5, 6, 7]
    assert page["has_older"] is True
    page = await b.request({"type": "history", "session_id": "s", "before": 3, "limit": 5})
    assert [e["serial"] for e in page["entries"]] == [1, 2]
    assert page["has_older"] is False


async def test_resume_from_another_epoch_is_a_reset_not_a_gap(server: Server) -> None:
    a = await RawPeer.open(server.url)
    await a.attach("s")
    for _ in range(3):
        await a.publish("s", prompt())
    reply = await a.attach("s", from_serial=2, epoch="some-other-epoch", limit=2)
    assert reply["reset"] is True
    assert [e["serial"] for e in reply["entries"]] == [2, 3]


async def test_worker_gets_new_runs_and_a_later_worker_gets_waiting_ones(server: Server) -> None:
    client = await RawPeer.open(server.url)
    await client.attach("s")
    waiting_run = new_id()
    await client.publish("s", prompt(waiting_run))  # no worker yet
    worker = await RawPeer.open(server.url, role="agent")
    assert (await worker.request({"type": "worker", "agent": "default"}))["type"] == "ack"
    d = await worker.next("dispatch")
    assert d["run_id"] == waiting_run and d["session_id"] == "s"
    second = new_id()
    await client.publish("s", prompt(second))
    d = await worker.next("dispatch")
    assert d["run_id"] == second
    other_agent = new_id()
    await client.publish("s", prompt(other_agent, agent="planner"))
    with pytest.raises(TimeoutError):
        await worker.next("dispatch", timeout=0.3)


async def test_run_is_handed_again_when_its_worker_dies_before_starting(server: Server) -> None:
    client = await RawPeer.open(server.url)
    await client.attach("s")
    w1 = await RawPeer.open(server.url, role="agent")
    await w1.request({"type": "worker"})
    w2 = await RawPeer.open(server.url, role="agent")
    await w2.request({"type": "worker"})
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    # One of them got it; the other did not.
    got: list[RawPeer] = []
    for w in (w1, w2):
        try:
            d = await w.next("dispatch", timeout=0.5)
            assert d["run_id"] == run_id
            got.append(w)
        except TimeoutError:
            pass
    assert len(got) == 1
    other = w2 if got[0] is w1 else w1
    got[0].ws.transport.abort()
    d = await other.next("dispatch")
    assert d["run_id"] == run_id


async def started_by(server: Server, agent_id: str) -> tuple[RawPeer, RawPeer, str]:
    """A client attached to "s" whose Run ``agent_id`` started: ``(client, agent, run id)``."""
    client = await RawPeer.open(server.url)
    await client.attach("s")
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    agent = await RawPeer.open(server.url, role="agent", client_id=agent_id)
    await agent.attach("s")
    await agent.publish("s", run_status(run_id, "active"))
    return client, agent, run_id


async def run_error(client: RawPeer) -> dict[str, Any]:
    """The next entry that ends a Run with an error, as ``client`` gets it."""
    with anyio.fail_after(5):
        while True:
            [entry] = await client.entries(1)
            if entry["kind"] == "run" and entry["status"] == "error":
                return entry


async def test_active_run_ends_agent_lost_after_grace(server: Server) -> None:
    client, agent, run_id = await started_by(server, "agent-1")
    agent.ws.transport.abort()
    end = await run_error(client)
    assert end["error"]["code"] == "AGENT_LOST"
    assert end["run_id"] == run_id


async def test_agent_that_comes_back_in_time_keeps_its_run(server: Server) -> None:
    _, agent, run_id = await started_by(server, "agent-2")
    agent.ws.transport.abort()
    back = await RawPeer.open(server.url, role="agent", client_id="agent-2")
    await back.attach("s")
    await anyio.sleep(0.6)  # longer than the grace period: nothing may happen
    ack = await back.publish("s", run_status(run_id, "complete"))
    assert ack["type"] == "ack", ack


async def test_an_agent_is_lost_only_when_its_last_connection_leaves(server: Server) -> None:
    client, first, run_id = await started_by(server, "agent-3")
    second = await RawPeer.open(server.url, role="agent", client_id="agent-3")
    first.ws.transport.abort()
    await anyio.sleep(0.6)  # longer than the grace period: the other connection vouches
    record = server.hub.channels["s"].registry.get(run_id)
    assert record is not None and record.status == "active"
    second.ws.transport.abort()
    end = await run_error(client)
    assert end["error"]["code"] == "AGENT_LOST"
    assert end["run_id"] == run_id


async def test_cancel_before_start_ends_the_run_at_once(server: Server) -> None:
    """No agent started the Run, so none could refuse the cancel: the relay ends it."""
    client = await RawPeer.open(server.url)
    await client.attach("s")
    run_id = new_id()
    await client.publish("s", prompt(run_id))
    ack = await client.publish(
        "s", {"kind": "cancel", "id": new_id(), "run_id": run_id, "reason": "changed my mind"}
    )
    assert ack["type"] == "ack"
    with anyio.fail_after(5):
        while True:
            [entry] = await client.entries(1)
            if entry["kind"] == "run" and entry["run_id"] == run_id:
                break
    assert entry["status"] == "cancelled" and entry["client_id"] == "relay"
    record = server.hub.channels["s"].registry.get(run_id)
    assert record is not None and record.cancel_requested and record.status == "cancelled"


async def test_slow_consumer_is_closed_with_4008_and_others_go_on() -> None:
    async with relay.serve(port=0, store="memory://", send_queue_bytes=200_000) as s:
        slow = await RawPeer.open(s.url)
        await slow.attach("s")
        fast = await RawPeer.open(s.url)
        await fast.attach("s")
        # Stop reading on the slow peer: pause its transport.
        slow.ws.transport.pause_reading()
        pub = await RawPeer.open(s.url)
        await pub.attach("s")
        got: list[dict[str, Any]] = []

        async def read_fast() -> None:
            got.extend(await fast.entries(600, timeout=30))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_fast)
            # Enough to fill the kernel's socket buffers on loopback too.
            for i in range(600):
                await pub.publish("s", prompt(text="y" * 30_000 + str(i)))
        assert [e["serial"] for e in got] == list(range(1, 601))
        slow.ws.transport.resume_reading()
        with anyio.fail_after(15):
            with pytest.raises(ConnectionClosed):
                while True:
                    await slow.ws.recv()
        assert slow.ws.close_code == 4008
        # The relay's memory for it is gone, and the others still work.
        assert (await pub.publish("s", prompt()))["serial"] == 601


async def test_healthz_and_metrics(server: Server) -> None:
    a = await RawPeer.open(server.url)
    await a.attach("s")
    await a.publish("s", prompt())
    status, body = await http_get(server.url.replace("ws://", "http://") + "/healthz")
    assert status == 200
    health = orjson.loads(body)
    assert health["status"] == "ok" and health["connections"] >= 1
    status, body = await http_get(server.url.replace("ws://", "http://") + "/metrics")
    assert status == 200
    assert b"runwire_entries_published_total 1.0" in body
    status, _ = await http_get(server.url.replace("ws://", "http://") + "/nope")
    assert status == 404


async def test_a_node_keeps_in_memory_only_the_sessions_someone_watches(tmp_path: Any) -> None:
    # The store's per-channel memory (SQLite: the newest ids and the head) goes when the
    # relay puts the channel down, so a long-running relay does not hold every session it
    # ever served; a session opened again carries on where it was.
    async with relay.serve(port=0, store=f"sqlite:///{tmp_path}/r.db") as server:
        store: Any = server.store
        peer = await RawPeer.open(server.url)
        prompts = [prompt() for _ in range(30)]
        for i, first in enumerate(prompts):
            await peer.attach(f"s{i}")
            assert (await peer.publish(f"s{i}", first))["serial"] == 1
            assert (await peer.request({"type": "detach", "session_id": f"s{i}"}))["type"]
        with anyio.fail_after(5):
            while server.hub.channels:
                await anyio.sleep(0.01)
        assert store._recent == {} and store._heads == {}
        await peer.attach("s3")
        repeat = await peer.publish("s3", prompts[3])  # still recognised as a repeat
        assert repeat["type"] == "ack" and repeat["serial"] == 1
        assert (await peer.publish("s3", prompt()))["serial"] == 2
        assert set(store._recent) == {"s3"}
        await peer.close()


async def test_agent_names_that_come_and_go_leave_no_entry_behind(server: Server) -> None:
    # The relay kept an empty list of workers for every agent name it ever served, so a
    # relay whose agents came and went under ever new names grew for as long as it ran.
    for i in range(20):
        peer = await RawPeer.open(server.url, role="agent", client_id=f"come-and-go-{i}")
        for name in (f"name-{i}", "shared"):
            assert (await peer.request({"type": "worker", "agent": name}))["type"] == "ack"
        await peer.close()
    with anyio.fail_after(5):
        while server.hub.peers:
            await anyio.sleep(0.01)
    assert server.hub.dispatcher.workers == {}
    assert server.hub.stats()["workers"] == 0


async def test_worker_frames_repeated_or_for_several_names_leave_nothing_behind(
    server: Server,
) -> None:
    # Each worker frame appended the connection to its name's workers again, and a close
    # took it off the last name's list once: a connection that sent worker "a", "b", "a",
    # "a" stayed registered three times after it closed (healthz, the runwire_workers
    # gauge and memory never came back), and any agent could grow the lists at will.
    peer = await RawPeer.open(server.url, role="agent", client_id="w")
    for name in ("a", "b", "a", "a"):
        assert (await peer.request({"type": "worker", "agent": name}))["type"] == "ack"
    assert server.hub.stats()["workers"] == 2
    await peer.close()
    with anyio.fail_after(5):
        while server.hub.stats()["workers"]:
            await anyio.sleep(0.01)
    assert all(not workers for workers in server.hub.dispatcher.workers.values())
    assert "runwire_workers 0.0" in server.hub.metrics.render().decode()
    # A Run for either name waits for a live worker; a new one gets it.
    client = await RawPeer.open(server.url)
    await client.attach("s-workers")
    run_id = new_id()
    await client.publish("s-workers", prompt(run_id, agent="b"))
    fresh = await RawPeer.open(server.url, role="agent", client_id="w2")
    assert (await fresh.request({"type": "worker", "agent": "b"}))["type"] == "ack"
    assert (await fresh.next("dispatch"))["run_id"] == run_id
    await client.close()
    await fresh.close()
