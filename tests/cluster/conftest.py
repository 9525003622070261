"""Several relay nodes (separate processes) on one Redis, and a load-balancer stand-in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import redis

import relay
from relay import Server
from relay.store._redis import RedisStore
from transport.messages import new_id

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass
class Node:
    proc: subprocess.Popen[str]
    url: str

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()  # else the garbage collector warns of it, in any later test


@dataclass
class Cluster:
    store: str
    nodes: list[Node] = field(default_factory=list)

    async def start_node(self, grace: float = 1.0, *extra: str) -> Node:
        """A relay process on the cluster's store (``extra``: more command-line options)."""
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "relay",
                "--port",
                "0",
                "--store",
                self.store,
                "--agent-grace",
                str(grace),
                "--log-level",
                "WARNING",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        with anyio.fail_after(20):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        match = re.search(r"(ws://\S+)", line)
        assert match, f"node did not start: {line!r}"
        node = Node(proc, match.group(1))
        self.nodes.append(node)
        return node


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    if os.environ.get("RUNWIRE_SKIP_REDIS") == "1":
        pytest.skip("RUNWIRE_SKIP_REDIS=1")
    prefix = f"t{new_id()[:10]}:"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:  # never skip silently: CI starts a Redis
        pytest.fail(f"Redis at {REDIS_URL} is not reachable ({exc}); set RUNWIRE_SKIP_REDIS=1")
    yield prefix
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
async def cluster(redis_prefix: str) -> AsyncIterator[Cluster]:
    c = Cluster(store=f"{REDIS_URL}?prefix={redis_prefix}")
    try:
        yield c
    finally:
        for node in c.nodes:
            with suppress(Exception):
                node.kill()


@pytest.fixture
async def nodes(redis_prefix: str) -> AsyncIterator[tuple[Server, Server]]:
    """Two relay nodes in this process on one Redis."""
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, prefix=redis_prefix)) as b,
    ):
        yield a, b


@pytest.fixture
async def expiring(redis_prefix: str) -> AsyncIterator[tuple[Server, Server]]:
    """Two nodes whose sessions Redis drops after 0.5 s without a write."""
    ttl: dict[str, Any] = {"prefix": redis_prefix, "history_ttl": 0.5}
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, **ttl)) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, **ttl)) as b,
    ):
        yield a, b


class Balancer:
    """A TCP proxy on loopback whose target can change: a load balancer stand-in."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.port = 0
        self.url = ""
        self._listener: anyio.abc.SocketListener | None = None

    def point_at(self, ws_url: str) -> None:
        self.target = ws_url

    async def serve(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self.url = f"ws://127.0.0.1:{self.port}"
        task_status.started()
        await listener.serve(self._pipe)

    async def _pipe(self, client: anyio.abc.SocketStream) -> None:
        host, port = self.target.removeprefix("ws://").rsplit(":", 1)
        try:
            upstream = await anyio.connect_tcp(host, int(port))
        except OSError:
            await client.aclose()
            return

        async def copy(a: anyio.abc.SocketStream, b: anyio.abc.SocketStream) -> None:
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                async for chunk in a:
                    await b.send(chunk)
            with suppress(Exception):
                await b.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(copy, client, upstream)
            tg.start_soon(copy, upstream, client)
