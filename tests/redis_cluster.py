"""A throwaway Redis Cluster for tests: three masters, three replicas, on free local ports.

``start_cluster`` runs six ``redis-server --cluster-enabled yes`` in a temporary
directory, joins them with ``redis-cli --cluster create --cluster-replicas 1``
and waits until every slot is served. ``cluster-node-timeout`` is short (1 s),
so a killed master's replica takes over within a few seconds.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from redis import Redis

NODE_TIMEOUT_MS = 1000


def _free_ports(count: int) -> list[int]:
    """``count`` free ports whose cluster bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


@dataclass
class RedisCluster:
    """Six local ``redis-server`` processes joined as one Cluster."""

    root: str
    ports: list[int]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """A store URL for it (any node is a seed)."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def client(self, port: int) -> Redis:
        return Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def start_node(self, port: int) -> None:
        folder = os.path.join(self.root, str(port))
        os.makedirs(folder, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                folder,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                with self.client(port) as client:
                    client.ping()
                    return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {port} did not start")

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now."""
        with self.client(self.live_port()) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return int(master[1])
        raise RuntimeError(f"no master serves slot {slot}")

    def masters(self) -> list[int]:
        """The ports of the masters that serve slots now."""
        with self.client(self.live_port()) as client:
            slots = client.execute_command("CLUSTER", "SLOTS")
        return sorted({int(master[1]) for _, _, master, *_ in slots})

    def keys_on(self, port: int, match: str) -> list[bytes]:
        """The keys matching ``match`` that the node on ``port`` holds."""
        with self.client(port) as client:
            return list(client.scan_iter(match=match, count=1000))

    def live_port(self) -> int:
        return next(p for p, proc in self.procs.items() if proc.poll() is None)

    def kill(self, port: int) -> None:
        """SIGKILL one node."""
        proc = self.procs[port]
        proc.kill()
        proc.wait()

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until every live node says the cluster is ok, every slot has a live master and
        every replica is in sync with its master."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(self._ok(p) for p, proc in self.procs.items() if proc.poll() is None):
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not become healthy")

    def _ok(self, port: int) -> bool:
        with self.client(port) as client:
            info = client.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
            live = {p for p, proc in self.procs.items() if proc.poll() is None}
            covered = 0
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(master[1]) not in live:
                    return False
                covered += end - start + 1
            if covered != 16384:
                return False
            replication = client.info("replication")
            return replication["role"] == "master" or replication["master_link_status"] == "up"

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def available() -> bool:
    return shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None


def start_cluster() -> RedisCluster:
    """Start six nodes and join them: three masters, each with one replica."""
    cluster = RedisCluster(tempfile.mkdtemp(prefix="rw-cluster-"), _free_ports(6))
    try:
        for port in cluster.ports:
            cluster.start_node(port)
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{port}" for port in cluster.ports],
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        cluster.wait_healthy(60)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextmanager
def cluster_url(url: str | None) -> Iterator[str]:
    """``url`` if given, else the URL of a Cluster started for the block and stopped after it."""
    if url is not None:
        yield url
        return
    cluster = start_cluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()
