"""ClientRun, Delivery and the steering outcomes, against a real relay and a scripted agent."""

from __future__ import annotations

import gc
import warnings

import anyio
import pytest

import client_side
from client_side import ClientRun, Delivery, Outcome, PendingResult, Published
from transport.errors import RunwireError
from transport.messages import user_message

from .fake_agent import FakeAgent, channel_entries

# ------------------------------------------------------------- unit: awaitables --


@pytest.mark.anyio
async def test_pending_result_resolves_every_awaiter_and_settles_once() -> None:
    pending: PendingResult[int] = PendingResult()
    got: list[int] = []

    async def waiter() -> None:
        got.append(await pending)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert not pending.done()
            assert pending.resolve(7)
            assert not pending.resolve(8)
            assert not pending.reject(RunwireError("X"))
    assert got == [7, 7]
    assert await pending == 7
    assert pending.value() == 7


@pytest.mark.anyio
async def test_pending_result_rejects_every_await() -> None:
    pending: PendingResult[int] = PendingResult()
    pending.reject(RunwireError("RUN_NOT_ACTIVE", "gone"))
    for _ in range(2):
        with pytest.raises(RunwireError) as info:
            await pending
        assert info.value.code == "RUN_NOT_ACTIVE"
    assert isinstance(pending.error(), RunwireError)
    with pytest.raises(RunwireError):
        pending.value()


def test_pending_result_value_before_settling_raises() -> None:
    with pytest.raises(RuntimeError):
        PendingResult[int]().value()


def test_unawaited_rejected_delivery_warns_nothing() -> None:
    gc.collect()  # what earlier tests left (a subprocess's pipe, say) is not this test's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        delivery = Delivery(user_message("x"), "run-1")
        delivery.fail(RunwireError("RUN_NOT_ACTIVE"))
        del delivery
        gc.collect()


# ------------------------------------------------------------- integration --


@pytest.mark.anyio
async def test_send_returns_after_ack_with_a_pending_run(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id, agent="helper") as session:
            run = await session.send("Plan a 3-day trip to Lisbon.")
            assert isinstance(run, ClientRun)
            assert run.status == "pending"
            assert run.queued == [] and run.refused == []
            entries = await channel_entries(relay_url, session_id)
    prompts = [e for e in entries if e["kind"] == "message"]
    assert len(prompts) == 1
    assert prompts[0]["intent"] == "prompt"
    assert prompts[0]["run_id"] == run.run_id
    assert prompts[0]["agent"] == "helper"
    assert run.prompt is not None and prompts[0]["message"]["id"] == run.prompt.id


@pytest.mark.anyio
async def test_send_rejects_an_unknown_multitask_before_publishing(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            with pytest.raises(RunwireError) as info:
                await session.send("hi", multitask="sideways")  # type: ignore[arg-type]
            assert info.value.code == "VALIDATION_ERROR"
            run = await session.send("hi", multitask="alongside")
            entries = await channel_entries(relay_url, session_id)
    assert [e["run_id"] for e in entries] == [run.run_id]


@pytest.mark.anyio
async def test_send_refuses_a_reused_message_id(relay_url: str, session_id: str) -> None:
    message = user_message("once")
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            await session.send(message)
            await _wait(session, lambda: len(session.view.messages()) == 1)
            with pytest.raises(RunwireError) as info:
                await session.send(message)
            assert info.value.code == "VALIDATION_ERROR"
            await session.send("newer")
        # A client whose view does not hold it learns from the relay's duplicate ack.
        async with client_side.connect(relay_url, session_id, history_limit=1) as other:
            assert other.view.tree.message(message.id) is None
            with pytest.raises(RunwireError) as info:
                await other.send(message)
            assert info.value.code == "VALIDATION_ERROR"
            assert info.value.details["serial"] == 1
        entries = await channel_entries(relay_url, session_id)
    assert len(entries) == 2


@pytest.mark.anyio
async def test_steer_on_ended_run_rejects_at_once_and_publishes_nothing(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("hi")
            await agent.start(run.run_id)
            await agent.reply(run.run_id, "hello")
            await agent.end(run.run_id)
            await _wait(session, lambda: run.status == "complete")
            late = user_message("too late")
            delivery = run.steer(late)
            assert delivery.published.done() and delivery.outcome.done()
            for awaitable in (delivery.published, delivery.outcome):
                with pytest.raises(RunwireError) as info:
                    await awaitable
                assert info.value.code == "RUN_NOT_ACTIVE"
            assert run.queued == []
            entries = await channel_entries(relay_url, session_id)
    assert all(e.get("message", {}).get("id") != late.id for e in entries)


@pytest.mark.anyio
async def test_steer_refused_by_relay_rejects_both(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            unknown = ClientRun(session, "no-such-run", None)
            delivery = unknown.steer("anyone?")
            assert not delivery.published.done()  # the view could not tell: the relay decides
            for awaitable in (delivery.published, delivery.outcome):
                with pytest.raises(RunwireError) as info:
                    await awaitable
                assert info.value.code == "RUN_NOT_FOUND"
            assert unknown.queued == []


@pytest.mark.anyio
async def test_steer_consumed_resolves_at_run_end(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("Plan a 3-day trip to Lisbon.")
            await agent.start(run.run_id)
            delivery = run.steer("Make it 5 days, and keep it under £800.")
            published = await delivery.published
            assert isinstance(published, Published)
            steer = await agent.wait_steer(delivery.message.id)
            assert steer["serial"] == published.serial
            assert steer["intent"] == "steer" and steer["run_id"] == run.run_id
            assert run.queued == [delivery.message]
            await agent.reply(run.run_id, "5 days, cheap", seen=[delivery.message.id])
            assert not delivery.outcome.done()  # seen is not enough: the Run must end
            await agent.end(run.run_id)
            assert await delivery.outcome == Outcome(consumed=True, run_terminal_reason="complete")
            result = await run.result()
            assert (result.status, result.end_reason) == ("complete", "complete")
            assert result.undelivered == [] and result.interrupts == []
            assert run.queued == []


@pytest.mark.anyio
async def test_steer_after_last_response_is_not_consumed(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("hi")
            await agent.start(run.run_id)
            await agent.reply(run.run_id, "done already")
            delivery = run.steer("wait, one more thing")
            await agent.wait_steer(delivery.message.id)
            await agent.end(run.run_id)
            outcome = await delivery.outcome
            assert outcome == Outcome(consumed=False, run_terminal_reason="complete")
            result = await run.result()
            assert result.undelivered == [delivery.message]


@pytest.mark.anyio
async def test_suspend_resolves_consumed_steering_and_keeps_the_rest_pending(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("book it")
            await agent.start(run.run_id)
            seen = run.steer("window seat")
            unseen = run.steer("and a meal")
            await agent.wait_steer(seen.message.id)
            await agent.reply(run.run_id, "asking for approval", seen=[seen.message.id])
            await agent.wait_steer(unseen.message.id)
            await agent.suspend(run.run_id)
            result = await run.result()
            assert (result.status, result.end_reason) == ("suspended", None)
            assert await seen.outcome == Outcome(consumed=True, run_terminal_reason=None)
            assert not unseen.outcome.done()
            assert run.queued == [unseen.message]
            assert result.undelivered == [unseen.message]  # returned, and still queued
            # The Run resumes and is cancelled: the pending one settles, not consumed.
            await agent.start(run.run_id)
            await agent.end(run.run_id, "cancelled")
            assert await unseen.outcome == Outcome(consumed=False, run_terminal_reason="cancelled")
            result = await run.result()
            assert (result.status, result.end_reason) == ("cancelled", "cancelled")
            assert result.undelivered == [unseen.message]


@pytest.mark.anyio
async def test_two_runs_side_by_side_fold_by_run_id(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            first = await session.send("Plan a trip.")
            second = await session.send("Also include vegan options.")
            await agent.start(first.run_id)
            await agent.start(second.run_id)
            a = await agent.open(first.run_id)
            b = await agent.open(second.run_id)
            for i in range(3):
                await agent.append(first.run_id, a, f"a{i} ")
                await agent.append(second.run_id, b, f"b{i} ")
            await agent.end(second.run_id)
            await _wait(session, lambda: second.status == "complete")
            assert first.status == "active"
            by_id = {vm.message.id: vm for vm in session.view.messages()}
            assert by_id[a].run_id == first.run_id
            assert by_id[a].message.text() == "a0 a1 a2 "
            assert by_id[b].run_id == second.run_id
            assert by_id[b].message.text() == "b0 b1 b2 "
            statuses = {r.run_id: r.status for r in session.view.runs()}
            assert statuses == {first.run_id: "active", second.run_id: "complete"}


@pytest.mark.anyio
async def test_cancel_one_of_two_runs_returns_undelivered_steering(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            first = await session.send("one")
            second = await session.send("two")
            await agent.start(first.run_id)
            await agent.start(second.run_id)
            ignored = first.steer("never read")
            await ignored.published

            async def agent_honours_cancel() -> None:
                cancel = await agent.wait_for(lambda e: e["kind"] == "cancel")
                assert cancel["run_id"] == first.run_id
                assert cancel["reason"] == "changed my mind"
                await agent.end(first.run_id, "cancelled")

            async with anyio.create_task_group() as tg:
                tg.start_soon(agent_honours_cancel)
                undelivered = await first.cancel("changed my mind")
            assert undelivered == [ignored.message]
            assert first.status == "cancelled"
            assert second.status == "active"
            assert session.view.tree.cancel_requested(first.run_id)
            assert not session.view.tree.cancel_requested(second.run_id)
            assert await ignored.outcome == Outcome(False, "cancelled")
            # The other Run goes on; cancelling an ended one does nothing and says nothing.
            before = session.view.tree.newest_serial
            await session.cancel(first.run_id)
            assert session.view.tree.newest_serial == before
            with pytest.raises(RunwireError) as info:
                await session.cancel("no-such-run")
            assert info.value.code == "RUN_NOT_FOUND"


@pytest.mark.anyio
async def test_cancel_without_an_answer_returns_pending_steering_at_timeout(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("one")
            await agent.start(run.run_id)
            pending = run.steer("still waiting")
            await pending.published
            assert await run.cancel(timeout=0.2) == [pending.message]
            assert run.status == "active"  # nobody ended it
            assert await run.cancel(wait=False) == [pending.message]


@pytest.mark.anyio
async def test_result_raises_when_the_session_closes(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            run = await session.send("one")
            delivery = run.steer("x")
            await delivery.published
        with pytest.raises(RunwireError) as info:
            await run.result()
        assert info.value.code == "CONNECTION_CLOSED"
        with pytest.raises(RunwireError) as info:
            await delivery.outcome
        assert info.value.code == "CONNECTION_CLOSED"


async def _wait(session: client_side.ClientSession, condition: object) -> None:
    assert callable(condition)
    while not condition():
        await session._wait_change()
