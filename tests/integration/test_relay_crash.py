"""A relay on SQLite killed with SIGKILL loses nothing it acknowledged."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from tests.relay.wire import RawPeer, prompt

pytestmark = pytest.mark.anyio


async def start_relay(db: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay", "--port", "0", "--store", f"sqlite:///{db}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    with anyio.fail_after(20):
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
    match = re.search(r"(ws://\S+)", line)
    assert match, line
    return proc, match.group(1)


async def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    proc, url = await start_relay(db)
    acked: dict[int, str] = {}
    try:
        peer = await RawPeer.open(url)
        await peer.attach("crash")

        async def publish_many(n: int) -> None:
            try:
                for _ in range(n):
                    entry = prompt(text="payload")
                    reply = await peer.publish("crash", entry)
                    assert reply["type"] == "ack"
                    acked[reply["serial"]] = entry["id"]
            except ConnectionClosed:
                pass  # the relay was killed under it

        async with anyio.create_task_group() as tg:
            tg.start_soon(publish_many, 10_000)
            with anyio.fail_after(30):
                while len(acked) < 300:
                    await anyio.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
            # The publisher sees the connection die; stop it.
            await anyio.sleep(0.2)
            tg.cancel_scope.cancel()
    finally:
        proc.kill()
        proc.wait()
    assert len(acked) >= 300
    proc, url = await start_relay(db)
    try:
        peer = await RawPeer.open(url)
        await peer.attach("crash", limit=1)
        page = await peer.request(
            {"type": "history", "session_id": "crash", "before": 10**9, "limit": 1000}
        )
        stored = {e["serial"]: e["id"] for e in page["entries"]}
        before = min(stored) if stored else 1
        while before > 1:
            older = await peer.request(
                {"type": "history", "session_id": "crash", "before": before, "limit": 1000}
            )
            stored.update({e["serial"]: e["id"] for e in older["entries"]})
            before = min(stored)
        for serial, entry_id in acked.items():
            assert stored.get(serial) == entry_id, serial
        # Serials carry on after the crash with no gap or reuse.
        nxt = await peer.publish("crash", prompt())
        assert nxt["serial"] == max(stored) + 1
        await peer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
