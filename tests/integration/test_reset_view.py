"""A client whose relay lost the history (a reset): what its view reports, and what its Run
handles do, over a real relay on loopback (a memory relay restarted on the same port)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import client_side
import relay
from client_side import ClientRun, ClientSession
from transport import RunwireError
from transport._tree import MessageEvent, RunEvent

pytestmark = pytest.mark.anyio

Event = MessageEvent | RunEvent


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


async def _catch(waiting: Awaitable[Any], into: list[BaseException | None]) -> None:
    try:
        await waiting
    except RunwireError as exc:
        into.append(exc)
    else:
        into.append(None)


async def test_a_reset_that_loses_a_run_reports_removals_and_fails_its_waits() -> None:
    async with relay.serve(port=0, store="memory://") as first:
        port = first.port
        session_cm = client_side.connect(first.url, "s")
        session: ClientSession = await session_cm.__aenter__()
        try:
            run: ClientRun = await session.send("hello")  # no agent: the Run waits
            delivery = run.steer("pending")
            with anyio.fail_after(10):
                await delivery.published
            await wait_until(lambda: len(session.view.messages()) == 2)
            prompt_id, steer_id = (vm.message.id for vm in session.view.messages())
        except BaseException:
            await session_cm.__aexit__(None, None, None)
            raise
    seen: list[Event] = []
    session.view.on("message", seen.append)
    session.view.on("run", seen.append)
    results: list[BaseException | None] = []
    cancels: list[BaseException | None] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_catch, run.result(), results)
            async with relay.serve(port=port, store="memory://"):
                with anyio.fail_after(10):
                    await wait_until(lambda: len(results) == 1)
                assert session.connected and session.view.run(run.run_id) is None
                assert session.view.messages() == []
                # A handle on the lost Run: cancel(wait=True) does not wait forever either.
                tg.start_soon(_catch, run.cancel(timeout=None), cancels)
                with anyio.fail_after(10):
                    await wait_until(lambda: len(cancels) == 1)
    finally:
        await session_cm.__aexit__(None, None, None)
    [lost] = results
    assert isinstance(lost, RunwireError) and lost.code == "EPOCH_MISMATCH"
    assert lost.details["run_id"] == run.run_id
    removed = [
        (e.kind, e.message.message.id if isinstance(e, MessageEvent) else e.run.run_id)
        for e in seen
        if e.op == "removed"
    ]
    assert removed == [("message", prompt_id), ("message", steer_id), ("run", run.run_id)]
    [cancel_error] = cancels
    assert cancel_error is not None, "the cancel of a lost Run returned as if it ended"
    assert isinstance(cancel_error, RunwireError)
    assert cancel_error.code in ("EPOCH_MISMATCH", "RUN_NOT_FOUND")
    assert cancel_error.details["run_id"] == run.run_id


async def test_a_run_sent_after_a_reset_is_not_failed_by_it() -> None:
    async with relay.serve(port=0, store="memory://") as first:
        port = first.port
        session_cm = client_side.connect(first.url, "s")
        session: ClientSession = await session_cm.__aenter__()
        try:
            run = await session.send("hello")
            await wait_until(lambda: session.view.run(run.run_id) is not None)
        except BaseException:
            await session_cm.__aexit__(None, None, None)
            raise
    try:
        async with relay.serve(port=port, store="memory://"):
            await wait_until(lambda: session.connected and session.view.run(run.run_id) is None)
            fresh = await session.send("again")
            with anyio.move_on_after(0.3):
                await fresh.result()  # no agent: still waiting, and not failed
            assert fresh.status == "pending"
    finally:
        await session_cm.__aexit__(None, None, None)
