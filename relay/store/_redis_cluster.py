"""``RedisStore`` on a Redis Cluster: which node to talk to, and when to look again.

A store URL selects Cluster mode with the scheme ``redis+cluster://`` (or
``rediss+cluster://``) or ``?cluster=1``; the host and port are a seed, any
node of the Cluster. In Cluster mode the store wraps its key prefix in a hash
tag (``rw:`` becomes ``{rw:}``), so every key and pub/sub channel of one
prefix lives in one hash slot. Every script then touches keys of one slot
only, and stays atomic as on a standalone Redis. The prefix's slot has one
master and its replicas; ``?shards=N`` spreads the sessions over N prefixes,
whose slots ``shard_prefix`` spaces evenly (``relay.store._redis_shards``).

``ClusterMap`` finds the master serving the prefix's slot with ``CLUSTER
SLOTS``, asked of the nodes it knows, then of the seed. The store asks it again
whenever a connection breaks or Redis answers ``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN`` or ``MASTERDOWN``. So after a failover or a resharding the
store follows the slot to its new master by itself.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    RedisError,
    TryAgainError,
)

__all__ = ["RETRYABLE", "SLOTS", "ClusterMap", "cluster_prefix", "shard_prefix", "split_url"]

SLOTS = 16384
"""Hash slots of a Redis Cluster."""

RETRYABLE: tuple[type[RedisError], ...] = (
    MovedError,
    AskError,
    TryAgainError,
    ClusterDownError,
    MasterDownError,
)
"""Replies that mean the command did not run and should go again, after a new look."""

_TRUE = ("1", "true", "yes", "on")


def split_url(url: str) -> tuple[str, bool]:
    """``url`` as redis-py reads it (``redis://``/``rediss://``, no ``cluster`` option),
    and whether it asks for Cluster mode."""
    parts = urlsplit(url)
    scheme = parts.scheme
    cluster = scheme.endswith("+cluster")
    if cluster:
        scheme = scheme.removesuffix("+cluster")
    query = parse_qsl(parts.query)
    kept = []
    for name, value in query:
        if name == "cluster":
            cluster = cluster or value.lower() in _TRUE
        else:
            kept.append((name, value))
    return urlunsplit(parts._replace(scheme=scheme, query=urlencode(kept))), cluster


def cluster_prefix(prefix: str) -> str:
    """The key prefix of Cluster mode: ``prefix`` as a hash tag, one slot for all."""
    return "{" + prefix + "}"


def shard_prefix(prefix: str, shard: int, shards: int) -> str:
    """The key prefix of ``shard`` of ``shards``: ``prefix`` itself for shard 0, else
    ``prefix`` with a suffix (``<shard>.<n>:``) chosen so that its slot sits near
    ``shard / shards`` of the way round the slots from the slot of ``prefix``.

    Evenly spaced slots land on different masters of a Cluster whose masters serve
    equal runs of slots, which is how ``redis-cli --cluster create`` lays them out.
    The suffix depends on ``prefix``, ``shard`` and ``shards`` only, so every node
    computes the same.
    """
    if shard == 0:
        return prefix
    start = key_slot(prefix.encode())
    target = (start + shard * SLOTS // shards) % SLOTS
    near = max(1, SLOTS // (8 * shards))
    n = 0
    while True:
        candidate = f"{prefix}{shard}.{n}:"
        gap = (key_slot(candidate.encode()) - target) % SLOTS
        if min(gap, SLOTS - gap) <= near:
            return candidate
        n += 1


class ClusterMap:
    """Where the master of one hash slot is, looked up from the Cluster itself."""

    def __init__(self, seed: tuple[str, int], tag: str, kwargs: dict[str, Any]) -> None:
        self.slot = key_slot(tag.encode())
        self.seed = seed
        self.master: tuple[str, int] = seed
        self.nodes: list[tuple[str, int]] = [seed]
        """Every node the last look found (tried first at the next look)."""
        self.looks = 0
        """How many times the map was read from the Cluster."""
        self._kwargs = {
            k: v
            for k, v in kwargs.items()
            if k in ("username", "password", "ssl", "ssl_cert_reqs", "ssl_ca_certs")
        }
        self._lock = asyncio.Lock()

    async def locate(self, timeout: float) -> tuple[str, int]:
        """Ask the known nodes, then the seed, which master serves the slot; the first that
        answers is believed. Raises ``RedisError`` if none does."""
        async with self._lock:
            last: Exception | None = None
            tried: set[tuple[str, int]] = set()
            for node in [self.master, *self.nodes, self.seed]:
                if node in tried:
                    continue
                tried.add(node)
                try:
                    found = await self._ask(node, timeout)
                except (RedisError, OSError, TimeoutError) as exc:
                    last = exc
                    continue
                if found is not None:
                    self.master = found
                    self.looks += 1
                    return found
            raise RedisError(f"no Cluster node says who serves slot {self.slot}: {last}")

    async def _ask(self, node: tuple[str, int], timeout: float) -> tuple[str, int] | None:
        client = Redis(
            host=node[0],
            port=node[1],
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            protocol=2,
            retry=Retry(NoBackoff(), 0),  # a dead node must not cost backoff: ask the next
            **self._kwargs,
        )
        try:
            ranges = await cast(Any, client).execute_command("CLUSTER SLOTS")
        finally:
            await client.aclose()
        found: tuple[str, int] | None = None
        nodes: list[tuple[str, int]] = []
        for start, end, master, *replicas in _ranges(ranges):
            for where in (master, *replicas):
                address = (_host(where[0]) or node[0], int(where[1]))
                if address not in nodes:
                    nodes.append(address)
            if start <= self.slot <= end:
                found = (_host(master[0]) or node[0], int(master[1]))
        if nodes:
            self.nodes = nodes
        return found


def _ranges(reply: Any) -> list[Any]:
    """``CLUSTER SLOTS`` as a list of ``[start, end, master, replica, ...]``: redis-py parses
    the reply into a dict of slot ranges; a raw one is a list already."""
    if isinstance(reply, dict):
        out = []
        for (start, end), node in reply.items():
            master = node["primary"]
            replicas = node.get("replicas", [])
            out.append([int(start), int(end), master, *replicas])
        return out
    return [list(r) for r in reply]


def _host(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
