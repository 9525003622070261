"""A paused Run outlives its worker: SIGKILL, an answer from a second device, a fresh worker."""

from __future__ import annotations

import os
import signal

import pytest

import client_side
import relay
from transport import message_text

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
