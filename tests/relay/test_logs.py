"""Log formats: level and logger in text, JSON with the ids known, the access log, no noise."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import relay
from agent_side import Agent, Run
from tests.agent_side.helpers import client_end
from transport import logcontext

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger's handlers and level as they were after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    access = logging.getLogger("runwire.access")
    yield io.StringIO()
    root.handlers[:] = handlers
    root.setLevel(level)
    access.disabled = False


def lines(buf: io.StringIO) -> list[str]:
    return [line for line in buf.getvalue().splitlines() if line]


def records(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(buf)]


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        status: int = response.status
        return status


def test_the_text_format_names_the_level_and_the_logger(captured: io.StringIO) -> None:
    logcontext.setup("INFO", "text", stream=captured)
    logging.getLogger("runwire.relay").warning("the store is slow")
    (line,) = lines(captured)
    assert line.split(" ", 2)[2] == "WARNING runwire.relay the store is slow"


def test_json_is_one_object_a_line_with_the_ids_bound(captured: io.StringIO) -> None:
    logcontext.setup("DEBUG", "json", stream=captured)
    log = logging.getLogger("runwire.relay")
    with logcontext.bind(session_id="s1", client_id="c1"):
        with logcontext.bind(run_id="r1"):
            log.info("inside %s", "both")
        log.info("outside", extra={"run_id": "r2"})
    log.error("no ids")
    first, second, third = records(captured)
    assert first["message"] == "inside both" and first["level"] == "INFO"
    assert first["logger"] == "runwire.relay"
    assert (first["session_id"], first["run_id"], first["client_id"]) == ("s1", "r1", "c1")
    assert (second["session_id"], second["run_id"]) == ("s1", "r2")
    assert "session_id" not in third and third["level"] == "ERROR"


@pytest.mark.anyio
async def test_a_runs_log_records_carry_its_session_run_and_client(
    captured: io.StringIO,
) -> None:
    logcontext.setup("INFO", "json", stream=captured)
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://") as server,
        client_end(server.url, "logged") as client,
    ):
        agent = Agent(server.url)

        @agent.on_run
        async def handle(run: Run) -> None:
            logging.getLogger("runwire.agent").info("working on it")

            async def reply() -> AsyncIterator[str]:
                yield "done"

            await run.pipe(reply())

        async with agent:
            run_id = await client.prompt("hello")
            await client.wait_status(run_id, "complete", "error")
        found = [r for r in records(captured) if r["message"] == "working on it"]
    assert len(found) == 1
    assert found[0]["session_id"] == "logged" and found[0]["run_id"] == run_id
    assert found[0]["client_id"] == agent.client_id


@pytest.mark.anyio
@pytest.mark.parametrize("access", [True, False])
async def test_http_requests_get_one_access_line_and_no_websockets_noise(
    access: bool, captured: io.StringIO
) -> None:
    logcontext.setup("INFO", "json", access_log=access, stream=captured)
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        for path in ("/healthz", "/metrics", "/healthz?token=abc.def.ghi"):
            assert await anyio.to_thread.run_sync(get, server.http_url + path) == 200
    out = captured.getvalue()
    assert "connection rejected" not in out
    assert "abc.def.ghi" not in out
    got = [r for r in records(captured) if r["logger"] == "runwire.access"]
    if not access:
        assert got == []
        return
    assert [(r["method"], r["path"], r["status"]) for r in got] == [
        ("GET", "/healthz", 200),
        ("GET", "/metrics", 200),
        ("GET", "/healthz?token=[REDACTED]", 200),
    ]
    assert all(r["remote"] == "127.0.0.1" and r["duration_ms"] >= 0 for r in got)


def test_the_relay_process_logs_json_when_told(tmp_path: Path) -> None:
    env = {**os.environ, "RUNWIRE_LOG_FORMAT": "json", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay", "--port", "0", "--store", "memory://"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stderr is not None
        first = json.loads(proc.stderr.readline())
        assert first["level"] == "INFO" and first["logger"] == "runwire.relay"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
