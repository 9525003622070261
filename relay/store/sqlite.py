"""``sqlite:///path``: channels and Run records in one SQLite file (the default store).

Theory of operation
-------------------
The store owns one thread and one connection; every SQLite call runs on that
thread, so the event loop never waits for the disk. Calls become *jobs* on a
FIFO queue. Each time the thread wakes it takes every queued job: the writes
(``append``, ``put_runs``) run in queue order inside one transaction and one
commit (group commit), then the reads run, then one hop back to the event
loop wakes every caller. While a commit is on the disk new jobs pile up and
share the next one; an append to an idle store commits at once.

``append`` puts its job on the queue before it first yields, so appends are
sequenced in call order. The serial itself is given inside the transaction:
the channel's highest stored serial (read once per batch, under SQLite's write
lock) plus one. So a failed commit (every job of the batch raises
``RunwireError(STORE_UNAVAILABLE)``) can neither skip nor repeat a serial, and
several stores (or processes) may share one file.

``expect_last`` is checked inside the transaction too, against the same
head; a conflicting append fails alone (``RunwireError(CONFLICT)``) and the
rest of its batch commits. Subscribers (``subscribe``) are called on the
event loop when the batch's callers are woken, in queue order, so in serial
order; they see this store object's appends only, not another process's.

Dedup: ``open_channel`` loads the channel's newest ``DEDUP_WINDOW`` entry ids;
each append adds its id (first as the pending job, then as the serial). ``find``
and ``append`` answer repeats of those ids from that map, so ``find`` needs no
disk for a new id. An older repeat still hits the unique ``(session_id,
entry_id)`` index inside the transaction: it writes nothing, takes no serial
and returns the stored original.

The file is in WAL mode with ``synchronous=NORMAL``: a commit is in the WAL
before ``append`` returns, so a process killed with SIGKILL loses nothing that
was acknowledged (a power cut may lose the newest commits).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeAlias, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
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
    OnEntry,
    OnReset,
    Store,
    StoredEntry,
    Subscribers,
    Unsubscribe,
)

__all__ = ["DEDUP_WINDOW", "SQLiteStore"]

T = TypeVar("T")

DEDUP_WINDOW = 10_000
"""How many of a channel's newest entry ids ``find`` answers from memory."""

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
_UPSERT_RUN = (
    "INSERT INTO runs (session_id, run_id, record, status, agent) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_id) DO UPDATE SET"
    " record = excluded.record, status = excluded.status, agent = excluded.agent"
)


class _Job(Generic[T]):
    """One call for the store's thread, and its outcome once ``done`` is set."""

    __slots__ = ("done", "error", "fn", "on_done", "value", "write")

    def __init__(self, fn: Callable[[], T], *, write: bool) -> None:
        self.fn = fn
        self.write = write
        self.done = anyio.Event()
        self.on_done: Callable[[], None] | None = None  # runs on the event loop first
        self.value: T | None = None
        self.error: RunwireError | None = None

    def run(self) -> None:
        """Run a read job on the store's thread, keeping its result or error."""
        try:
            self.value = self.fn()
        except RunwireError as exc:
            self.error = exc
        except Exception as exc:
            self.error = RunwireError(STORE_UNAVAILABLE, f"SQLite read failed: {exc}")

    async def result(self) -> T:
        """The job's value once done; raises its ``RunwireError``."""
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return cast(T, self.value)


def _wake(jobs: list[_Job[Any]]) -> None:
    for job in jobs:
        if job.on_done is not None:
            job.on_done()
        job.done.set()


_Recent: TypeAlias = OrderedDict[str, int | _Job[Appended]]
"""A channel's newest entry ids: the serial, or the job still writing it."""


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
        self._recent: dict[str, _Recent] = {}
        self._subscribers = Subscribers()
        self._closed = False
        self._ok = False
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._thread: threading.Thread | None = None
        self._wakeup = threading.Condition()
        self._queue: list[_Job[Any]] = []
        self._closing = False
        # Owned by the store's thread:
        self._conn: sqlite3.Connection | None = None
        self._heads: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Open or create the database; raises ``RunwireError(STORE_UNAVAILABLE)`` if it can't."""
        if self._thread is not None:
            return
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is closed")
        self._token = anyio.lowlevel.current_token()
        self._thread = threading.Thread(target=self._serve, name="runwire-sqlite", daemon=True)
        self._thread.start()
        try:
            await self._submit(self._connect, write=False).result()
        except BaseException:
            await self.aclose()
            raise
        self._ok = True

    async def aclose(self) -> None:
        """Commit every queued write, then close the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._ok = False
        self._subscribers.clear()
        thread = self._thread
        if thread is None:
            return
        with self._wakeup:
            self._closing = True
            self._wakeup.notify()
        await anyio.to_thread.run_sync(thread.join)

    async def healthy(self) -> bool:
        """True while started, not closed, and the last write transaction committed."""
        return self._ok and not self._closed

    # -- the Store interface ---------------------------------------------------

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel (a new one gets a random epoch, kept in the file)."""
        info, ids = await self._submit(lambda: self._load_channel(session_id), write=False).result()
        if session_id not in self._recent:
            self._recent[session_id] = OrderedDict(ids)
        return info

    async def append(
        self,
        session_id: str,
        entry_id: str,
        data: bytes,
        runs: Sequence[RunRecord] = (),
        *,
        expect_last: int | None = None,
    ) -> Appended:
        """Store ``data`` under the next serial, or return the original of a repeated id.

        Returns once committed. Raises ``RunwireError(STORE_UNAVAILABLE)`` if the
        batch it was committed in failed, ``RunwireError(CONFLICT)`` if
        ``expect_last`` is given and is not the newest serial,
        ``RunwireError(INTERNAL_ERROR)`` if ``open_channel`` was not called first.
        """
        recent = self._recent.get(session_id)
        if recent is None:
            raise RunwireError(INTERNAL_ERROR, f"append to {session_id!r} before open_channel")
        known = recent.get(entry_id)
        if known is not None:
            found = await self._repeat(session_id, known)
            if found is not None:
                return found
        records = tuple(runs)
        job = self._submit(
            lambda: self._insert(session_id, entry_id, data, records, expect_last), write=True
        )
        self._remember(recent, entry_id, job)
        settle = job.on_done

        def done() -> None:
            if settle is not None:
                settle()
            appended = job.value
            if appended is not None and not appended.duplicate:
                self._subscribers.publish(session_id, StoredEntry(appended.serial, appended.data))

        job.on_done = done  # the thread wakes callers only once the loop gets here
        return await job.result()

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
        recent = self._recent.get(session_id)
        if recent is None:
            return await self._submit(
                lambda: self._select_id(session_id, entry_id), write=False
            ).result()
        known = recent.get(entry_id)
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
        job = self._submit(lambda: self._select(session_id, after, before, limit), write=False)
        return await job.result()

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written."""
        job = self._submit(lambda: self._select_runs("session_id = ?", [session_id]), write=False)
        return await job.result()

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
        return await self._submit(lambda: self._select_runs(where, params), write=False).result()

    async def put_runs(self, runs: Sequence[RunRecord]) -> None:
        """Write Run records without an entry (committed like an append)."""
        records = tuple(runs)
        await self._submit(lambda: self._upsert_runs(records), write=True).result()

    # -- the event loop's side -------------------------------------------------

    def _submit(self, fn: Callable[[], T], *, write: bool) -> _Job[T]:
        """Queue a job for the store's thread (synchronously: queue order is call order)."""
        if self._thread is None:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not started")
        job = _Job(fn, write=write)
        with self._wakeup:
            if self._closing:
                raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is closed")
            self._queue.append(job)
            self._wakeup.notify()
        return job

    def _remember(self, recent: _Recent, entry_id: str, job: _Job[Appended]) -> None:
        """Put a pending append in the dedup map; it turns into its serial (or leaves) when done."""
        recent[entry_id] = job
        if len(recent) > DEDUP_WINDOW:
            recent.popitem(last=False)

        def settle() -> None:
            if recent.get(entry_id) is job:
                if job.value is not None:
                    recent[entry_id] = job.value.serial
                else:
                    del recent[entry_id]

        job.on_done = settle

    async def _repeat(self, session_id: str, known: int | _Job[Appended]) -> Appended | None:
        """What a repeat of a remembered id returns; None if its first append failed."""
        if isinstance(known, int):
            job = self._submit(lambda: self._select_serial(session_id, known), write=False)
            return await job.result()
        try:
            original = await known.result()
        except RunwireError:
            return None
        return replace(original, duplicate=True)

    # -- the store's thread ----------------------------------------------------

    def _serve(self) -> None:
        """Run queued jobs, a batch at a time, until closed and drained."""
        while True:
            with self._wakeup:
                while not self._queue and not self._closing:
                    self._wakeup.wait()
                jobs, self._queue = self._queue, []
            if not jobs:
                break
            writes = [job for job in jobs if job.write]
            if writes:
                self._commit(writes)
            for job in jobs:
                if not job.write:
                    job.run()
            try:
                anyio.from_thread.run_sync(_wake, jobs, token=self._token)
            except Exception:
                break  # the event loop is gone, so nobody is waiting
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _commit(self, writes: list[_Job[Any]]) -> None:
        """Run ``writes`` in one transaction; on any failure all of them fail."""
        conn = self._conn
        self._heads.clear()
        try:
            if conn is None:
                raise RunwireError(STORE_UNAVAILABLE, "the SQLite database is not open")
            conn.execute("BEGIN IMMEDIATE")
            for job in writes:
                try:
                    job.value = job.fn()
                except RunwireError as exc:
                    if exc.code != CONFLICT:
                        raise
                    job.error = exc  # wrote nothing; the rest of the batch goes on
            conn.execute("COMMIT")
        except Exception as exc:
            if conn is not None and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the transaction is gone either way
            self._ok = False
            for job in writes:
                job.value = None
                job.error = RunwireError(
                    STORE_UNAVAILABLE,
                    f"SQLite write failed: {exc}",
                    details={"batch": len(writes)},
                )
        else:
            self.commits += 1
            self._ok = True

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite database is not open")
        return self._conn

    def _connect(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise RunwireError(
                STORE_UNAVAILABLE, f"cannot open the SQLite database {self.path!r}: {exc}"
            ) from None
        self._conn = conn

    def _load_channel(self, session_id: str) -> tuple[ChannelInfo, list[tuple[str, int]]]:
        conn = self._db()
        select_epoch = "SELECT epoch FROM channels WHERE session_id = ?"
        found = conn.execute(select_epoch, (session_id,)).fetchone()
        if found is None:
            conn.execute(
                "INSERT INTO channels (session_id, epoch) VALUES (?, ?)"
                " ON CONFLICT (session_id) DO NOTHING",
                (session_id, secrets.token_hex(8)),
            )
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
        )
        ids = [(str(entry_id), int(serial)) for entry_id, serial in rows]
        ids.reverse()
        return ChannelInfo(session_id, str(found[0]), int(first), int(last)), ids

    def _insert(
        self,
        session_id: str,
        entry_id: str,
        data: bytes,
        runs: Sequence[RunRecord],
        expect_last: int | None,
    ) -> Appended:
        conn = self._db()
        head = self._heads.get(session_id)
        if head is None:
            (head,) = conn.execute(
                "SELECT COALESCE(MAX(serial), 0) FROM entries WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            self._heads[session_id] = head = int(head)
        if expect_last is not None and expect_last != head:
            original = self._select_id(session_id, entry_id)
            if original is not None:
                return original
            raise RunwireError(
                CONFLICT,
                f"{session_id!r} is at serial {head}, not {expect_last}",
                details={"last": head},
            )
        serial = head + 1
        stored = splice_serial(data, serial)
        if conn.execute(_INSERT_ENTRY, (session_id, serial, entry_id, stored)).rowcount == 0:
            original = self._select_id(session_id, entry_id)
            if original is None:  # pragma: no cover - the conflict says the row exists
                raise RunwireError(STORE_UNAVAILABLE, f"entry {entry_id!r} vanished")
            return original
        self._heads[session_id] = serial
        self._upsert_runs(runs)
        return Appended(serial, stored)

    def _upsert_runs(self, runs: Sequence[RunRecord]) -> None:
        self._db().executemany(
            _UPSERT_RUN,
            [(r.session_id, r.run_id, dumps(r.to_dict()), r.status, r.agent) for r in runs],
        )

    def _select_id(self, session_id: str, entry_id: str) -> Appended | None:
        row = (
            self._db()
            .execute(
                "SELECT serial, data FROM entries WHERE session_id = ? AND entry_id = ?",
                (session_id, entry_id),
            )
            .fetchone()
        )
        return None if row is None else Appended(int(row[0]), bytes(row[1]), duplicate=True)

    def _select_serial(self, session_id: str, serial: int) -> Appended | None:
        row = (
            self._db()
            .execute(
                "SELECT data FROM entries WHERE session_id = ? AND serial = ?",
                (session_id, serial),
            )
            .fetchone()
        )
        return None if row is None else Appended(serial, bytes(row[0]), duplicate=True)

    def _select(
        self, session_id: str, after: int | None, before: int | None, limit: int
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
        rows = self._db().execute(
            f"SELECT serial, data FROM entries WHERE {where} ORDER BY serial {order} LIMIT ?",
            (*params, limit),
        )
        entries = [StoredEntry(int(serial), bytes(data)) for serial, data in rows]
        return entries if after is not None else entries[::-1]

    def _select_runs(self, where: str, params: Sequence[str]) -> list[RunRecord]:
        rows = self._db().execute(f"SELECT record FROM runs WHERE {where} ORDER BY rowid", params)
        return [RunRecord.from_dict(loads(record)) for (record,) in rows]
