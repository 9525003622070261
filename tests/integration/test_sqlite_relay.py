"""A relay process on an SQLite file: what it does when it cannot start, and beside another."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import client_side
import relay
from transport import RunwireError

from .harness import start_worker_process, status

pytestmark = pytest.mark.anyio


def relay_process(db: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m relay`` on ``db`` (port 0), its stdout and stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "relay", "--port", "0", "--store", f"sqlite:///{db}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def listening(proc: subprocess.Popen[str]) -> str:
    """The URL a relay process prints once it listens."""
    assert proc.stdout is not None
    with anyio.fail_after(20):
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
    match = re.search(r"(ws://\S+)", line)
    assert match, line
    return match.group(1)


async def refused(proc: subprocess.Popen[str]) -> str:
    """What a relay process that must not start printed on stderr, once it exited with 2."""
    try:
        _, err = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=10))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the relay started (and ran for 10 s) rather than refuse") from None
    assert proc.returncode == 2, err
    assert "Traceback" not in err, err
    return err


@pytest.mark.parametrize("case", ["missing directory", "not a database"])
async def test_a_relay_whose_file_cannot_be_opened_says_why_in_one_line(
    tmp_path: Path, case: str
) -> None:
    db = tmp_path / "nowhere" / "relay.db"
    if case == "not a database":
        db = tmp_path / "relay.db"
        db.write_bytes(b"this is no SQLite file, just text that looks nothing like one\n" * 20)
    err = await refused(relay_process(db))
    assert f"runwire relay: STORE_UNAVAILABLE: cannot open the SQLite database '{db}'" in err


async def test_the_demo_whose_file_cannot_be_opened_says_why_in_one_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'nowhere' / 'demo.db'}"
    demo = subprocess.Popen(
        [sys.executable, "-m", "runwire", "demo", "--no-chat", "--port", "0", "--store", store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = await refused(demo)
    assert "runwire demo: STORE_UNAVAILABLE: cannot open the SQLite database" in err


async def test_a_second_relay_on_the_same_file_is_refused_and_the_first_one_goes_on(
    tmp_path: Path,
) -> None:
    """The second relay would time the first one's Runs as if their agents were gone and end
    them ``AGENT_LOST`` (and miss its entries live): it must not start. Once the first dies,
    even by SIGKILL, the file is free again."""
    db = tmp_path / "relay.db"
    first = relay_process(db, "--agent-grace", "0.2")
    worker: subprocess.Popen[str] | None = None
    try:
        url = await listening(first)
        worker, wait_line = await start_worker_process(url, "stream")
        async with client_side.connect(url, "one-file") as phone:
            run = await phone.send("Stream on")
            await wait_line("STREAMING")
            err = await refused(relay_process(db, "--agent-grace", "0.2"))
            assert f"the SQLite database '{db}' is in use by another relay (pid {first.pid})" in err
            await anyio.sleep(0.6)  # three times the grace a second relay would have given it
            assert status(phone, run.run_id) == "active"
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        again = relay_process(db)
        try:
            await listening(again)
        finally:
            again.send_signal(signal.SIGTERM)
            again.communicate(timeout=10)
    finally:
        for proc in (worker, first):
            if proc is not None:
                proc.kill()
                proc.wait()


async def test_two_relays_in_one_process_cannot_share_a_file_but_can_follow_each_other(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    async with relay.serve(port=0, store=store):
        with pytest.raises(RunwireError) as info:
            async with relay.serve(port=0, store=store):
                pass  # pragma: no cover - refused
        assert info.value.code == "STORE_UNAVAILABLE"
        assert "in use by another relay" in info.value.message
        assert (tmp_path / "relay.db-relay.lock").exists()
    # A relay that stopped cleanly leaves only the database (and SQLite's own files).
    assert not (tmp_path / "relay.db-relay.lock").exists()
    async with relay.serve(port=0, store=store) as second:
        assert await second.store.healthy()
    assert not (tmp_path / "relay.db-relay.lock").exists()


def test_a_lock_taken_on_a_file_its_holder_removed_meanwhile_is_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relay stopping removes its lock file while a starting one may have opened it: the
    starting one must not hold a lock on the removed file (a third could then lock a new one)."""
    from relay.store import _sqlite_file as sqlite_file

    path = str(tmp_path / "relay.db-relay.lock")
    real_open = os.open
    opened: list[str] = []

    def open_then_removed(file: str, flags: int, mode: int = 0o777) -> int:
        fd = real_open(file, flags, mode)
        if not opened:
            os.unlink(file)  # the holder stopping between our open and our flock
        opened.append(file)
        return fd

    monkeypatch.setattr(os, "open", open_then_removed)
    fd = sqlite_file.lock(path)
    monkeypatch.undo()
    try:
        assert len(opened) == 2
        assert os.fstat(fd).st_ino == os.stat(path).st_ino
    finally:
        os.close(fd)


async def test_a_relay_on_a_symlink_to_a_file_in_use_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "link.db"
    link.symlink_to(tmp_path / "relay.db")
    async with relay.serve(port=0, store=f"sqlite:///{tmp_path / 'relay.db'}"):
        with pytest.raises(RunwireError) as info:
            async with relay.serve(port=0, store=f"sqlite:///{link}"):
                pass  # pragma: no cover - refused
        assert "in use by another relay" in info.value.message
