"""Reads of a session's entries in Redis: by id, by position, and the channel's head.

A session's entries are a stream, ``rw:{<session>}:log``, with ids
``<serial>-0``; its ``ids`` sorted set maps the newest entry ids to their serials.
Every read is one command or one script, in one round trip. The append script
writes both keys (``redis_lua``).
"""

from __future__ import annotations

from typing import Any

from transport.errors import VALIDATION_ERROR, RunwireError

from ._base import Appended, StoredEntry, read_position
from ._redis_keys import RedisKeys
from ._redis_lua import evalsha
from ._redis_pipeline import Pipeline, check

__all__ = ["EntryLog"]


def _serial_of(stream_id: bytes) -> int:
    return int(stream_id.partition(b"-")[0])


class EntryLog:
    """Reads of sessions' entries, on a store's keys and pipeline."""

    def __init__(self, keys: RedisKeys, pipeline: Pipeline) -> None:
        self._keys = keys
        self._pipeline = pipeline

    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored entry with this id, within the dedup window (``duplicate=True``), or None."""
        keys = self._keys.session(session_id)
        (reply,) = await self._pipeline.call(evalsha("find", [keys[2], keys[1]], [entry_id]))
        check(reply)
        return None if reply is None else Appended(int(reply[0]), bytes(reply[1]), duplicate=True)

    async def read(
        self, session_id: str, after: int | None, before: int | None, limit: int
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (``Store.read``)."""
        if limit < 1:
            raise RunwireError(VALIDATION_ERROR, f"limit must be at least 1, not {limit}")
        log = self._keys.session(session_id)[1]
        after, before = read_position(after), read_position(before)
        if before is not None and before <= 1:
            return []
        high = "+" if before is None else f"{before - 1}-0"
        if after is not None:
            low = f"{max(after, 0) + 1}-0"
            command: tuple[Any, ...] = ("XRANGE", log, low, high, "COUNT", limit)
        else:
            command = ("XREVRANGE", log, high, "-", "COUNT", limit)
        (reply,) = await self._pipeline.call(command)
        check(reply)
        entries = [StoredEntry(_serial_of(stream_id), fields[1]) for stream_id, fields in reply]
        return entries if after is not None else entries[::-1]

    async def head(self, session_id: str) -> tuple[str | None, int]:
        """The channel's epoch (None if it does not exist) and newest serial."""
        meta = self._keys.session(session_id)[0]
        (reply,) = await self._pipeline.call(("HMGET", meta, "e", "s"))
        check(reply)
        epoch, last = reply
        return (None if epoch is None else epoch.decode()), int(last or 0)

    async def since(
        self, session_id: str, after: int, limit: int
    ) -> tuple[str | None, list[StoredEntry]]:
        """The channel's epoch and up to ``limit`` stored entries after ``after``, read
        together (one script)."""
        keys = self._keys.session(session_id)
        (reply,) = await self._pipeline.call(evalsha("since", keys[:2], [after, limit]))
        check(reply)
        epoch = None if reply[0] is None else reply[0].decode()
        pairs = reply[1:]
        return epoch, [
            StoredEntry(_serial_of(i), d) for i, d in zip(pairs[::2], pairs[1::2], strict=True)
        ]
