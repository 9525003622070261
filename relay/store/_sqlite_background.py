"""The background thread of ``SQLiteStore``: its reads and its checkpoints.

Reads run on one thread with a connection of their own, so the event loop never
waits for the disk. Automatic checkpoints are off: after ``CHECKPOINT_COMMITS``
commits, or a second after the first, the thread copies the WAL into the file.
Two ``PASSIVE`` passes run alongside the writes, then a ``FULL`` one, so that the
next commit can start the WAL over.

See docs/explanation/stores.md for why the writes stay on the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio.to_thread

from transport.errors import STORE_UNAVAILABLE, RunwireError

from ._base import log
from ._sqlite_file import connect

__all__ = ["CHECKPOINT_COMMITS", "Background"]

T = TypeVar("T")

CHECKPOINT_COMMITS = 500
"""Commits between checkpoints (a few pages each)."""


class Background:
    """One thread and its connection to the file at ``path``, for reads and checkpoints."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="runwire-sqlite")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unchecked = 0  # commits since the last checkpoint
        self._checkpointing = False  # set on the loop, cleared on the background thread
        self._timer: asyncio.TimerHandle | None = None

    async def open(self) -> None:
        """Connect; raises ``RunwireError(STORE_UNAVAILABLE)`` if it can't."""
        self._loop = asyncio.get_running_loop()
        self._conn = await anyio.to_thread.run_sync(lambda: connect(self.path, wait=True))

    async def aclose(self) -> None:
        """Let queued reads finish, then close the connection."""
        if self._timer is not None:
            self._timer.cancel()
        await anyio.to_thread.run_sync(self._executor.shutdown)
        conn, self._conn = self._conn, None
        if conn is not None:
            await anyio.to_thread.run_sync(conn.close)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the background thread; raises ``RunwireError(STORE_UNAVAILABLE)``."""
        conn = self._conn
        if conn is None:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")

        def run() -> T:
            try:
                return fn(conn)
            except RunwireError:
                raise
            except Exception as exc:
                raise RunwireError(STORE_UNAVAILABLE, f"SQLite read failed: {exc}") from None

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    def count_commit(self) -> None:
        """One more commit in the WAL: checkpoint after ``CHECKPOINT_COMMITS`` or a second."""
        self._unchecked += 1
        if self._unchecked >= CHECKPOINT_COMMITS and not self._checkpointing:
            self.checkpoint()
        elif self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(1.0, self.checkpoint)

    def checkpoint(self) -> None:
        """Have the background thread copy the WAL into the file (unless it is at it already).

        Two ``PASSIVE`` passes run alongside the writes, then a ``FULL`` one
        holds them off while it copies what they added meanwhile, so that the
        next commit can start the WAL over. Reads wait meanwhile, so the
        ``FULL`` pass never waits for a read of this store with the lock held.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        conn = self._conn
        if conn is None or self._loop is None or not self._unchecked:
            return
        if self._checkpointing:  # the last one is still at it: look again later
            self._timer = self._loop.call_later(1.0, self.checkpoint)
            return
        self._unchecked = 0
        self._checkpointing = True

        def checkpoint() -> None:
            try:
                for mode in ("PASSIVE", "PASSIVE", "FULL"):
                    conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
            except sqlite3.Error as exc:
                log.warning("SQLite checkpoint of %s failed: %s", self.path, exc)
            finally:
                self._checkpointing = False

        self._executor.submit(checkpoint)
