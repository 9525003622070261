"""Where ``RedisStore`` connects: its connection pool, and in Cluster mode the slot's master.

The store's own connections (the command pipeline, the pub/sub listener) are
made here without redis-py's per-reply timeouts: the store times a round trip
as a whole. ``client()`` gives the relay's other Redis users (the dispatch
reader, the sweeper) a redis-py client on the same server, or in Cluster mode a
``RedisCluster`` that follows the slots itself.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from transport.errors import VALIDATION_ERROR, RunwireError

from ._redis_cluster import ClusterMap
from ._redis_options import RedisOptions

__all__ = ["Connections"]


class Connections:
    """The connections of one store URL."""

    def __init__(self, options: RedisOptions) -> None:
        try:
            self.pool = ConnectionPool.from_url(
                options.redis_url,
                protocol=2,
                decode_responses=False,
                socket_timeout=options.socket_timeout,
                socket_connect_timeout=options.connect_timeout,
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as exc:
            raise RunwireError(VALIDATION_ERROR, f"store URL {options.url!r}: {exc}") from None
        self.socket_timeout = options.socket_timeout
        self.cluster: ClusterMap | None = None
        """In Cluster mode, which master serves the store's slot."""
        if options.cluster:
            self.cluster = ClusterMap(options.seed, options.prefix, self.pool.connection_kwargs)
        self._clients: list[Any] = []  # Cluster mode: the clients ``client()`` made

    def new_connection(self) -> AbstractConnection:
        """A new, unconnected connection to this store's Redis, without redis-py's timeouts.

        The store times each round trip as a whole (``Pipeline``), and the listener
        watches its connection for silence. The ``socket_timeout`` of redis-py would instead
        wrap every send in a task of its own (``asyncio.wait_for``) and every reply read
        in a timer: the larger part of a round trip's cost on the relay.
        """
        kwargs = {**self.pool.connection_kwargs, "socket_timeout": None}
        if self.cluster is not None:
            kwargs["host"], kwargs["port"] = self.cluster.master
        return self.pool.connection_class(**kwargs)

    def client(self) -> Any:
        """A ``redis.asyncio.Redis`` on this store's pool, for relay-node coordination
        (in Cluster mode a ``RedisCluster``, which follows the prefix's slot itself)."""
        if self.cluster is not None:
            from redis.asyncio.cluster import RedisCluster

            kwargs = self.pool.connection_kwargs
            client = RedisCluster(
                host=self.cluster.seed[0],
                port=self.cluster.seed[1],
                protocol=2,
                decode_responses=False,
                socket_timeout=kwargs.get("socket_timeout"),
                socket_connect_timeout=kwargs.get("socket_connect_timeout"),
                username=kwargs.get("username"),
                password=kwargs.get("password"),
            )
            self._clients.append(client)  # closed with the store
            return client
        from redis.asyncio import Redis

        return Redis(connection_pool=self.pool)

    async def locate(self) -> None:
        """In Cluster mode, look up which master serves the store's slot now (the next
        connection goes there); nothing on a standalone Redis."""
        if self.cluster is not None:
            await self.cluster.locate(self.socket_timeout)

    async def aclose(self) -> None:
        """Close the clients ``client()`` made and the pool's connections."""
        for client in self._clients:
            await client.aclose()
        await self.pool.disconnect()
