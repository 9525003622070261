"""The SQLite store: the conformance suite, plus what only a file can promise."""

from __future__ import annotations

import itertools
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from relay.store import Appended, SQLiteStore, Store
from relay.store import _sqlite as sqlite_store
from relay.store._sqlite import WAL_LIMIT
from transport._codec import splice_serial
from transport.errors import CONFLICT, STORE_UNAVAILABLE, RunwireError

from . import sqlite_writer
from .store_conformance import Collector, StoreConformance, body, run


class TestSQLiteStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    def make_store(self) -> Store:
        return SQLiteStore(self.folder / f"{uuid.uuid4().hex}.db")


async def _read_all(store: Store, session_id: str) -> list[tuple[int, bytes]]:
    entries: list[tuple[int, bytes]] = []
    while page := await store.read(session_id, after=entries[-1][0] if entries else 0, limit=1000):
        entries.extend((e.serial, e.data) for e in page)
    return entries


@pytest.mark.anyio
async def test_reopening_the_file_keeps_epoch_entries_head_runs_and_ids(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    store = SQLiteStore(path)
    await store.start()
    info = await store.open_channel("s")
    appended = [
        await store.append("s", f"e{i}", body(f"e{i}"), [run("s", f"r{i}")]) for i in range(3)
    ]
    await store.aclose()

    again = SQLiteStore(path)
    await again.start()
    try:
        reopened = await again.open_channel("s")
        assert (reopened.epoch, reopened.first, reopened.last) == (info.epoch, 1, 3)
        assert await _read_all(again, "s") == [(a.serial, a.data) for a in appended]
        assert await again.runs("s") == [run("s", f"r{i}") for i in range(3)]
        repeat = await again.append("s", "e0", body("e0", 9))
        assert (repeat.serial, repeat.data, repeat.duplicate) == (1, appended[0].data, True)
        assert (await again.append("s", "e3", body("e3"))).serial == 4
    finally:
        await again.aclose()


@pytest.mark.anyio
async def test_concurrent_appends_share_commits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db")
    await store.start()
    try:
        for session_id in ("a", "b"):
            await store.open_channel(session_id)
        before = store.commits
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(500):
                    tg.start_soon(store.append, "ab"[i % 2], f"e{i}", body(f"e{i}"))
        commits = store.commits - before
        assert 1 <= commits <= 50, commits
        assert [s for s, _ in await _read_all(store, "a")] == list(range(1, 251))
        assert [s for s, _ in await _read_all(store, "b")] == list(range(1, 251))
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_an_append_to_an_idle_store_commits_alone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "i.db")
    await store.start()
    try:
        await store.open_channel("s")
        before = store.commits
        with anyio.fail_after(10):
            for i in range(20):
                await store.append("s", f"e{i}", body(f"e{i}"))
        assert store.commits - before == 20
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_appends_arriving_turn_after_turn_under_load_share_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a linger set, the flush right after a commit waits (LINGER), so appends that come
    # one per turn of the event loop, as a busy relay's do, are committed together.
    monkeypatch.setattr(sqlite_store, "LINGER", 0.001)
    store = SQLiteStore(tmp_path / "l.db")
    await store.start()
    try:
        await store.open_channel("s")
        await store.append("s", "first", body("first"))
        before = store.commits
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(store.append, "s", f"e{i}", body(f"e{i}"))
                    await anyio.lowlevel.checkpoint()  # the next append: a turn later
        assert store.commits - before <= 5, store.commits - before
        assert [s for s, _ in await _read_all(store, "s")] == list(range(1, 12))
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_a_failed_commit_fails_its_appends_and_keeps_serials_gap_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.db"
    store = SQLiteStore(path)
    await store.start()
    try:
        await store.open_channel("s")
        for i in range(3):
            await store.append("s", f"ok{i}", body(f"ok{i}"))
        with sqlite3.connect(path) as other:  # a write that SQLite refuses mid-batch
            other.execute(
                "CREATE TRIGGER boom BEFORE INSERT ON entries WHEN NEW.entry_id = 'boom'"
                " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        outcomes: dict[str, int | str] = {}

        async def append(entry_id: str) -> None:
            try:
                result = await store.append("s", entry_id, body(entry_id), [run("s", entry_id)])
                outcomes[entry_id] = result.serial
            except RunwireError as exc:
                outcomes[entry_id] = exc.code

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for entry_id in ("x0", "x1", "boom", "x2", "x3"):
                    tg.start_soon(append, entry_id)
        assert outcomes["boom"] == STORE_UNAVAILABLE
        assert not await store.healthy()
        assert set(outcomes.values()) - {STORE_UNAVAILABLE} <= {4, 5, 6, 7}
        assert await store.find("s", "boom") is None

        with sqlite3.connect(path) as other:
            other.execute("DROP TRIGGER boom")
        last = await store.append("s", "last", body("last"))
        assert await store.healthy()
        stored = await _read_all(store, "s")
        assert [serial for serial, _ in stored] == list(range(1, last.serial + 1))
        kept = sorted((s, e) for e, s in outcomes.items() if isinstance(s, int))
        assert [entry_id for _, entry_id in kept] == [
            entry_id for entry_id in ("x0", "x1", "x2", "x3") if isinstance(outcomes[entry_id], int)
        ]
        assert [data for _, data in stored[3:-1]] == [splice_serial(body(e), s) for s, e in kept]
        assert sorted(r.run_id for r in await store.runs("s")) == sorted(e for _, e in kept)
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_two_stores_on_one_file_never_reuse_a_serial(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    await first.start()
    await second.start()
    try:
        assert (await first.open_channel("s")).epoch == (await second.open_channel("s")).epoch
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon((first, second)[i % 2].append, "s", f"e{i}", body(f"e{i}"))
            repeat = await second.append("s", "e0", body("e0"))  # e0 went through `first`
        assert repeat.duplicate
        assert [s for s, _ in await _read_all(first, "s")] == list(range(1, 201))
    finally:
        await first.aclose()
        await second.aclose()


@pytest.mark.anyio
async def test_a_batch_with_a_repeat_only_the_file_knows_and_a_conflict_stays_exact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "slow.db"
    writer, other = SQLiteStore(path), SQLiteStore(path)
    await writer.start()
    await other.start()
    try:
        await writer.open_channel("s")
        await other.open_channel("s")  # before "old" exists: not in its dedup map
        old = await writer.append("s", "old", body("old"))
        seen = Collector()
        await other.subscribe("s", seen)
        before = other.commits
        outcomes: dict[str, Appended | RunwireError] = {}

        async def append(entry_id: str, expect_last: int | None = None) -> None:
            try:
                outcomes[entry_id] = await other.append(
                    "s", entry_id, body(entry_id, 7), [run("s", entry_id)], expect_last=expect_last
                )
            except RunwireError as exc:
                outcomes[entry_id] = exc

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:  # started in one go: one batch
                tg.start_soon(append, "x1")
                tg.start_soon(append, "old")
                tg.start_soon(append, "x2", 1)  # the head is 2 by its turn
                tg.start_soon(append, "x3")
        assert other.commits - before == 1
        assert outcomes["old"] == Appended(old.serial, old.data, duplicate=True)
        conflict = outcomes["x2"]
        assert isinstance(conflict, RunwireError)
        assert (conflict.code, conflict.details) == (CONFLICT, {"last": 2})
        assert outcomes["x1"] == Appended(2, splice_serial(body("x1", 7), 2))
        assert outcomes["x3"] == Appended(3, splice_serial(body("x3", 7), 3))
        assert [e.serial for e in await seen.until(2)] == [2, 3]
        assert [s for s, _ in await _read_all(writer, "s")] == [1, 2, 3]
        assert [r.run_id for r in await writer.runs("s")] == ["x1", "x3"]
        assert (await writer.append("s", "x4", body("x4"))).serial == 4  # its head was stale
    finally:
        await writer.aclose()
        await other.aclose()


@pytest.mark.anyio
async def test_a_write_waits_out_another_connections_lock_without_holding_up_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy.db"
    store = SQLiteStore(path)
    await store.start()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await store.open_channel("s")
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
        outcome: list[Appended] = []
        done = anyio.Event()

        async def append() -> None:
            outcome.append(await store.append("s", "e1", body("e1")))
            done.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(append)
                started = time.monotonic()
                await anyio.sleep(0.2)
                assert time.monotonic() - started < 1.0  # the loop kept turning meanwhile
                assert not done.is_set()
                other.execute("COMMIT")
                await done.wait()
        assert outcome[0].serial == 1
    finally:
        other.close()
        await store.aclose()


@pytest.mark.anyio
async def test_a_write_fails_once_another_connection_holds_the_lock_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT", 0.3)
    path = tmp_path / "stuck.db"
    store = SQLiteStore(path)
    await store.start()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await store.open_channel("s")
        other.execute("BEGIN IMMEDIATE")
        with anyio.fail_after(10), pytest.raises(RunwireError) as caught:
            await store.append("s", "e1", body("e1"))
        assert caught.value.code == STORE_UNAVAILABLE
        assert not await store.healthy()
        other.execute("ROLLBACK")
        with anyio.fail_after(10):
            assert (await store.append("s", "e2", body("e2"))).serial == 1
        assert await store.healthy()
    finally:
        other.close()
        await store.aclose()


def _wal_restarts(path: Path) -> int:
    """The WAL header's checkpoint sequence number: one more each time the WAL starts over."""
    return int.from_bytes(path.with_name(path.name + "-wal").read_bytes()[12:16], "big")


@pytest.mark.anyio
async def test_the_wal_starts_over_under_a_steady_load_and_close_folds_it_in(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wal.db"
    store = SQLiteStore(path)
    await store.start()
    try:
        await store.open_channel("s")
        await store.append("s", "e0", body("e0"))
        first = _wal_restarts(path)
        appended = 1
        with anyio.fail_after(30):  # without checkpoints each append grows the WAL by 12 KiB
            while _wal_restarts(path) < first + 3:  # appending flat out: never idle for long
                await store.append("s", f"e{appended}", body(f"e{appended}"))
                appended += 1
        assert path.with_name("wal.db-wal").stat().st_size <= WAL_LIMIT
    finally:
        await store.aclose()
    assert not path.with_name("wal.db-wal").exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entries").fetchone() == (appended,)


@pytest.mark.anyio
async def test_new_channels_alone_get_the_wal_checkpointed(tmp_path: Path) -> None:
    # Opening a new channel writes its row: attaches to ever new sessions with no
    # appends (a crawler) must not grow the WAL without end either.
    path = tmp_path / "opens.db"
    store = SQLiteStore(path)
    await store.start()
    try:
        for i in range(200):
            await store.open_channel(f"first-{i}")
        first = _wal_restarts(path)
        with anyio.fail_after(10):
            for i in itertools.count():  # the checkpoint comes a second after the first commit
                await store.open_channel(f"then-{i}")
                if _wal_restarts(path) > first:
                    break
                await anyio.sleep(0.01)
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_start_fails_clearly_when_the_file_cannot_be_opened(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "missing-dir" / "x.db")
    with pytest.raises(RunwireError) as caught:
        await store.start()
    assert caught.value.code == STORE_UNAVAILABLE
    assert "missing-dir" in caught.value.message
    assert not await store.healthy()


def _parse(line: bytes) -> tuple[int, str]:
    serial, entry_id = line.decode().split()
    return int(serial), entry_id


@pytest.mark.anyio
async def test_sigkill_loses_no_acknowledged_append(tmp_path: Path) -> None:
    path = tmp_path / "kill.db"
    printed: list[tuple[int, str]] = []
    process = await anyio.open_process(
        [sys.executable, sqlite_writer.__file__, str(path)],
        stdin=subprocess.DEVNULL,
        stderr=None,
    )
    assert process.stdout is not None
    lines = BufferedByteReceiveStream(process.stdout)
    try:
        with anyio.fail_after(30):
            while len(printed) < 2000:
                printed.append(_parse(await lines.receive_until(b"\n", 100)))
    finally:
        process.kill()
    with anyio.fail_after(10):
        try:
            while True:  # lines written before the kill are acknowledged too
                printed.append(_parse(await lines.receive_until(b"\n", 100)))
        except (anyio.EndOfStream, anyio.IncompleteRead):
            pass
        assert await process.wait() == -signal.SIGKILL
    await process.aclose()

    store = SQLiteStore(path)
    await store.start()
    try:
        await store.open_channel("s")
        stored = dict(await _read_all(store, "s"))
    finally:
        await store.aclose()
    assert sorted(stored) == list(range(1, len(stored) + 1))
    for serial, entry_id in printed:
        assert stored.get(serial) == splice_serial(sqlite_writer.body(entry_id), serial)
