"""The relay's stores, chosen by URL with ``open_store``.

* ``memory://``: nothing kept across processes (tests).
* ``sqlite:///relative.db``, ``sqlite:////absolute/path.db`` (as SQLAlchemy
  writes them): one SQLite file, the default.
* ``redis://host:port/db`` (``rediss://`` for TLS): several relay nodes sharing
  sessions (``pip install 'runwire[redis]'``).
  ``redis+cluster://host:port`` (or ``?cluster=1``): the same on a Redis Cluster,
  any node a seed. ``?shards=N`` spreads the sessions over N hash slots, so
  that every master of the Cluster takes a part of the writes.

A custom store implements ``Store``. The modules named ``_*.py`` are internal. How each store
works is in docs/explanation/stores.md.
"""

from __future__ import annotations

from transport.errors import VALIDATION_ERROR, RunwireError

from ._base import Appended, ChannelInfo, Gone, Store, StoredEntry
from ._memory import MemoryStore
from ._sqlite import SQLiteStore

__all__ = [
    "Appended",
    "ChannelInfo",
    "Gone",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "StoredEntry",
    "open_store",
]

_FORMS = "memory://, sqlite:///relative.db, sqlite:////absolute/path.db or redis://host:port/db"


def open_store(url: str) -> Store:
    """The store that ``url`` names, not started yet (``await store.start()`` before use).

    Raises ``RunwireError(VALIDATION_ERROR)`` for a URL that names no store this
    relay has.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise RunwireError(VALIDATION_ERROR, f"store URL {url!r} has no scheme; use {_FORMS}")
    scheme = scheme.lower()
    if scheme == "memory":
        if rest:
            raise RunwireError(VALIDATION_ERROR, f"store URL {url!r}: write just memory://")
        return MemoryStore()
    if scheme == "sqlite":
        # sqlite:/// + path: the third slash ends the (empty) host part.
        if not rest.startswith("/") or len(rest) == 1:
            raise RunwireError(
                VALIDATION_ERROR, f"store URL {url!r} names no SQLite file; use {_FORMS}"
            )
        if "?" in rest or "#" in rest:
            raise RunwireError(
                VALIDATION_ERROR, f"store URL {url!r}: the SQLite store takes no options"
            )
        return SQLiteStore(rest[1:])
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        try:
            from ._redis_shards import redis_store
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] not in ("redis", "hiredis"):
                raise
            raise RunwireError(
                VALIDATION_ERROR,
                f"store URL {url!r} needs the redis and hiredis packages ({exc}): "
                "pip install 'runwire[redis]'",
            ) from None
        return redis_store(url)
    raise RunwireError(VALIDATION_ERROR, f"unknown store URL scheme {scheme!r}; use {_FORMS}")
