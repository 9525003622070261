"""A few hundred stalled connections (half a request each, no token) to a relay with a secret
hold little memory, and give it back once they close: what a connection holds before its
token is checked is bounded (``relay.admission``, ``relay.http_api.BodyReader``)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import psutil
import pytest

pytestmark = pytest.mark.anyio

STALLED = 300
BODY_SENT = 512 * 1024
"""Each POST sends half of a declared 1 MiB body: 100 MiB in all, none of it to be kept."""
GROWTH_BOUND = 48 * 1024 * 1024
"""The documented bound: 300 stalled connections add less than this to the relay's RSS."""
AFTER_BOUND = 24 * 1024 * 1024
"""Once they closed, the RSS is back within this of where it started."""


def rss(proc: psutil.Process) -> int:
    return int(proc.memory_info().rss)


def stall(port: int, kind: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == 0:
        sock.sendall(b"GET /v1/sessions/s-1/history HTTP/1.1\r\nHost: relay\r\nX-Half: ")
    else:
        auth = b"Authorization: Bearer not.a.token\r\n" if kind == 2 else b""
        head = b"POST /v1/sessions/s-1/messages HTTP/1.1\r\nHost: relay\r\n"
        head += b"%sContent-Length: %d\r\n\r\n"
        sock.sendall(head % (auth, 1024 * 1024))
        try:
            sock.sendall(b"x" * BODY_SENT)
        except OSError:
            pass  # refused, and closed, before it all went
    return sock


async def settle(proc: psutil.Process) -> int:
    """The relay's RSS once it stopped changing (it has taken in what was sent)."""
    last = rss(proc)
    with anyio.fail_after(30):
        while True:
            await anyio.sleep(0.3)
            now = rss(proc)
            if abs(now - last) < 512 * 1024:
                return now
            last = now


async def test_stalled_connections_hold_little_memory_and_give_it_back(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("stalled-memory-secret-" + "0123456789abcdef" * 2)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "relay", "--port", "0", "--store", "memory://",
            "--secret-file", str(secret), "--request-timeout", "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    sockets: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        with anyio.fail_after(20):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        match = re.search(r"ws://127\.0\.0\.1:(\d+)", line)
        assert match, line
        port = int(match.group(1))
        relay_proc = psutil.Process(proc.pid)
        before = await settle(relay_proc)
        for i in range(STALLED):
            sockets.append(await anyio.to_thread.run_sync(stall, port, i % 3))
        during = await settle(relay_proc)
        for sock in sockets:
            sock.close()
        sockets.clear()
        after = await settle(relay_proc)
        mib = 1024 * 1024
        print(f"relay RSS: {before / mib:.1f} MiB before, {during / mib:.1f} MiB with "
              f"{STALLED} stalled connections, {after / mib:.1f} MiB after")  # fmt: skip
        assert during - before < GROWTH_BOUND
        assert after - before < AFTER_BOUND
        assert proc.poll() is None
    finally:
        for sock in sockets:
            sock.close()
        proc.terminate()
        proc.wait(timeout=10)
