"""A paused Run outlives its worker: SIGKILL, an answer from a second device, a fresh worker."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

import client_side
import relay
from transport import RunwireError, message_text

from .harness import start_worker_process, status, wait_until

pytestmark = pytest.mark.anyio


async def test_a_pause_survives_a_sigkill_and_a_fresh_worker_finishes_the_run() -> None:
    async with (
        relay.serve(port=0, store="memory://", agent_grace=0.3) as server,
        client_side.connect(server.url, "pause-crash") as phone,
    ):
        proc, wait_line = await start_worker_process(server.url, "interrupt", "--durable")
        try:
            run = await phone.send("Deploy the api")
            await wait_line("ASKING")
            paused = await run.result()
            assert paused.status == "suspended"
            assert [q.id for q in paused.interrupts] == ["c1#0"]
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        async with client_side.connect(server.url, "pause-crash") as laptop:
            waiting = laptop.paused_run()
            assert waiting is not None and waiting.run_id == run.run_id
            [question] = waiting.interrupts
            assert question.message == "Where should c1 go?"
            await laptop.resume(run.run_id, {question.id: {"region": "eu"}})
        assert status(phone, run.run_id) != "complete"  # no worker yet: the Run waits for one
        fresh, wait_fresh = await start_worker_process(server.url, "interrupt", "--durable")
        try:
            await wait_fresh("ASKING")  # the tool runs again from its start, and gets its answer
            await wait_until(lambda: status(phone, run.run_id) == "complete", timeout=20)
        finally:
            fresh.kill()
            fresh.wait()
        replies = [
            message_text(vm.message)
            for vm in phone.view.messages()
            if vm.run_id == run.run_id and vm.message.role == "assistant"
        ]
        assert replies[-1] == "Done: c1 deployed to eu; sent"
        assert phone.paused_run() is None


CALLS = [("c1", "deploy", {"service": "api"})]
"""The tool call the interrupt worker asks about (``tests.agent_side.test_interrupts``)."""


async def paused_deploy(phone: client_side.ClientSession) -> str:
    """Send the deploy prompt; the id of its Run, once paused on question ``c1#0``."""
    run = await phone.send("Deploy the api")
    with anyio.fail_after(10):
        paused = await run.result()
    assert [q.id for q in paused.interrupts] == ["c1#0"]
    return run.run_id


async def completes(session: client_side.ClientSession, run_id: str) -> None:
    with anyio.fail_after(10):
        while status(session, run_id) != "complete":
            await session._wait_change()


async def test_a_pause_outlives_a_relay_restart(tmp_path: Path) -> None:
    """The pause is on the Run's record in the store: a restarted relay knows what it waits on."""
    from tests.agent_side.test_interrupts import final_text, worker

    store = f"sqlite:///{tmp_path / 'relay.db'}"
    async with relay.serve(port=0, store=store) as first:
        async with worker(first.url, CALLS), client_side.connect(first.url, "restart") as phone:
            run_id = await paused_deploy(phone)
    async with relay.serve(port=0, store=store) as second:
        async with client_side.connect(second.url, "restart") as laptop:
            waiting = laptop.paused_run()
            assert waiting is not None and waiting.run_id == run_id
            with pytest.raises(RunwireError) as info:
                await laptop.resume(run_id, {"c1#0": {"region": "mars"}})
            assert info.value.code == "INTERRUPT_ANSWER_INVALID"
            await laptop.resume(run_id, {"c1#0": {"region": "us"}})
            async with worker(second.url, CALLS):
                await completes(laptop, run_id)
            assert final_text(laptop, run_id) == "api deployed to us"


async def test_an_answer_stored_just_before_its_relay_died_resumes_the_run_on_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is stored, the relay dies before it publishes the resume it owes: whichever
    relay loads the session next publishes it."""
    from tests.agent_side.test_interrupts import final_text, worker

    store = f"sqlite:///{tmp_path / 'relay.db'}"
    async with relay.serve(port=0, store=store) as first:
        async with worker(first.url, CALLS), client_side.connect(first.url, "died") as phone:
            run_id = await paused_deploy(phone)
            # The relay takes the answer in and dies before reacting to it.
            monkeypatch.setattr(first.hub.reactions, "react_soon", lambda channel: None)
            await phone.resume(run_id, {"c1#0": {"region": "us"}})
            assert status(phone, run_id) == "suspended"
    async with relay.serve(port=0, store=store) as second:
        async with worker(second.url, CALLS), client_side.connect(second.url, "died") as laptop:
            await completes(laptop, run_id)
            assert final_text(laptop, run_id) == "api deployed to us"


async def test_a_resume_owed_at_a_restart_is_published_though_no_client_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer came over HTTP (or its device left) and the relay died before publishing the
    resume: the restarted relay publishes it by itself, as it gives queued Runs their turn,
    and the worker finishes the Run with no client attached to the session."""
    from tests.agent_side.test_interrupts import worker

    store = f"sqlite:///{tmp_path / 'relay.db'}"
    async with relay.serve(port=0, store=store) as first:
        async with worker(first.url, CALLS), client_side.connect(first.url, "unwatched") as phone:
            run_id = await paused_deploy(phone)
            monkeypatch.setattr(first.hub.reactions, "react_soon", lambda channel: None)
            await phone.resume(run_id, {"c1#0": {"region": "eu"}})
    monkeypatch.undo()
    async with relay.serve(port=0, store=store) as second, worker(second.url, CALLS):
        with anyio.fail_after(10):
            while (record := await second.store.run("unwatched", run_id)) is None or (
                record.status != "complete"
            ):
                await anyio.sleep(0.02)
