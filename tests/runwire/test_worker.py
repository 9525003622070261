"""``runwire worker module:attr`` as a process against a real relay, and its SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

import relay
from agent_side import Agent, Run
from runwire import worker
from tests.agent_side.helpers import ClientEnd, client_end

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


class Worker:
    """A ``runwire worker`` subprocess whose stdout lines the test reads one by one."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runwire", "worker", *args],
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    async def expect(self, start: str) -> str:
        assert self.proc.stdout is not None
        with anyio.fail_after(30):
            line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
        assert line.startswith(start), (line, self.stderr())
        return line

    async def wait(self) -> int:
        with anyio.fail_after(30):
            return await anyio.to_thread.run_sync(self.proc.wait)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@asynccontextmanager
async def worker_process(args: list[str], env: dict[str, str]) -> AsyncIterator[Worker]:
    w = Worker(args, env)
    try:
        await w.expect("runwire worker serving agent 'default'")
        yield w
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait()


def texts(client: ClientEnd, run_id: str) -> str:
    return " ".join(client.response_texts(run_id))


def second_worker(url: str, adopted: list[bool], **options: object) -> Agent:
    agent = Agent(url, **options)  # type: ignore[arg-type]

    @agent.on_run
    async def handle(run: Run) -> None:
        adopted.append(run.adopted)

        async def reply() -> AsyncIterator[str]:
            yield "second worker"

        await run.pipe(reply())

    return agent


async def test_sigterm_lets_a_run_finish_and_takes_no_new_one(tmp_path: Path) -> None:
    gate = tmp_path / "go"
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.3) as server,
        client_end(server.url, "worker-finish") as client,
    ):
        # The URL and the grace come from the environment, the app from the command line.
        env = {"RUNWIRE_URL": server.url, "RUNWIRE_SHUTDOWN_GRACE": "30"}
        async with worker_process(["--app-dir", str(HERE), "worker_app:make"], env) as w:
            first = await client.prompt(f"wait {gate}")
            await client.wait_for(lambda: "working" in texts(client, first))
            w.proc.send_signal(signal.SIGTERM)
            await w.expect("runwire worker stopping (SIGTERM, grace 30 s)")
            later = await client.prompt("hello")
            gate.write_text("")
            await client.wait_status(first, "complete", "error", timeout=30)
            assert await w.wait() == 0, w.stderr()
            assert client.tree.run(first).status == "complete"  # type: ignore[union-attr]
            assert f"done by {w.proc.pid}" in texts(client, first)
        # The stopping worker did not take the later Run: another worker does.
        assert client.tree.run(later).status == "pending"  # type: ignore[union-attr]
        adopted: list[bool] = []
        async with second_worker(server.url, adopted):
            await client.wait_status(later, "complete", "error", timeout=30)
        assert texts(client, later) == "second worker"


async def test_a_run_past_the_grace_ends_with_a_clear_reason() -> None:
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=30) as server,
        client_end(server.url, "worker-stall") as client,
    ):
        args = ["--url", server.url, "--shutdown-grace", "0.2", "worker_app:make"]
        async with worker_process([*args, "--app-dir", str(HERE)], {}) as w:
            run_id = await client.prompt("stall")
            await client.wait_for(lambda: "working" in texts(client, run_id))
            w.proc.send_signal(signal.SIGTERM)
            await client.wait_status(run_id, "complete", "error", "cancelled", timeout=30)
            assert await w.wait() == 0, w.stderr()
        info = client.tree.run(run_id)
        assert info is not None and info.status == "error"
        assert info.error is not None and info.error["code"] == "AGENT_LOST"
        assert info.error["details"] == {"reason": "worker_shutdown", "grace_seconds": 0.2}
        assert "shut down" in info.error["message"]


async def test_a_durable_run_is_handed_to_another_worker(tmp_path: Path) -> None:
    async with (
        # The grace outlasts the worker's exit on a loaded machine: the Run must still be
        # active when the test looks, before a second worker adopts it.
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=1.5) as server,
        client_end(server.url, "worker-durable") as client,
    ):
        # Everything from a configuration file this time.
        conf = tmp_path / "runwire.toml"
        conf.write_text(
            f'[worker]\napp = "worker_app:make"\napp-dir = "{HERE}"\nurl = "{server.url}"\n'
            "durable = true\nshutdown-grace = 0.1\n"
        )
        async with worker_process(["--config", str(conf)], {}) as w:
            run_id = await client.prompt("stall")
            await client.wait_for(lambda: "working" in texts(client, run_id))
            w.proc.send_signal(signal.SIGTERM)
            assert await w.wait() == 0, w.stderr()
        # Left active, not ended: the relay hands it on after its agent_grace.
        assert client.tree.run(run_id).status == "active"  # type: ignore[union-attr]
        adopted: list[bool] = []
        async with second_worker(server.url, adopted, durable=True):
            await client.wait_status(run_id, "complete", "error", timeout=30)
        assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
        assert adopted == [True]


def test_load_runs_a_prebuilt_agent_and_refuses_options_for_it() -> None:
    sys.path.insert(0, str(HERE))
    try:
        built = worker.load("worker_app:built", {}, [])
        assert built.name == "prebuilt"
        with pytest.raises(ValueError, match="--url apply to a factory only"):
            worker.load("worker_app:built", {}, ["url"])
        made = worker.load(
            "worker_app:make",
            {"url": "ws://127.0.0.1:9", "name": "maker", "durable": True},
            ["name"],
        )
        assert made.name == "maker" and made.options.durable
        with pytest.raises(ValueError, match="neither an Agent nor a factory"):
            worker.load("worker_app:not_an_agent", {}, [])
        with pytest.raises(ValueError, match="has no attribute 'missing'"):
            worker.load("worker_app:missing", {}, [])
        with pytest.raises(ValueError, match="is not module:attr"):
            worker.load("worker_app", {}, [])
    finally:
        sys.path.remove(str(HERE))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give the app as module:attr"),
        (["no_such_module_here:agent"], "cannot import 'no_such_module_here'"),
        (["worker_app:built", "--url", "ws://x"], "apply to a factory only"),
        (["worker_app:make", "--shutdown-grace", "-1"], "--shutdown-grace: must be 0 or more"),
        (["worker_app:make", "--token-file", "/nonexistent/t"], "--token-file /nonexistent/t"),
    ],
)
def test_bad_worker_input_exits_2(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runwire", "worker", "--app-dir", str(HERE), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
