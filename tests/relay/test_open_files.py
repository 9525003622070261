"""The relay process raises its soft limit of open files to the hard limit at start: every
client connection holds a file descriptor, and the usual soft limit (1,024) would cap
one relay at about a thousand clients."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.anyio


def _low_soft_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def _limits(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/limits").read_text()
    match = re.search(r"Max open files\s+(\d+)\s+(\d+)", text)
    assert match, text
    return int(match.group(1)), int(match.group(2))


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="needs /proc")
async def test_the_relay_raises_its_open_files_limit_to_the_hard_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay", "--port", "0", "--store", "memory://"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_low_soft_limit,
    )
    try:
        assert proc.stdout is not None
        with anyio.fail_after(20):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert "listening on" in line
        soft, now_hard = _limits(proc.pid)
        assert soft == now_hard and soft > 256
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
