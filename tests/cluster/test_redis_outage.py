"""A node that loses Redis refuses publishes with STORE_UNAVAILABLE and recovers by itself."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import orjson
import pytest
import redis

import agent_side
import client_side
import relay
from relay.store._redis import RedisStore
from tests.relay.test_http_api import post
from tests.relay.wire import RawPeer, prompt
from transport import message_text

from .conftest import Cluster
from .test_cluster import an_active_run

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayRedis:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--dbfilename",
                "dump.rdb",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                anyio_sleep_blocking(0.05)
        raise RuntimeError("redis-server did not start")

    def save_and_kill(self) -> None:
        subprocess.run(["redis-cli", "-p", str(self.port), "save"], check=True, capture_output=True)
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


def anyio_sleep_blocking(seconds: float) -> None:
    import time

    time.sleep(seconds)


@pytest.fixture
def throwaway(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is needed (CI installs Debian's redis-server)")
    r = ThrowawayRedis(tmp_path)
    r.start()
    yield r
    if r.proc is not None:
        r.proc.kill()
        r.proc.wait()


async def healthz(ws_url: str) -> tuple[int, dict[str, object]]:
    def get() -> tuple[int, bytes]:
        url = ws_url.replace("ws://", "http://") + "/healthz"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    status, body = await anyio.to_thread.run_sync(get)
    return status, orjson.loads(body)


async def test_losing_redis_refuses_publishes_and_recovers(throwaway: ThrowawayRedis) -> None:
    cluster = Cluster(store=f"redis://127.0.0.1:{throwaway.port}/0")
    node = await cluster.start_node()
    try:
        peer = await RawPeer.open(node.url)
        await peer.attach("s")
        assert (await peer.publish("s", prompt()))["serial"] == 1
        watcher = await RawPeer.open(node.url)
        first = await watcher.attach("s")
        assert (await healthz(node.url))[0] == 200

        throwaway.save_and_kill()
        reply = await peer.publish("s", prompt(), timeout=15)
        assert reply["type"] == "error"
        assert reply["error"]["code"] == "STORE_UNAVAILABLE"
        status, body = await healthz(node.url)
        assert status == 503 and body["status"] == "unavailable"

        throwaway.start()
        with anyio.fail_after(20):
            while True:
                reply = await peer.publish("s", prompt(), timeout=15)
                if reply["type"] == "ack":
                    break
                assert reply["error"]["code"] == "STORE_UNAVAILABLE"
                await anyio.sleep(0.2)
        assert reply["serial"] == 2  # nothing refused was stored, nothing was lost
        assert (await healthz(node.url))[0] == 200
        # A client resuming from its serial gets the rest with no gap.
        late = await RawPeer.open(node.url)
        resumed = await late.attach("s", from_serial=1, epoch=first["epoch"])
        assert resumed["reset"] is False
        assert [e["serial"] for e in resumed["entries"]] == [2]
    finally:
        node.kill()


async def test_a_redis_out_of_memory_refuses_publishes_saying_so_and_takes_their_repeat_later(
    throwaway: ThrowawayRedis,
) -> None:
    cluster = Cluster(store=f"redis://127.0.0.1:{throwaway.port}/0")
    node = await cluster.start_node()
    raw = redis.Redis(port=throwaway.port)
    try:
        peer = await RawPeer.open(node.url)
        first = await peer.attach("s")
        assert (await peer.publish("s", prompt()))["serial"] == 1
        watcher = await RawPeer.open(node.url)
        await watcher.attach("s", from_serial=1, epoch=first["epoch"])

        raw.config_set("maxmemory", 1)  # every write is over the limit now
        refused = prompt()
        reply = await peer.publish("s", refused, timeout=15)
        assert reply["type"] == "error"
        assert reply["error"]["code"] == "STORE_UNAVAILABLE"
        assert reply["error"]["details"] == {"redis": "OOM"}
        assert "out of memory" in reply["error"]["message"]
        # Redis still answers: reads go on, and so does the health check.
        reader = await RawPeer.open(node.url)
        assert [e["serial"] for e in (await reader.attach("s"))["entries"]] == [1]
        assert (await healthz(node.url))[0] == 200

        raw.config_set("maxmemory", 0)
        reply = await peer.publish("s", refused, timeout=15)
        assert reply["type"] == "ack" and reply["serial"] == 2
        again = await peer.publish("s", refused, timeout=15)
        assert again["type"] == "ack" and again["serial"] == 2 and again["duplicate"] is True
        delivered = await watcher.entries(1)
        assert [(e["serial"], e["id"]) for e in delivered] == [(2, refused["id"])]
        with pytest.raises(TimeoutError):
            await watcher.recv(timeout=0.5)  # the repeat is not delivered again
    finally:
        raw.close()
        node.kill()


async def test_a_redis_out_of_memory_for_longer_than_the_grace_ends_no_run_of_an_agent_that_stayed(
    throwaway: ThrowawayRedis,
) -> None:
    # While Redis refuses writes no node can mark its agents present, so their
    # deadlines lapse; absence must count from when Redis takes writes again.
    cluster = Cluster(store=f"redis://127.0.0.1:{throwaway.port}/0")
    raw = redis.Redis(port=throwaway.port)
    try:
        sweeper = await cluster.start_node(grace=1.0)
        with anyio.fail_after(10):
            while raw.get("rw:sweeper") is None:  # the first node holds the lease
                await anyio.sleep(0.05)
        other = await cluster.start_node(grace=1.0)
        _client, _agent, run_id = await an_active_run(sweeper, other)

        raw.config_set("maxmemory", 1)
        await anyio.sleep(3.0)  # deadlines (one grace ahead) and a grace after them pass
        other.proc.send_signal(signal.SIGSTOP)  # it cannot mark its agent again at once
        try:
            raw.config_set("maxmemory", 0)
            await anyio.sleep(0.7)  # the sweeper sweeps meanwhile (every grace / 3)
        finally:
            other.proc.send_signal(signal.SIGCONT)
        await anyio.sleep(2.0)

        watcher = await RawPeer.open(sweeper.url)
        runs = [
            e for e in (await watcher.attach("s"))["entries"]
            if e["kind"] == "run" and e["run_id"] == run_id
        ]  # fmt: skip
        assert [e["status"] for e in runs] == ["active"]
    finally:
        raw.close()
        for node in cluster.nodes:
            node.kill()


async def test_an_http_publish_redis_refuses_is_503_with_its_reason_then_stored_once(
    throwaway: ThrowawayRedis,
) -> None:
    raw = redis.Redis(port=throwaway.port)
    store = RedisStore(f"redis://127.0.0.1:{throwaway.port}/0")
    try:
        async with relay.serve(port=0, store=store) as server:
            body = {"message": "Plan a 3-day trip to Lisbon.", "message_id": "m1"}
            raw.config_set("maxmemory", 1)
            refused = await post(server, "s", body)
            assert refused.status == 503
            assert refused.json()["error"]["code"] == "STORE_UNAVAILABLE"
            assert refused.json()["error"]["details"] == {"redis": "OOM"}
            raw.config_set("maxmemory", 0)
            stored = await post(server, "s", body)
            again = await post(server, "s", body)
            assert stored.status == 201 and stored.json()["serial"] == 1
            assert again.json()["serial"] == 1 and again.json()["duplicate"] is True
    finally:
        raw.close()


async def test_an_agent_whose_publish_redis_refuses_publishes_it_again_and_ends_its_run(
    throwaway: ThrowawayRedis,
) -> None:
    """Redis fills up while a worker streams a Run: its refused publish is repeated (same
    entry id) until Redis has room, so the Run still ends (the handler used to fail on
    ``STORE_UNAVAILABLE``, its end was refused too, and the Run stayed active for good)."""
    raw = redis.Redis(port=throwaway.port)
    store = RedisStore(f"redis://127.0.0.1:{throwaway.port}/0")
    go_on = anyio.Event()
    try:
        async with relay.serve(port=0, store=store) as server:
            agent = agent_side.Agent(server.url)

            @agent.on_run
            async def handle(run: agent_side.Run) -> None:
                await run.start()
                await go_on.wait()
                await run.pipe(words())

            async with agent, client_side.connect(server.url, "s") as phone:
                handle_ = await phone.send("go")
                with anyio.fail_after(10):
                    while handle_.status != "active":
                        await phone._wait_change()
                raw.config_set("maxmemory", 1)
                go_on.set()
                await anyio.sleep(0.5)  # the worker's publish is refused meanwhile
                raw.config_set("maxmemory", 0)
                with anyio.fail_after(10):
                    while handle_.status != "complete":
                        await phone._wait_change()
                assert message_text(phone.view.messages()[-1].message) == "a b"
    finally:
        raw.close()


async def words() -> AsyncIterator[str]:
    for word in ("a ", "b"):
        yield word


async def test_a_redis_out_of_memory_still_lets_a_node_load_a_session_for_an_attach(
    throwaway: ThrowawayRedis,
) -> None:
    """Reads go on while Redis is full, on a node that had not loaded the session too
    (loading it ran a script that set the epoch with ``HSETNX``, which a full Redis
    refuses even when the field is there: the attach failed ``STORE_UNAVAILABLE``)."""
    raw = redis.Redis(port=throwaway.port)
    url = f"redis://127.0.0.1:{throwaway.port}/0"
    try:
        async with (
            relay.serve(port=0, store=RedisStore(url)) as a,
            relay.serve(port=0, store=RedisStore(url)) as b,
        ):
            writer = await RawPeer.open(a.url)
            await writer.attach("s")
            assert (await writer.publish("s", prompt()))["serial"] == 1
            raw.config_set("maxmemory", 1)
            reader = await RawPeer.open(b.url)
            attached = await reader.attach("s")
            assert [e["serial"] for e in attached["entries"]] == [1]
    finally:
        raw.config_set("maxmemory", 0)
        raw.close()


async def test_a_hung_redis_is_answered_quickly_by_the_configured_timeouts(
    throwaway: ThrowawayRedis,
) -> None:
    """Redis stopped (SIGSTOP: connections stay open, nothing answers): ``/healthz`` answers
    503 within ``HEALTH_TIMEOUT``, publishes (those queued behind the first too) fail
    ``STORE_UNAVAILABLE`` within ``socket_timeout``, a new attach fails as fast."""
    from relay.store import _redis as redis_store

    # The documented defaults, which the times below follow from.
    assert (redis_store.SOCKET_TIMEOUT, redis_store.HEALTH_TIMEOUT) == (1.5, 0.8)
    assert RedisStore("redis://127.0.0.1:1/0").socket_timeout == redis_store.SOCKET_TIMEOUT
    async with relay.serve(port=0, store=f"redis://127.0.0.1:{throwaway.port}/0") as server:
        peer = await RawPeer.open(server.url)
        await peer.attach("hung")
        assert (await peer.publish("hung", prompt()))["type"] == "ack"
        others = [await RawPeer.open(server.url) for _ in range(3)]
        for other in others:
            await other.attach("hung")
        assert throwaway.proc is not None
        throwaway.proc.send_signal(signal.SIGSTOP)
        try:
            started = anyio.current_time()
            with anyio.fail_after(3):
                status, body = await healthz(server.url)
            assert status == 503 and body["status"] == "unavailable"
            assert anyio.current_time() - started < 1.0 + 0.5  # (slack for a loaded machine)

            replies: list[dict[str, object]] = []

            async def publish(who: RawPeer) -> None:
                replies.append(await who.publish("hung", prompt(), timeout=10))

            started = anyio.current_time()
            with anyio.fail_after(4):
                async with anyio.create_task_group() as tg:
                    for who in (peer, *others):
                        tg.start_soon(publish, who)
            assert anyio.current_time() - started < 2.0 + 0.5
            for reply in replies:
                assert reply["type"] == "error", reply
                error = reply["error"]
                assert isinstance(error, dict) and error["code"] == "STORE_UNAVAILABLE"
                assert "no reply within 1.5 s" in str(error["message"]), error

            late = await RawPeer.open(server.url)
            started = anyio.current_time()
            reply = await late.request({"type": "attach", "session_id": "new"}, timeout=10)
            assert reply["type"] == "error" and reply["error"]["code"] == "STORE_UNAVAILABLE"
            assert anyio.current_time() - started < 2 * 1.5 + 0.5
        finally:
            throwaway.proc.send_signal(signal.SIGCONT)
        with anyio.fail_after(20):
            while True:
                reply = await peer.publish("hung", prompt(), timeout=10)
                if reply["type"] == "ack":
                    break
                await anyio.sleep(0.2)
        assert (await healthz(server.url))[0] == 200
