"""The SQLite file of ``SQLiteStore``: its connections, its schema and the lock beside it.

A connection is set up for WAL mode with ``synchronous=NORMAL`` and no automatic
checkpoints; the writer's (``wait=False``) with ``synchronous=OFF``. The writer
never checkpoints, so that only drops the sync of the WAL header when a commit
starts the WAL over, which stalled the event loop for tens of milliseconds on a
busy disk. The background connection's checkpoints still sync the WAL before
copying it and the file after, so a power cut still loses at most the newest
commits. One relay at a time serves a file: it holds an exclusive ``flock``
on ``<file>-relay.lock``, with its pid written in, and removes that file when it
stops. A second relay is refused with ``STORE_UNAVAILABLE``.
"""

from __future__ import annotations

import os
import sqlite3

from transport.errors import STORE_UNAVAILABLE, RunwireError

from ._base import log

__all__ = [
    "BUSY_TIMEOUT",
    "SCHEMA",
    "WAL_LIMIT",
    "connect",
    "is_at",
    "lock",
    "lock_beside",
    "unlock",
]

WAL_LIMIT = 16 * 2**20
"""Bytes the WAL file is cut back to when it starts over (``journal_size_limit``)."""

BUSY_TIMEOUT = 5.0
"""Seconds a write waits for another connection's write lock before it fails."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS channels (
    session_id TEXT PRIMARY KEY,
    epoch TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    serial INTEGER NOT NULL,
    entry_id TEXT NOT NULL,
    data BLOB NOT NULL,
    UNIQUE (session_id, serial),
    UNIQUE (session_id, entry_id)
);
CREATE TABLE IF NOT EXISTS runs (
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    record BLOB NOT NULL,
    status TEXT NOT NULL,
    agent TEXT NOT NULL,
    PRIMARY KEY (session_id, run_id)
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, agent);
"""


def connect(path: str, *, wait: bool) -> sqlite3.Connection:
    """A connection for one thread that waits for locks (or, ``wait=False``, never).

    Raises ``RunwireError(STORE_UNAVAILABLE)``.
    """
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
        conn.executescript(SCHEMA)
        if not wait:  # the writer, on the event loop: no sync there (module docstring)
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA synchronous = OFF")
    except sqlite3.Error as exc:
        raise RunwireError(
            STORE_UNAVAILABLE, f"cannot open the SQLite database {path!r}: {exc}"
        ) from None
    return conn


def lock(path: str) -> int:
    """An open descriptor of ``path`` with an exclusive ``flock`` on it, this pid written in.

    Raises ``RunwireError(STORE_UNAVAILABLE)`` if another descriptor holds the lock. A
    relay that stops removes its lock file (``unlock``) while holding it. So a lock taken
    on a file no longer at ``path``, removed between our open and our ``flock``, is let
    go and taken again on the file now there: two relays never hold locks on two files.
    """
    import fcntl  # POSIX; imported here so that the module still imports elsewhere

    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunwireError(
                STORE_UNAVAILABLE, f"cannot open the relay's lock file {path!r}: {exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            database = path.removesuffix("-relay.lock")
            raise RunwireError(
                STORE_UNAVAILABLE,
                f"the SQLite database {database!r} is in use by another relay (pid {holder}): "
                "one relay at a time serves an SQLite file; stop it or use another file "
                "(several relay nodes need Redis)",
                details={"in_use": path, "pid": holder},
            ) from None
        if is_at(fd, path):
            break
        os.close(fd)  # its holder removed it meanwhile: lock the one there now
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def lock_beside(database: str) -> tuple[str, int]:
    """``lock`` on ``<database>-relay.lock`` beside the real file, however it is named (a
    symlink, a relative path); returns the lock file's path and descriptor."""
    path = f"{os.path.realpath(database)}-relay.lock"
    return path, lock(path)


def is_at(fd: int, path: str) -> bool:
    """True if ``fd`` is the file at ``path`` (not one removed or replaced since)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)


def unlock(fd: int, path: str) -> None:
    """Remove the lock file ``fd`` holds (still holding it), then let it go."""
    try:
        if is_at(fd, path):
            os.unlink(path)
    except OSError as exc:  # a directory made read-only meanwhile: the file stays, harmless
        log.warning("cannot remove the relay's lock file %r: %s", path, exc)
    finally:
        os.close(fd)
