"""``sqlite:///path``: channels and Run records in one SQLite file (the default store).

Writes run on the event loop's thread and reads on one background thread with
its own connection. In WAL mode with ``synchronous=NORMAL`` a commit costs tens
of microseconds, so the loop can afford it.

Appends queued in one iteration of the loop share one transaction (group
commit), in call order. Under load a flush waits until ``LINGER`` after the
previous commit, so one commit carries what arrives meanwhile (a few pages of
WAL per commit, however many entries it holds); a write to an idle store
commits at once. The serial is given in the transaction, so a failed
commit neither skips nor repeats a serial, and several stores may share a file.
After the commit, callers and subscribers are woken in serial order.

``open_channel`` loads a channel's newest ``DEDUP_WINDOW`` entry ids, so repeats
are answered without the disk. The background thread checkpoints the WAL after
``CHECKPOINT_COMMITS`` commits. A SIGKILL loses nothing acknowledged.

The file, its schema and its lock are in ``sqlite_file``, the SQL in
``sqlite_sql``, the reads and checkpoints in ``sqlite_background``. See
docs/explanation/stores.md for the group commit, the dedup and the checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeAlias, TypeVar

import anyio.to_thread

from transport._codec import dumps, splice_serial
from transport._runs import RunRecord
from transport.errors import (
    CONFLICT,
    INTERNAL_ERROR,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)

from ._base import (
    Appended,
    ChannelInfo,
    Gone,
    OnEntry,
    OnReset,
    Store,
    StoredEntry,
    Subscribers,
    Unsubscribe,
    read_position,
)
from ._sqlite_background import CHECKPOINT_COMMITS, Background
from ._sqlite_file import BUSY_TIMEOUT, WAL_LIMIT, connect, lock_beside, unlock
from ._sqlite_sql import (
    DEDUP_WINDOW,
    INSERT_ENTRY,
    SELECT_HEAD,
    UPSERT_RUN,
    load_channel,
    select_entries,
    select_id,
    select_runs,
    select_serial,
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

_RETRY = 0.001

LINGER = 0.0
"""Seconds a flush waits after the previous commit under load. Off by default: through the
relay, 1 ms doubled the p50 and broke the steer tail for no CPU gain (see the stores page)."""


@dataclass(eq=False, slots=True)
class _Write:
    """One ``append`` in a batch."""

    session_id: str
    entry_id: str
    data: bytes
    runs: Sequence[RunRecord]
    expect_last: int | None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    value: Appended | None = None
    error: RunwireError | None = None


_Outcome: TypeAlias = Appended | RunwireError
_Recent: TypeAlias = OrderedDict[str, int | _Write]
"""A channel's newest entry ids: the serial, or the job still writing it."""


class SQLiteStore(Store):
    """A ``Store`` in one SQLite file; see the module docstring and ``relay.store._base``.

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
        self._background = Background(self.path)  # reads and checkpoints
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
            self._conn = await anyio.to_thread.run_sync(lambda: connect(self.path, wait=False))
            await self._background.open()
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
        await self._background.aclose()  # lets queued reads finish
        if self._conn is not None:  # the last connection to close checkpoints: off the loop
            with contextlib.suppress(sqlite3.Error):  # and syncs, as the background's do
                self._conn.execute("PRAGMA synchronous = NORMAL")
            await anyio.to_thread.run_sync(self._conn.close)
        self._conn = None
        if self._claim is not None:  # only now: the file is closed and folded in
            unlock(self._claim, self._claim_path)
            self._claim = None

    async def claim(self) -> None:
        """Hold the file for this relay alone: an exclusive ``flock`` on ``<file>-relay.lock``
        beside the real file, with the pid written in. ``aclose`` lets it go and removes
        it. The end of the process, SIGKILL too, lets it go and leaves the file for the
        next relay.

        Raises ``RunwireError(STORE_UNAVAILABLE, details={"in_use": lock file})`` if another
        relay (process, or store in this one) holds it.
        """
        if self._claim is not None or self.path in ("", ":memory:"):
            return
        if self._closed or self._loop is None:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")
        path = self.path
        self._claim_path, self._claim = await anyio.to_thread.run_sync(lambda: lock_beside(path))

    async def healthy(self) -> bool:
        """True while started, not closed, and the last write transaction committed."""
        return self._ok and not self._closed

    # -- the Store interface ---------------------------------------------------

    async def open_channel(self, session_id: str) -> ChannelInfo:
        """Load or create a channel (a new one gets a random epoch, kept in the file)."""
        info, ids, created = await self._read(lambda c: load_channel(c, session_id))
        if created:
            self._background.count_commit()  # its row went into the WAL too
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
        return await self._result(job)

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
            return await self._read(lambda c: select_id(c, session_id, entry_id))
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
        return await self._read(lambda c: select_entries(c, session_id, after, before, limit))

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written."""
        return await self._read(lambda c: select_runs(c, "session_id = ?", [session_id]))

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
        return await self._read(lambda c: select_runs(c, where, params))

    # -- writes, on the event loop ---------------------------------------------

    def _enqueue(self, job: _Write) -> None:
        """Add a write to the batch (synchronously: batch order is call order)."""
        if self._loop is None or self._conn is None or self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")
        self._batch.append(job)
        if self._flush_handle is None:
            wait = self._committed_at + LINGER - self._loop.time()
            if wait > 0:  # a commit just went: let more join the next one
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
            self._background.count_commit()
        for job, outcome in zip(batch, outcomes, strict=True):
            self._settle(job, outcome)

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
            head = heads.get(job.session_id, self._heads.get(job.session_id))
            if head is None:
                (head,) = conn.execute(SELECT_HEAD, (job.session_id,)).fetchone()
            if job.expect_last is not None and job.expect_last != head:
                outcomes.append(
                    select_id(conn, job.session_id, job.entry_id)
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
            elif not conn.execute(INSERT_ENTRY, row).rowcount:
                original = select_id(conn, job.session_id, job.entry_id)
                if original is None:  # pragma: no cover - the index says it is there
                    raise RunwireError(STORE_UNAVAILABLE, f"entry {job.entry_id!r} vanished")
                outcomes.append(original)
                heads[job.session_id] = head
                continue
            heads[job.session_id] = serial
            outcomes.append(Appended(serial, stored))
            records.extend(
                (r.session_id, r.run_id, dumps(r.to_dict()), r.status, r.agent) for r in job.runs
            )
        if entries and conn.executemany(INSERT_ENTRY, entries).rowcount != len(entries):
            return None
        if records:
            conn.executemany(UPSERT_RUN, records)
        return outcomes

    async def _result(self, job: _Write) -> Appended:
        """A write's value once its batch is done; raises its error."""
        await job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.value is not None  # a write ends with a value or an error
        return job.value

    def _settle(self, job: _Write, outcome: _Outcome) -> None:
        """Wake a job's callers and, for a new entry, the channel's subscribers."""
        if isinstance(outcome, RunwireError):
            job.error = outcome
        else:
            job.value = outcome
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
            return await self._read(lambda c: select_serial(c, session_id, known))
        await known.done.wait()
        return None if known.value is None else replace(known.value, duplicate=True)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the background thread; raises ``RunwireError(STORE_UNAVAILABLE)``."""
        if self._closed:
            raise RunwireError(STORE_UNAVAILABLE, "the SQLite store is not open")
        return await self._background.read(fn)
