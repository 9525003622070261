"""The options of a ``redis://`` store URL, read and checked.

A URL names Redis as redis-py reads it, plus the store's own query options
(``URL_OPTIONS``), which win over the keyword arguments of ``RedisStore``. The
scheme ``redis+cluster://`` or ``?cluster=1`` selects Cluster mode, where the
key prefix becomes a hash tag (``relay.store._redis_cluster``). With
``shards=N`` the store is N stores, each with a prefix of its own
(``relay.store._redis_shards``). A bad option is
``RunwireError(VALIDATION_ERROR)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from transport.errors import VALIDATION_ERROR, RunwireError

from ._redis_cluster import cluster_prefix, shard_prefix, split_url

__all__ = ["MAX_SHARDS", "URL_OPTIONS", "RedisOptions", "read_url"]

MAX_SHARDS = 64
"""The most ``shards`` a store URL may ask for."""

URL_OPTIONS = (
    "prefix",
    "max_history",
    "dedup_window",
    "history_ttl",
    "linger_ms",
    "socket_timeout",
    "connect_timeout",
    "wait_replicas",
    "shards",
)
"""Query options of a ``redis://`` URL that are the store's own, not redis-py's."""


@dataclass(frozen=True)
class RedisOptions:
    """A store URL, read."""

    url: str
    """The URL as given."""
    redis_url: str
    """The URL redis-py is given: without the store's options, database 0 in Cluster mode."""
    cluster: bool
    seed: tuple[str, int]
    """The host and port of the URL (in Cluster mode, any node of the Cluster)."""
    where: str
    """``host:port``, for messages."""
    prefix: str
    """The key prefix; in Cluster mode a hash tag."""
    max_history: int
    dedup_window: int
    history_ttl: float | None
    linger_ms: float
    socket_timeout: float
    connect_timeout: float
    wait_replicas: int
    shards: int
    """How many hash slots the store spreads its sessions over (``shard_prefix``)."""
    shard: int
    """Which of them this store is: 0 to ``shards - 1``; ``prefix`` is its own."""


def read_url(
    url: str,
    *,
    prefix: str,
    max_history: int,
    dedup_window: int,
    history_ttl: float | None,
    linger_ms: float,
    socket_timeout: float,
    connect_timeout: float,
    wait_replicas: int,
    shards: int = 1,
    shard: int | None = 0,
) -> RedisOptions:
    """``url`` read, its options over these defaults; raises ``RunwireError(VALIDATION_ERROR)``.

    ``shard`` None: the caller is a whole store, so a URL of several shards is refused.
    """
    given = url
    url, cluster = split_url(url)
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    options: dict[str, str] = {k: query.pop(k) for k in URL_OPTIONS if k in query}
    try:
        prefix = options.get("prefix", prefix)
        max_history = int(options.get("max_history", max_history))
        dedup_window = int(options.get("dedup_window", dedup_window))
        ttl = options.get("history_ttl")
        history_ttl = float(ttl) if ttl is not None else history_ttl
        linger_ms = float(options.get("linger_ms", linger_ms))
        socket_timeout = float(options.get("socket_timeout", socket_timeout))
        connect_timeout = float(options.get("connect_timeout", connect_timeout))
        wait_replicas = int(options.get("wait_replicas", wait_replicas))
        shards = int(options.get("shards", shards))
    except ValueError as exc:
        raise RunwireError(VALIDATION_ERROR, f"store URL {given!r}: {exc}") from None
    if not 0 <= wait_replicas <= 16:
        raise RunwireError(VALIDATION_ERROR, f"wait_replicas must be 0 to 16, not {wait_replicas}")
    if not 1 <= shards <= MAX_SHARDS:
        raise RunwireError(VALIDATION_ERROR, f"shards must be 1 to {MAX_SHARDS}, not {shards}")
    if shard is None:
        if shards > 1:
            raise RunwireError(
                VALIDATION_ERROR,
                f"store URL {given!r} asks for {shards} shards: open it with "
                "relay.store.open_store, which makes a ShardedRedisStore",
            )
        shard = 0
    if not 0 <= shard < shards:
        raise RunwireError(VALIDATION_ERROR, f"shard {shard} of {shards} does not exist")
    if "{" in prefix or "}" in prefix:
        raise RunwireError(VALIDATION_ERROR, f"Redis key prefix {prefix!r} has a brace")
    if dedup_window < 1 or max_history < dedup_window:
        raise RunwireError(
            VALIDATION_ERROR,
            f"need 1 <= dedup_window ({dedup_window}) <= max_history ({max_history})",
        )
    if history_ttl is not None and history_ttl <= 0:
        raise RunwireError(VALIDATION_ERROR, "history_ttl must be positive (or None)")
    if not (0 < socket_timeout <= 3600 and 0 < connect_timeout <= 3600):
        raise RunwireError(
            VALIDATION_ERROR, "socket_timeout and connect_timeout must be positive seconds"
        )
    if not 0 <= linger_ms <= 1000:
        raise RunwireError(VALIDATION_ERROR, f"linger_ms must be 0 to 1000, not {linger_ms}")
    if cluster:
        if parts.path not in ("", "/", "/0"):
            raise RunwireError(
                VALIDATION_ERROR, f"store URL {given!r}: a Redis Cluster has database 0 only"
            )
        parts = parts._replace(path="/0")
    prefix = shard_prefix(prefix, shard, shards)
    if cluster:
        prefix = cluster_prefix(prefix)
    where = parts.hostname or "localhost"
    if parts.port:
        where += f":{parts.port}"
    return RedisOptions(
        url=given,
        redis_url=urlunsplit(parts._replace(query=urlencode(query))),
        cluster=cluster,
        seed=(parts.hostname or "localhost", parts.port or 6379),
        where=where,
        prefix=prefix,
        max_history=max_history,
        dedup_window=dedup_window,
        history_ttl=history_ttl,
        linger_ms=linger_ms,
        socket_timeout=socket_timeout,
        connect_timeout=connect_timeout,
        wait_replicas=wait_replicas,
        shards=shards,
        shard=shard,
    )
