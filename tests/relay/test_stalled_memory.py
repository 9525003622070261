"""A few hundred stalled connections (half a request each, no token) to a relay with a secret
hold little memory, and give it back once they close: what a connection holds before its
token is checked is bounded (``relay._admission``, ``relay._http_head``, ``relay._http_front``)."""

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
"""Once they closed, the RSS is within this of where it started (CPython keeps much of what
it freed for reuse, so the RSS need not fall back all the way)."""
REUSE_BOUND = 8 * 1024 * 1024
"""A second burst raises the peak by less than this: the first one's memory was given back."""


def rss(proc: psutil.Process) -> int:
    return int(proc.memory_info().rss)


UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def stall(port: int, kind: int) -> socket.socket:
    """A connection that sends half a head (0), a head and half a declared 1 MiB body
    without a token (1), or a WebSocket handshake and then no ``hello`` (2)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == 0:
        sock.sendall(b"GET /v1/sessions/s-1/history HTTP/1.1\r\nHost: relay\r\nX-Half: ")
    elif kind == 2:
        sock.sendall(UPGRADE)
    else:
        head = b"POST /v1/sessions/s-1/messages HTTP/1.1\r\nHost: relay\r\n"
        sock.sendall(head + b"Content-Length: %d\r\n\r\n" % (1024 * 1024))
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
        sockets_before = len(relay_proc.net_connections())
        mib = 1024 * 1024
        peaks: list[int] = []
        for burst in range(2):
            for i in range(STALLED):
                sockets.append(await anyio.to_thread.run_sync(stall, port, i % 3))
            peaks.append(await settle(relay_proc))
            # The half heads and the silent WebSocket connections are held (the relay waits
            # for them); the bodies without a token were answered 401 unread and closed.
            assert len(relay_proc.net_connections()) >= sockets_before + 2 * STALLED // 3
            for sock in sockets:
                sock.close()
            sockets.clear()
            with anyio.fail_after(20):  # the relay lets go of every one of them
                while len(relay_proc.net_connections()) > sockets_before:
                    await anyio.sleep(0.1)
            after = await settle(relay_proc)
            print(f"burst {burst}: relay RSS {before / mib:.1f} MiB before, "
                  f"{peaks[-1] / mib:.1f} MiB with {STALLED} stalled connections, "
                  f"{after / mib:.1f} MiB after they closed")  # fmt: skip
            assert peaks[-1] - before < GROWTH_BOUND
            assert after - before < AFTER_BOUND
        # What the first burst took is reused by the second, not kept beside it.
        assert peaks[1] - peaks[0] < REUSE_BOUND
        assert proc.poll() is None
    finally:
        for sock in sockets:
            sock.close()
        proc.terminate()
        proc.wait(timeout=10)
