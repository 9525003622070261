"""A relay process on an SQLite file: what it does when it cannot start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.anyio


def relay_process(db: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m relay`` on ``db`` (port 0), its stdout and stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "relay", "--port", "0", "--store", f"sqlite:///{db}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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
