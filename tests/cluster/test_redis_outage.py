"""A node that loses Redis refuses publishes with STORE_UNAVAILABLE and recovers by itself."""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import orjson
import pytest

from tests.relay.wire import RawPeer, prompt

from .conftest import Cluster

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
