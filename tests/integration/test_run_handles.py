"""The seed's "Run Handles", "Drain Modes" and "What Is Not Delivered", sentence by sentence.

Relay + agent SDK + client SDK over loopback WebSockets, with a scripted model.
Each test names the sentence of shared/seeds/cogitator-steering-interrupts-cancellation.txt
it shows.
"""

from __future__ import annotations

import anyio
import pytest

import agent_side
import client_side
from agent_side import AbortSignal, Run
from client_side import Outcome
from transport import RunwireError, UIMessage, message_text

from .harness import UNTIL_ABORT, ScriptedModel, stack, status, texts, wait_until

pytestmark = pytest.mark.anyio


# ------------------------------------------------------------ Run Handles --


async def test_start_returns_a_handle_at_once_and_its_result_is_the_runs() -> None:
    """Seed:
    “cog.start() ... returns a RunHandle at once. Its result is what run() would return.”
    """
    release = anyio.Event()
    model = ScriptedModel(["Planning ", release, "done"])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("Plan the release")
        await model.wait_calls(1)
        assert run.status in ("pending", "active")  # the handle came back while it runs
        release.set()
        result = await run.result()
        assert (result.status, result.end_reason, result.undelivered) == (
            "complete",
            "complete",
            [],
        )
        assert texts(session)[-1] == ("assistant", "Planning done")


async def test_steer_follow_up_and_inject_on_one_run() -> None:
    """The seed's example: steer, followUp and inject on one handle, then its result."""
    hold = anyio.Event()
    model = ScriptedModel(["Drafting", hold, " the plan"], ["Plan v2"], ["Announcement"])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("Plan the release")
        await model.wait_calls(1)
        steer = run.steer("Skip the changelog, it is done")
        follow = run.follow_up("Then draft the announcement")
        inject = run.inject("The release date moved to Friday")
        for d in (steer, follow, inject):
            await d.published
        await wait_until(lambda: len(run.queued) == 3)
        hold.set()
        result = await run.result()
        assert result.status == "complete" and result.undelivered == []
        assert len(model.calls) == 3
        # Call 2 (same turn) took the steering and the inject; call 3 (a new turn) the follow-up.
        assert model.texts(1)[-2:] == [
            "Skip the changelog, it is done",
            "The release date moved to Friday",
        ]
        assert model.texts(2)[-1] == "Then draft the announcement"
        for d in (steer, follow, inject):
            assert await d.outcome == Outcome(consumed=True, run_terminal_reason="complete")


@pytest.mark.parametrize("ending", ["complete", "cancelled"])
async def test_each_method_returns_false_once_the_run_no_longer_takes_messages(
    ending: str,
) -> None:
    """Seed: “Each method returns false once the run no longer takes messages.”"""
    model = ScriptedModel(["hi"] if ending == "complete" else ["h", UNTIL_ABORT])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("hello")
        if ending == "cancelled":
            await model.wait_calls(1)
            await run.cancel()
        await run.result()
        head = session.view.newest_serial
        for send in (run.steer, run.follow_up, run.inject):
            delivery = send("anyone?")
            for awaitable in (delivery.published, delivery.outcome):
                with pytest.raises(RunwireError) as exc:
                    await awaitable
                assert exc.value.code == "RUN_NOT_ACTIVE"
        await anyio.sleep(0.1)
        assert session.view.newest_serial == head  # nothing was published


async def test_abort_is_final_and_returns_what_was_never_delivered() -> None:
    """Seed: “abort() is final: the messages it returns were never delivered or saved.”"""
    model = ScriptedModel(["Thinking", UNTIL_ABORT], ["next run"])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle, queue={"steering": "one-at-a-time"}) as (server, _):
        async with client_side.connect(server.url, "s") as session:
            run = await session.send("first")
            await model.wait_calls(1)
            follow = run.follow_up("later, this")
            inject = run.inject("some context")
            await follow.published
            await inject.published
            undelivered = await run.cancel()
            assert [m.id for m in undelivered] == [follow.message.id, inject.message.id]
            for d in (follow, inject):
                assert await d.outcome == Outcome(consumed=False, run_terminal_reason="cancelled")
            assert (await run.result()).status == "cancelled"
            second = await session.send("second")
            await second.result()
        conversation = [message_text(m) for m in model.calls[1]]
        assert "later, this" not in conversation and "some context" not in conversation


async def test_an_abort_after_the_last_model_turn_may_still_complete() -> None:
    """Seed: “One that comes after the run's last model turn has nothing left to stop.”"""
    answered = anyio.Event()
    finish = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            await run.pipe(ScriptedModel(["all done"])([], run.abort_signal))
        answered.set()
        await finish.wait()
        await run.end("complete")  # its work was done: it completes

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            await answered.wait()
        await session.cancel(run.run_id)
        finish.set()
        assert await run.cancel() == []
        assert (await run.result()).status == "complete"


async def test_queued_lists_what_waits() -> None:
    """Seed: “handle.queued lists what waits.”"""
    hold, hold_again = anyio.Event(), anyio.Event()
    model = ScriptedModel(["busy", hold], ["steered", hold_again])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        await model.wait_calls(1)
        a = run.steer("a")
        b = run.follow_up("b")
        assert [m.id for m in run.queued] == [a.message.id, b.message.id]  # even before sequenced
        await b.published
        hold.set()
        await model.wait_calls(2)  # took the steering in; the follow-up still waits
        await wait_until(lambda: [m.id for m in run.queued] == [b.message.id])
        hold_again.set()
        await run.result()
        assert run.queued == []


async def test_a_delivered_message_is_saved_with_metadata_queued_and_a_later_run_reads_it() -> None:
    """Seed: “saved ... with metadata.queued ... A later run reads it in its history.”"""
    hold = anyio.Event()
    model = ScriptedModel(["one", hold], ["two"], ["three"], ["four"])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("start")
        await model.wait_calls(1)
        deliveries = [
            run.steer("steered"),
            run.inject("injected"),
            run.follow_up("followed up"),
        ]
        for d in deliveries:
            await d.published
        await wait_until(lambda: len(run.queued) == 3)
        hold.set()
        await run.result()
        queued = {
            message_text(vm.message): vm.message.metadata.get("queued")
            for vm in session.view.messages()
            if vm.message.role == "user"
        }
        assert queued == {
            "start": None,
            "steered": "steer",
            "injected": "inject",
            "followed up": "follow_up",
        }
        later = await session.send("what did I ask?")
        await later.result()
    history = {message_text(m): m.metadata.get("queued") for m in model.calls[-1]}
    assert history["steered"] == "steer"
    assert history["injected"] == "inject"
    assert history["followed up"] == "follow_up"


# ------------------------------------------------------------ Drain Modes --


async def steer_three_times(mode: str) -> tuple[ScriptedModel, list[client_side.Delivery]]:
    hold = anyio.Event()
    model = ScriptedModel(["first answer", hold])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle, queue={"steering": mode}) as (server, _):
        async with client_side.connect(server.url, "s") as session:
            run = await session.send("go")
            await model.wait_calls(1)
            deliveries = [run.steer(f"steer {i}") for i in (1, 2, 3)]
            for d in deliveries:
                await d.published
            await anyio.sleep(0.1)  # let all three fold into the agent's view
            hold.set()
            await run.result()
    return model, deliveries


async def test_one_at_a_time_gives_three_steering_messages_three_model_calls() -> None:
    """Seed:
    “'one-at-a-time' ... takes one per model call, so three steering messages get three.”
    """
    model, deliveries = await steer_three_times("one-at-a-time")
    assert len(model.calls) == 1 + 3
    for i, call in enumerate(model.calls[1:], start=1):
        steering = [message_text(m) for m in call if message_text(m).startswith("steer")]
        assert steering == [f"steer {j}" for j in range(1, i + 1)]  # one more each call
    for d in deliveries:
        assert (await d.outcome).consumed


async def test_all_gives_three_steering_messages_one_model_call() -> None:
    """Seed: “'all' takes every message waiting.”"""
    model, _ = await steer_three_times("all")
    assert len(model.calls) == 1 + 1
    assert model.texts(1)[-3:] == ["steer 1", "steer 2", "steer 3"]


@pytest.mark.parametrize(("mode", "turns"), [("one-at-a-time", 3), ("all", 2)])
async def test_follow_up_modes(mode: str, turns: int) -> None:
    """queue.followUp: follow-ups one per new turn, or all in one."""
    hold = anyio.Event()
    model = ScriptedModel(["first", hold])
    seen_turns: list[int] = []

    async def handle(run: Run) -> None:
        async def model_with_turns(messages: list[UIMessage], signal: AbortSignal):  # type: ignore[no-untyped-def]
            seen_turns.append(run.turn)
            async for item in model(messages, signal):
                yield item

        await agent_side.steering_loop(run, model_with_turns)

    async with stack(handle, queue={"follow_up": mode}) as (server, _):
        async with client_side.connect(server.url, "s") as session:
            run = await session.send("go")
            await model.wait_calls(1)
            for d in (run.follow_up("f1"), run.follow_up("f2")):
                await d.published
            await anyio.sleep(0.1)
            hold.set()
            await run.result()
    assert seen_turns == list(range(1, turns + 1))


async def test_a_follow_up_gets_a_new_turn_with_its_own_iteration_budget() -> None:
    """Seed: “A follow-up starts a new turn, so it gets the agent's maxIterations again.”"""
    hold = anyio.Event()
    model = ScriptedModel(["a1", hold], ["a2"], ["b1"])
    budget: list[tuple[int, int]] = []

    async def handle(run: Run) -> None:
        async def counting(messages: list[UIMessage], signal: AbortSignal):  # type: ignore[no-untyped-def]
            budget.append((run.turn, run.iterations))
            async for item in model(messages, signal):
                yield item

        await agent_side.steering_loop(run, counting, max_iterations=2)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        await model.wait_calls(1)
        steer = run.steer("also this")  # turn 1: its 2nd and last model call
        follow = run.follow_up("and then that")  # turn 2: a fresh budget of 2
        await steer.published
        await follow.published
        await anyio.sleep(0.1)
        hold.set()
        result = await run.result()
        assert result.status == "complete" and result.undelivered == []
        assert (await follow.outcome).consumed
    # (turn, model calls of the turn so far, this one included)
    assert budget == [(1, 1), (1, 2), (2, 1)]


# ---------------------------------------------------- What Is Not Delivered --


async def test_stopping_at_max_iterations_returns_what_it_did_not_take() -> None:
    """Seed:
    “stops at maxIterations with onIterationLimit: 'stop', returns ... result.undelivered.”
    """
    hold = anyio.Event()
    model = ScriptedModel(["only call", hold])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model, max_iterations=1)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        await model.wait_calls(1)
        late = run.steer("one more thing")
        await late.published
        await anyio.sleep(0.1)
        hold.set()
        result = await run.result()
        assert result.status == "complete"
        assert [m.id for m in result.undelivered] == [late.message.id]
        assert await late.outcome == Outcome(consumed=False, run_terminal_reason="complete")
        assert ("user", "one more thing") in texts(session)  # on the channel, as sent
        again = await session.send("next")
        await again.result()
    # "They never reached the thread": the next Run does not read it.
    assert "one more thing" not in [message_text(m) for m in model.calls[-1]]


async def test_on_iteration_limit_error_fails_the_run_and_leaves_them_queued() -> None:
    """onIterationLimit 'error' fails the Run, and “a failed run leaves them in handle.queued”."""
    hold = anyio.Event()
    model = ScriptedModel(["only call", hold])

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle, max_iterations=1, on_iteration_limit="error") as (server, _):
        async with client_side.connect(server.url, "s") as session:
            run = await session.send("go")
            await model.wait_calls(1)
            late = run.steer("more")
            await late.published
            await anyio.sleep(0.1)
            hold.set()
            result = await run.result()
            assert result.status == "error" and result.undelivered == []
            info = session.view.run(run.run_id)
            assert info is not None and info.error is not None
            assert info.error["code"] == "ITERATION_LIMIT_REACHED"
            assert [m.id for m in run.queued] == [late.message.id]


async def test_a_failed_run_leaves_them_in_queued() -> None:
    """Seed: “a failed run leaves them in handle.queued.”"""
    hold = anyio.Event()

    async def failing(messages: list[UIMessage], signal: AbortSignal):  # type: ignore[no-untyped-def]
        yield "starting"
        await hold.wait()
        raise RuntimeError("model went away")

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, failing)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        await wait_until(lambda: status(session, run.run_id) == "active")
        follow = run.follow_up("afterwards")
        await follow.published
        hold.set()
        result = await run.result()
        assert result.status == "error" and result.undelivered == []
        assert [m.id for m in run.queued] == [follow.message.id]
        assert await follow.outcome == Outcome(consumed=False, run_terminal_reason="error")


async def test_an_inject_with_no_model_call_left_is_saved() -> None:
    """Seed: “An injected message the run had no model call left for is saved to the thread.”"""
    answered = anyio.Event()
    finish = anyio.Event()
    model = ScriptedModel(["answer"], ["later"])

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            await run.pipe(model(run.history(), run.abort_signal))
        answered.set()
        await finish.wait()
        assert not run.has_input()  # an inject causes no model call
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        with anyio.fail_after(10):
            await answered.wait()
        inject = run.inject("the date moved to Friday")
        await inject.published
        await anyio.sleep(0.1)
        finish.set()
        result = await run.result()
        assert result.undelivered == []
        assert await inject.outcome == Outcome(consumed=True, run_terminal_reason="complete")
        later = await session.send("when is it?")
        await later.result()
    assert len(model.calls) == 2
    assert "the date moved to Friday" in model.texts(1)


async def test_an_inject_where_the_run_keeps_no_history_is_undelivered() -> None:
    """Seed: “unless the run saves no history ..., then it is in undelivered too.”"""
    answered = anyio.Event()
    finish = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            await run.pipe(ScriptedModel(["answer"])([], run.abort_signal))
        answered.set()
        await finish.wait()
        await run.end()

    async with stack(handle, history=False) as (server, _):
        async with client_side.connect(server.url, "s") as session:
            run = await session.send("go")
            with anyio.fail_after(10):
                await answered.wait()
            inject = run.inject("the date moved to Friday")
            await inject.published
            await anyio.sleep(0.1)
            finish.set()
            result = await run.result()
            assert [m.id for m in result.undelivered] == [inject.message.id]
            assert await inject.outcome == Outcome(consumed=False, run_terminal_reason="complete")


async def test_a_suspended_run_keeps_its_queue_and_takes_it_when_it_resumes() -> None:
    """A pause returns what the Run has not taken in (the issue's rule) and keeps it queued,
    outcome pending (the Ably rule): the resumed Run takes it."""
    suspended = anyio.Event()
    resume = anyio.Event()
    model = ScriptedModel(["asking"], ["resumed answer"])

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            await run.pipe(model(run.history(), run.abort_signal))
        await run.suspend()
        suspended.set()
        await resume.wait()
        await run.start()
        while run.has_input():
            await run.pipe(model(run.history(), run.abort_signal))
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("deploy")
        with anyio.fail_after(10):
            await suspended.wait()
        steer = run.steer("use the eu region")
        await steer.published
        result = await run.result()
        assert result.status == "suspended"
        assert [m.id for m in result.undelivered] == [steer.message.id]
        assert [m.id for m in run.queued] == [steer.message.id]
        assert not steer.outcome.done()
        resume.set()
        assert await steer.outcome == Outcome(consumed=True, run_terminal_reason="complete")
        assert model.texts(1)[-1] == "use the eu region"
