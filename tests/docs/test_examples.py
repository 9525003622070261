"""Every example in ``examples/`` that the docs show runs as written against a live relay."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HELLO_CLIENT_PRINTS = [
    "the agent saw the steer: True",
    "the run ended: complete",
    "last reply: You said: Make it 5 days."
    " Here is my answer, one word at a time, so you can steer me.",
]
RUNWIRE = [sys.executable, "-c", "from runwire.cli import main; main()"]


async def read_until(process: Process, pattern: str, seen: list[str]) -> re.Match[str]:
    """Read the process's output until a line matches ``pattern``; keep what it read."""
    assert process.stdout is not None
    buffer = ""
    async for chunk in TextReceiveStream(process.stdout):
        buffer += chunk
        *lines, buffer = buffer.split("\n")
        for line in lines:
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
    raise AssertionError(f"no line matched {pattern!r}; output: {seen}")


@asynccontextmanager
async def running(command: list[str], env: dict[str, str] | None = None) -> AsyncIterator[Process]:
    """A subprocess that is interrupted, then awaited, when the block ends."""
    process = await anyio.open_process(command, env=env, cwd=ROOT, stderr=-2)
    async with process:
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
            with anyio.fail_after(15):
                await process.wait()


@asynccontextmanager
async def relay_process() -> AsyncIterator[str]:
    """``runwire relay`` on a free loopback port and the memory store; yields its URL."""
    command = [*RUNWIRE, "relay", "--store", "memory://", "--port", "0"]
    async with running(command) as process:
        with anyio.fail_after(30):
            found = await read_until(process, r"runwire relay listening on (\S+)", [])
        yield found.group(1)


def example_env(url: str) -> dict[str, str]:
    return {**os.environ, "RUNWIRE_URL": url, "PYTHONUNBUFFERED": "1"}


async def run_to_end(command: list[str], env: dict[str, str]) -> str:
    """Run a program to its end; return its output. Fails if it exits non-zero."""
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, cwd=ROOT, check=False, stderr=-2)
    output = done.stdout.decode()
    assert done.returncode == 0, output
    return output


async def test_hello_agent_and_hello_client_run_as_written() -> None:
    async with relay_process() as url:
        env = example_env(url)
        agent_command = [sys.executable, str(EXAMPLES / "hello_agent.py")]
        async with running(agent_command, env) as agent:
            with anyio.fail_after(30):
                await read_until(agent, r"hello_agent: serving on", [])
            output = await run_to_end([sys.executable, str(EXAMPLES / "hello_client.py")], env)
    assert output.splitlines() == HELLO_CLIENT_PRINTS
    assert agent.returncode == 0  # Ctrl-C stops it quietly


def test_the_readme_and_the_tutorial_show_what_hello_client_prints() -> None:
    shown = "\n".join(HELLO_CLIENT_PRINTS)
    for page in (ROOT / "README.md", ROOT / "docs" / "tutorial" / "index.md"):
        assert f"```text\n{shown}\n```" in page.read_text(), page
