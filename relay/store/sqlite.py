"""``sqlite:///path``: channels and Run records in one SQLite file (the default store).

Theory of operation
-------------------
Writes run on the event loop's thread; reads and checkpoints on one background
thread with its own connection. In WAL mode with ``synchronous=NORMAL`` a
commit adds a few pages to the WAL without an ``fsync``: tens of microseconds
on the loop. (A writer thread must win the GIL back from a busy loop after
each SQLite call, up to ``sys.getswitchinterval()`` each time: that made a
loaded relay's latency tail tens of milliseconds long.)

Writes (``append``, ``put_runs``) join a batch whose first job schedules a
flush with ``loop.call_soon``, so what is queued in one iteration of the loop
shares one transaction (group commit). Under load the flush waits until
``LINGER`` after the previous commit, so that one commit carries what arrives
meanwhile (a few pages of WAL per commit, however many entries it holds); a
write to an idle store commits at once. ``append`` queues its job before it
first yields: appends are sequenced in call order. The serial is given in the
transaction: the channel's highest stored serial plus one, kept between
batches and read again when ``PRAGMA data_version`` says another connection
(store, process) committed. So a failed commit (each job of the batch raises
``RunwireError(STORE_UNAVAILABLE)``) neither skips nor repeats a serial, and
stores may share a file. While another connection holds the write lock the
flush is retried every millisecond (for ``BUSY_TIMEOUT`` seconds): the loop
never waits for it. ``expect_last`` is checked against the same head; a
conflicting append fails alone (``RunwireError(CONFLICT)``). After the commit
the flush wakes the callers and calls the subscribers in job order, so in
serial order; they see this store object's appends only.

Dedup: ``open_channel`` loads the channel's newest ``DEDUP_WINDOW`` entry ids
and each append adds its id (the pending job, then the serial), so ``find``
and ``append`` answer repeats without the disk. An older repeat hits the
unique ``(session_id, entry_id)`` index: the batch is rolled back and written
again one entry at a time, and the repeat takes no serial and returns the
original.

The writer's connection runs with ``synchronous=OFF``: it never checkpoints,
so what that changes is only the sync of the WAL header when a commit starts
the WAL over, which would otherwise stall the event loop (tens of
milliseconds on a busy disk). The background connection keeps ``NORMAL``:
every checkpoint syncs the WAL before copying it and the file after, so a
power cut still loses at most the newest commits, and the writer switches back
to ``NORMAL`` before it closes (and checkpoints).

Automatic checkpoints are off: after ``CHECKPOINT_COMMITS`` commits (or a
second after the first) the background thread runs two ``PASSIVE``
checkpoints alongside the writes, then a ``FULL`` one that holds them off
for a moment, so that the next commit starts the WAL over. A SIGKILL loses nothing
acknowledged: a commit is in the WAL file before ``append`` returns (a power
cut may lose the newest commits).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TypeAlias, TypeVar

import anyio.to_thread

from transport.codec import dumps, loads, splice_serial
from transport.errors import (
    CONFLICT,
    INTERNAL_ERROR,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.runs import RunRecord

from .base import (
    Appended,
    ChannelInfo,
    Gone,
    OnEntry,
    OnReset,
    Store,
    StoredEntry,
    Subscribers,
    Unsubscribe,
    log,
    read_position,
)

__all__ = [
    "BUSY_TIMEOUT",
    "CHECKPOINT_COMMITS",
    "DEDUP_WINDOW",
    "LINGER",
    "WAL_LIMIT",
    "SQLiteStore",
]

T = TypeVar("T")

DEDUP_WINDOW = 10_000
"""How many of a channel's newest entry ids ``find`` answers from memory."""

CHECKPOINT_COMMITS = 500
"""Commits between checkpoints (a few pages each)."""

WAL_LIMIT = 16 * 2**20
"""Bytes the WAL file is cut back to when it starts over (``journal_size_limit``)."""

LINGER = 0.001
"""Seconds a flush waits after the previous commit (group commit under load)."""

BUSY_TIMEOUT = 5.0
"""Seconds a write waits for another connection's write lock before it fails."""

_RETRY = 0.001

_SCHEMA = """
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

_INSERT_ENTRY = (
    "INSERT INTO entries (session_id, serial, entry_id, data) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (session_id, entry_id) DO NOTHING"
)
_SELECT_HEAD = "SELECT COALESCE(MAX(serial), 0) FROM entries WHERE session_id = ?"
_UPSERT_RUN = (
    "INSERT INTO runs (session_id, run_id, record, status, agent) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_id) DO UPDATE SET"
    " record = excluded.record, status = excluded.status, agent = excluded.agent"
)


@dataclass(eq=False, slots=True)
class _Write:
    """One ``append`` (``entry_id`` set) or ``put_runs`` (``entry_id`` None) in a batch."""

    session_id: str
    entry_id: str | None
    data: bytes
    runs: Sequence[RunRecord]
    expect_last: int | None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    value: Appended | None = None
    error: RunwireError | None = None


_Outcome: TypeAlias = Appended | RunwireError | None
_Recent: TypeAlias = OrderedDict[str, int | _Write]
"""A channel's newest entry ids: the serial, or the job still writing it."""


def _connect(path: str, *, wait: bool) -> sqlite3.Connection:
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
        conn.executescript(_SCHEMA)
        if not wait:  # the writer, on the event loop: see the module's docstring
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA synchronous = OFF")
    except sqlite3.Error as exc:
        raise RunwireError(
            STORE_UNAVAILABLE, f"cannot open the SQLite database {path!r}: {exc}"
        ) from None
    return conn


def _lock(path: str) -> int:
    """An open descriptor of ``path`` with an exclusive ``flock`` on it, this pid written in.

    Raises ``RunwireError(STORE_UNAVAILABLE)`` if another descriptor holds the lock. A
    relay that stops removes its lock file (``_unlock``) while holding it, so a lock taken
    on a file no longer at ``path`` (removed between our open and our ``flock``) is let go
    and taken again on the file now there: two relays never hold locks on two files.
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
        if _is_at(fd, path):
            break
        os.close(fd)  # its holder removed it meanwhile: lock the one there now
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock_beside(database: str) -> tuple[str, int]:
    """``_lock`` on ``<database>-relay.lock`` beside the real file, however it is named (a
    symlink, a relative path); returns the lock file's path and descriptor."""
    path = f"{os.path.realpath(database)}-relay.lock"
    return path, _lock(path)


def _is_at(fd: int, path: str) -> bool:
    """True if ``fd`` is the file at ``path`` (not one removed or replaced since)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)


def _unlock(fd: int, path: str) -> None:
    """Remove the lock file ``fd`` holds (still holding it), then let it go."""
    try:
        if _is_at(fd, path):
            os.unlink(path)
    except OSError as exc:  # a directory made read-only meanwhile: the file stays, harmless
        log.warning("cannot remove the relay's lock file %r: %s", path, exc)
    finally:
        os.close(fd)


class SQLiteStore(Store):
    """A ``Store`` in one SQLite file; see the module docstring and ``relay.store.base``.

    ``await start()`` opens (or creates) the file and ``await aclose()`` commits
    what is queued and closes it; other calls raise
    ``RunwireError(STORE_UNAVAILABLE)`` before ``start()`` or after ``aclose()``.
    ``commits`` counts the write transactions committed so far.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.url = f"sqlite:///{self.path}"
        self.commits = 0
        self._recent: dict[str, _Recent | None] = {}
        """Open channels' newest ids; None until a channel that had none gets one."""
        self._subscribers = Subscribers()
        self._closed = False
        self._ok = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # The writer, on the event loop:
        self._conn: sqlite3.Connection | None = None
        self._batch: list[_Write] = []
        self._flush_handle: asyncio.Handle | None = None
        self._busy_since: float | None = None
        self._one_by_one = False
        self._heads: dict[str, int] = {}
        self._version = -1
        self._committed_at = -LINGER  # loop time of the last commit
        # The background thread, for reads and checkpoints:
        self._reader: sqlite3.Connection | None = None
        self._background = ThreadPoolExecutor(1, thread_name_prefix="runwire-sqlite")
        self._unchecked = 0  # commits since the last checkpoint
        self._checkpointing = False  # set on the loop, cleared on the background thread
        self._checkpoint_timer: asyncio.TimerHandle | None = None
        self._claim: int | None = None  # the lock file's descriptor, while claimed
        self._claim_path = ""  # and its path

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Open or create the database; raises ``RunwireError(STORE_UNAVAILABLE)`` if it can't."""
        if self._loop is not None:
            return
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is closed")
        self._loop = asyncio.get_running_loop()
        try:
            self._conn = await anyio.to_thread.run_sync(lambda: _connect(self.path, wait=False))
            self._reader = await anyio.to_thread.run_sync(lambda: _connect(self.path, wait=True))
        except BaseException:
            await self.aclose()
            raise
        self._ok = True

    async def aclose(self) -> None:
        """Commit every queued write, then close the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        while self._batch:  # commit what is queued, waiting out another's lock if need be
            if self._flush_handle is not None:
                self._flush_handle.cancel()
            self._flush()
            if self._batch:
                await anyio.sleep(_RETRY)
        self._ok = False
        self._subscribers.clear()
        if self._checkpoint_timer is not None:
            self._checkpoint_timer.cancel()
        await anyio.to_thread.run_sync(self._background.shutdown)  # lets queued reads finish
        if self._conn is not None:  # it closes last and checkpoints: with the syncs
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA synchronous = NORMAL")
        for conn in (self._reader, self._conn):  # the last one to close checkpoints: off the loop
            if conn is not None:
                await anyio.to_thread.run_sync(conn.close)
        self._reader = self._conn = None
        if self._claim is not None:  # only now: the file is closed and folded in
            _unlock(self._claim, self._claim_path)
            self._claim = None

    async def claim(self) -> None:
        """Hold the file for this relay alone: an exclusive ``flock`` on ``<file>-relay.lock``
        beside the real file (holding the pid), which ``aclose`` lets go and removes; the
        end of the process (SIGKILL too) lets it go, leaving the file for the next relay.

        Raises ``RunwireError(STORE_UNAVAILABLE, details={"in_use": lock file})`` if another
        relay (process, or store in this one) holds it.
        """
        if self._claim is not None or self.path in ("", ":memory:"):
            return
        if self._closed or self._loop is None:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")
        path = self.path
        self._claim_path, self._claim = await anyio.to_thread.run_sync(lambda: _lock_beside(path))

    async def healthy(self) -> bool:
        """True while started, not closed, and the last write transaction committed."""
        return self._ok and not self._closed

    # -- the Store interface ---------------------------------------------------

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel (a new one gets a random epoch, kept in the file)."""
        info, ids, created = await self._read(lambda c: _load_channel(c, session_id))
        if created:
            self._count_commit()  # its row went into the WAL too
        if session_id not in self._recent:
            # A new (or empty) channel gets its OrderedDict with its first append.
            self._recent[session_id] = OrderedDict(ids) if ids else None
        return info

    def close_channel(self, session_id: str) -> None:
        """Forget the channel's newest ids and head (read again when next needed)."""
        self._recent.pop(session_id, None)
        self._heads.pop(session_id, None)

    async def append(
        self,
        session_id: str,
        entry_id: str,
        data: bytes,
        runs: Sequence[RunRecord] = (),
        *,
        expect_last: int | None = None,
        urgent: bool = False,
        gone: Gone | None = None,
    ) -> Appended:
        """Store ``data`` under the next serial, or return the original of a repeated id.

        ``gone`` is not looked at: one relay uses this store, and it knows its agents'
        connections. Returns once committed. Raises ``RunwireError(STORE_UNAVAILABLE)`` if the
        batch it was committed in failed, ``RunwireError(CONFLICT)`` if
        ``expect_last`` is given and is not the newest serial,
        ``RunwireError(INTERNAL_ERROR)`` if ``open_channel`` was not called first.
        """
        if session_id not in self._recent:
            raise RunwireError(INTERNAL_ERROR, f"append to {session_id!r} before open_channel")
        recent = self._recent[session_id]
        if recent is None:
            recent = self._recent[session_id] = OrderedDict()
        known = recent.get(entry_id)
        if known is not None:
            found = await self._repeat(session_id, known)
            if found is not None:
                return found
        job = _Write(session_id, entry_id, data, tuple(runs), expect_last)
        self._enqueue(job)
        recent[entry_id] = job
        if len(recent) > DEDUP_WINDOW:
            recent.popitem(last=False)
        appended = await self._result(job)
        assert appended is not None  # an append ends with a value or an error
        return appended

    async def subscribe(
        self, session_id: str, fn: OnEntry, *, on_reset: OnReset | None = None
    ) -> Unsubscribe:
        """Call ``fn`` with every entry appended through this store object from now on.

        ``on_reset`` is never called: the file forgets nothing.
        """
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is closed")
        return self._subscribers.add(session_id, fn)

    async def find(self, session_id: str, entry_id: str) -> Appended | None:
        """The stored (or being stored) entry with this id (``duplicate=True``), or None.

        For an open channel this answers from the newest ``DEDUP_WINDOW`` ids
        without touching the disk when the id is new.
        """
        if session_id not in self._recent:
            return await self._read(lambda c: _select_id(c, session_id, entry_id))
        recent = self._recent[session_id]
        known = None if recent is None else recent.get(entry_id)
        return None if known is None else await self._repeat(session_id, known)

    async def read(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Stored entries in ascending serial order (see the contract)."""
        if limit < 1:
            raise RunwireError(VALIDATION_ERROR, f"limit must be at least 1, not {limit}")
        after, before = read_position(after), read_position(before)
        return await self._read(lambda c: _select(c, session_id, after, before, limit))

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written."""
        return await self._read(lambda c: _select_runs(c, "session_id = ?", [session_id]))

    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given)."""
        params: list[str] = list(statuses)
        if not params:
            return []
        where = f"status IN ({', '.join('?' * len(params))})"
        if agent is not None:
            where += " AND agent = ?"
            params.append(agent)
        return await self._read(lambda c: _select_runs(c, where, params))

    async def put_runs(self, runs: Sequence[RunRecord]) -> None:
        """Write Run records without an entry (committed like an append)."""
        job = _Write("", None, b"", tuple(runs), None)
        self._enqueue(job)
        await self._result(job)

    # -- writes, on the event loop ---------------------------------------------

    def _enqueue(self, job: _Write) -> None:
        """Add a write to the batch (synchronously: batch order is call order)."""
        if self._loop is None or self._conn is None or self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")
        self._batch.append(job)
        if self._flush_handle is None:
            wait = self._committed_at + LINGER - self._loop.time()
            if wait > 0:  # a commit just went: let more join this one
                self._flush_handle = self._loop.call_later(wait, self._flush)
            else:
                self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Commit the batch in one transaction, then wake its callers and subscribers in order.

        While another connection holds the write lock it tries again a
        millisecond later, for ``BUSY_TIMEOUT`` seconds at most.
        """
        self._flush_handle = None
        conn = self._conn
        if conn is None or self._loop is None or not self._batch:
            return
        failure: Exception | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            now = time.monotonic()
            if self._busy_since is None:
                self._busy_since = now
            busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            if busy and now - self._busy_since < BUSY_TIMEOUT:
                self._flush_handle = self._loop.call_later(_RETRY, self._flush)
                return  # the batch waits, and takes in what comes meanwhile
            failure = exc
        self._busy_since = None
        batch, self._batch = self._batch, []
        one_by_one, self._one_by_one = self._one_by_one, False
        heads: dict[str, int] = {}
        try:
            if failure is not None:
                raise failure
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            if version != self._version:  # another connection committed: re-read the heads
                self._heads.clear()
                self._version = version
            outcomes = self._write(conn, batch, heads, one_by_one=one_by_one)
            if outcomes is None:  # an id repeated from beyond the dedup window:
                conn.execute("ROLLBACK")  # write the batch again, one entry at a time
                self._one_by_one = True
                self._batch[:0] = batch
                self._flush_handle = self._loop.call_soon(self._flush)
                return
            conn.execute("COMMIT")
        except Exception as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the transaction is gone either way
            self._ok = False
            self._heads.clear()
            failed = RunwireError(
                STORE_UNAVAILABLE, f"SQLite write failed: {exc}", details={"batch": len(batch)}
            )
            outcomes = [failed] * len(batch)
        else:
            self._heads.update(heads)
            self._committed_at = self._loop.time()
            self.commits += 1
            self._ok = True
            self._count_commit()
        for job, outcome in zip(batch, outcomes, strict=True):
            self._settle(job, outcome)

    def _count_commit(self) -> None:
        """One more commit in the WAL: checkpoint after ``CHECKPOINT_COMMITS`` or a second."""
        self._unchecked += 1
        if self._unchecked >= CHECKPOINT_COMMITS and not self._checkpointing:
            self._checkpoint()
        elif self._checkpoint_timer is None and self._loop is not None:
            self._checkpoint_timer = self._loop.call_later(1.0, self._checkpoint)

    def _write(
        self,
        conn: sqlite3.Connection,
        batch: list[_Write],
        heads: dict[str, int],
        *,
        one_by_one: bool = False,
    ) -> list[_Outcome] | None:
        """Write ``batch`` in the open transaction; returns each job's outcome.

        Returns None if the unique ``entry_id`` index refused an entry (roll back
        and write ``one_by_one``, which inserts each entry alone and checks it).
        """
        outcomes: list[_Outcome] = []
        entries: list[tuple[str, int, str, bytes]] = []
        records: list[tuple[str, str, bytes, str, str]] = []
        for job in batch:
            if job.entry_id is not None:
                head = heads.get(job.session_id, self._heads.get(job.session_id))
                if head is None:
                    (head,) = conn.execute(_SELECT_HEAD, (job.session_id,)).fetchone()
                if job.expect_last is not None and job.expect_last != head:
                    outcomes.append(
                        _select_id(conn, job.session_id, job.entry_id)
                        or RunwireError(
                            CONFLICT,
                            f"{job.session_id!r} is at serial {head}, not {job.expect_last}",
                            details={"last": head},
                        )
                    )
                    heads[job.session_id] = head
                    continue
                serial = head + 1
                stored = splice_serial(job.data, serial)
                row = (job.session_id, serial, job.entry_id, stored)
                if not one_by_one:
                    entries.append(row)
                elif not conn.execute(_INSERT_ENTRY, row).rowcount:
                    original = _select_id(conn, job.session_id, job.entry_id)
                    if original is None:  # pragma: no cover - the index says it is there
                        raise RunwireError(STORE_UNAVAILABLE, f"entry {job.entry_id!r} vanished")
                    outcomes.append(original)
                    heads[job.session_id] = head
                    continue
                heads[job.session_id] = serial
                outcomes.append(Appended(serial, stored))
            else:
                outcomes.append(None)
            records.extend(
                (r.session_id, r.run_id, dumps(r.to_dict()), r.status, r.agent) for r in job.runs
            )
        if entries and conn.executemany(_INSERT_ENTRY, entries).rowcount != len(entries):
            return None
        if records:
            conn.executemany(_UPSERT_RUN, records)
        return outcomes

    async def _result(self, job: _Write) -> Appended | None:
        """A write's value once its batch is done; raises its error."""
        await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.value

    def _settle(self, job: _Write, outcome: _Outcome) -> None:
        """Wake a job's callers and, for a new entry, the channel's subscribers."""
        if isinstance(outcome, RunwireError):
            job.error = outcome
        else:
            job.value = outcome
        if job.entry_id is not None:
            recent = self._recent.get(job.session_id)
            if recent is not None and recent.get(job.entry_id) is job:
                if job.value is not None:
                    recent[job.entry_id] = job.value.serial
                else:
                    del recent[job.entry_id]
        job.done.set()
        if job.value is not None and not job.value.duplicate:
            self._subscribers.publish(job.session_id, StoredEntry(job.value.serial, job.value.data))

    async def _repeat(self, session_id: str, known: int | _Write) -> Appended | None:
        """What a repeat of a remembered id returns; None if its first append failed."""
        if isinstance(known, int):
            return await self._read(lambda c: _select_serial(c, session_id, known))
        await known.done.wait()
        return None if known.value is None else replace(known.value, duplicate=True)

    # -- reads and checkpoints, on the background thread ----------------------

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the background thread; raises ``RunwireError(STORE_UNAVAILABLE)``."""
        conn = self._reader
        if conn is None or self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")

        def run() -> T:
            try:
                return fn(conn)
            except RunwireError:
                raise
            except Exception as exc:
                raise RunwireError(STORE_UNAVAILABLE, f"SQLite read failed: {exc}") from None

        return await asyncio.get_running_loop().run_in_executor(self._background, run)

    def _checkpoint(self) -> None:
        """Have the background thread copy the WAL into the file (unless it is at it already).

        Two ``PASSIVE`` passes run alongside the writes, then a ``FULL`` one
        holds them off while it copies what they added meanwhile, so that the
        next commit can start the WAL over. Reads wait meanwhile, so the
        ``FULL`` pass never waits for a read of this store with the lock held.
        """
        if self._checkpoint_timer is not None:
            self._checkpoint_timer.cancel()
            self._checkpoint_timer = None
        conn = self._reader
        if conn is None or self._loop is None or not self._unchecked:
            return
        if self._checkpointing:  # the last one is still at it: look again later
            self._checkpoint_timer = self._loop.call_later(1.0, self._checkpoint)
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

        self._background.submit(checkpoint)


def _load_channel(
    conn: sqlite3.Connection, session_id: str
) -> tuple[ChannelInfo, list[tuple[str, int]], bool]:
    """A channel (its row inserted if new), its newest ``DEDUP_WINDOW`` ids, oldest first,
    and whether it was new."""
    select_epoch = "SELECT epoch FROM channels WHERE session_id = ?"
    conn.execute("BEGIN")
    try:
        found = conn.execute(select_epoch, (session_id,)).fetchone()
        first, last = conn.execute(
            "SELECT COALESCE(MIN(serial), 0), COALESCE(MAX(serial), 0)"
            " FROM entries WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        rows = conn.execute(
            "SELECT entry_id, serial FROM entries WHERE session_id = ?"
            " ORDER BY serial DESC LIMIT ?",
            (session_id, DEDUP_WINDOW),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    created = found is None
    if created:  # a new channel (unless another store just made it: keep its epoch)
        conn.execute(
            "INSERT INTO channels (session_id, epoch) VALUES (?, ?)"
            " ON CONFLICT (session_id) DO NOTHING",
            (session_id, secrets.token_hex(8)),
        )
        found = conn.execute(select_epoch, (session_id,)).fetchone()
    ids = [(str(entry_id), int(serial)) for entry_id, serial in reversed(rows)]
    return ChannelInfo(session_id, str(found[0]), int(first), int(last)), ids, created


def _select_id(conn: sqlite3.Connection, session_id: str, entry_id: str) -> Appended | None:
    row = conn.execute(
        "SELECT serial, data FROM entries WHERE session_id = ? AND entry_id = ?",
        (session_id, entry_id),
    ).fetchone()
    return None if row is None else Appended(int(row[0]), bytes(row[1]), duplicate=True)


def _select_serial(conn: sqlite3.Connection, session_id: str, serial: int) -> Appended | None:
    row = conn.execute(
        "SELECT data FROM entries WHERE session_id = ? AND serial = ?", (session_id, serial)
    ).fetchone()
    return None if row is None else Appended(serial, bytes(row[0]), duplicate=True)


def _select(
    conn: sqlite3.Connection, session_id: str, after: int | None, before: int | None, limit: int
) -> list[StoredEntry]:
    where = "session_id = ?"
    params: list[object] = [session_id]
    if after is not None:
        where += " AND serial > ?"
        params.append(after)
    if before is not None:
        where += " AND serial < ?"
        params.append(before)
    order = "ASC" if after is not None else "DESC"
    rows = conn.execute(
        f"SELECT serial, data FROM entries WHERE {where} ORDER BY serial {order} LIMIT ?",
        (*params, limit),
    )
    entries = [StoredEntry(int(serial), bytes(data)) for serial, data in rows]
    return entries if after is not None else entries[::-1]


def _select_runs(conn: sqlite3.Connection, where: str, params: Sequence[str]) -> list[RunRecord]:
    rows = conn.execute(f"SELECT record FROM runs WHERE {where} ORDER BY rowid", params)
    return [RunRecord.from_dict(loads(record)) for (record,) in rows]
