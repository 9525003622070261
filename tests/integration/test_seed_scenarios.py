"""Every edge case and FAQ answer of the seed, end to end: relay + agent SDK + client SDK.

Real loopback WebSockets; the "model" is scripted so each test controls timing
with events rather than sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import AbortSignal, Run
from client_side import ClientSession, Outcome
from transport import RunwireError, UIMessage, message_text

from .link_proxy import LinkProxy

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
Handler = Callable[[Run], Awaitable[None]]


class Model:
    """Streams ``<tag>-<i>`` words; records the conversations it was called with."""

    def __init__(self, words: int = 30, delay: float = 0.01) -> None:
        self.words = words
        self.delay = delay
        self.calls: list[list[UIMessage]] = []
        self.gate: anyio.Event | None = None  # when set, the first word waits for it
        self.started = anyio.Event()

    async def __call__(self, messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        self.calls.append(messages)
        tag = message_text(messages[-1]).split()[0] if messages else "x"
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        for i in range(self.words):
            if signal.aborted:
                return
            yield f"{tag}-{i} "
            with anyio.move_on_after(self.delay):
                await signal.wait()


@asynccontextmanager
async def stack(
    handler: Handler | None, *, grace: float = 30.0, agent: bool = True
) -> AsyncIterator[tuple[relay.Server, agent_side.Agent | None]]:
    async with relay.serve(port=0, store="memory://", agent_grace=grace) as server:
        if not agent or handler is None:
            yield server, None
            return
        worker = agent_side.Agent(server.url)
        worker.on_run(handler)
        async with worker:
            yield server, worker


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def texts(session: ClientSession) -> list[tuple[str, str]]:
    return [(vm.message.role, message_text(vm.message)) for vm in session.view.messages()]


def status(session: ClientSession, run_id: str) -> str | None:
    info = session.view.run(run_id)
    return info.status if info else None


async def test_steering_consumed_before_the_response_resolves_consumed_at_the_end() -> None:
    model = Model(words=200)

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("trip plan please")
        await wait_until(lambda: len(model.calls) == 1 and model.started.is_set())
        model.words = 5
        delivery = run.steer("steer make it 5 days")
        published = await delivery.published
        assert published.serial > 0
        outcome = await delivery.outcome
        assert outcome == Outcome(consumed=True, run_terminal_reason="complete")
        result = await run.result()
        assert result.status == "complete" and result.undelivered == []
        # on_steer aborted the first call; the second call ends on the steering message.
        assert len(model.calls) == 2
        assert model.calls[1][-1].role == "user"
        assert message_text(model.calls[1][-1]) == "steer make it 5 days"


async def test_an_on_steer_that_raises_leaves_the_run_and_the_steering_alone() -> None:
    """The seed: a throwing onSteer is reported; the steer already folded, the Run goes on."""
    model = Model(words=100)
    raised: list[int] = []

    async def handle(run: Run) -> None:
        def broken() -> None:
            raised.append(1)
            raise ValueError("broken hook")

        run.on_steer = broken
        await run.start()
        while run.has_input():
            await run.pipe(model(run.history(), run.abort_signal))
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("hello")
        await wait_until(lambda: model.started.is_set())
        model.words = 3
        delivery = run.steer("steer shorter")
        with anyio.fail_after(10):
            outcome = await delivery.outcome
            result = await run.result()
    assert raised == [1]
    assert outcome == Outcome(consumed=True, run_terminal_reason="complete")
    assert result.status == "complete"
    assert message_text(model.calls[-1][-1]) == "steer shorter"


async def test_steering_after_the_last_pipe_is_not_consumed() -> None:
    piped = anyio.Event()
    release = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            await run.pipe(Model(words=3)([], run.abort_signal))
        piped.set()
        await release.wait()  # the agent is done answering but has not ended yet
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("hello")
        with anyio.fail_after(10):
            await piped.wait()
        delivery = run.steer("too late")
        await delivery.published
        release.set()
        assert await delivery.outcome == Outcome(consumed=False, run_terminal_reason="complete")
        result = await run.result()
        assert [m.id for m in result.undelivered] == [delivery.message.id]


async def test_steering_sent_offline_to_a_run_that_ends_meanwhile_is_not_consumed() -> None:
    """The seed's "arrives just as the agent finishes": typed while the link was down.

    The relay refuses the steer (the Run ended before it came), so nothing is
    published; the outcome still says the agent never saw it, and the Run's
    result lists it as undelivered, so the app can offer to send it again.
    """
    finish = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            await run.pipe(Model(words=3)([], run.abort_signal))
        await finish.wait()
        await run.end()

    async with stack(handle) as (server, _):
        proxy = LinkProxy(server.port)
        await proxy.start()
        try:
            async with client_side.connect(proxy.url, "s") as session:
                run = await session.send("hello")
                await wait_until(lambda: status(session, run.run_id) == "active")
                await proxy.cut()
                await wait_until(lambda: not session.connected)
                delivery = run.steer("make it shorter")
                finish.set()  # the Run ends while this client is offline
                async with client_side.connect(server.url, "s") as watcher:
                    # ... before it is back (else its steer may beat the end on a busy machine)
                    await wait_until(lambda: status(watcher, run.run_id) == "complete")
                await proxy.heal()
                with anyio.fail_after(10):
                    with pytest.raises(RunwireError) as refused:
                        await delivery.published
                    outcome = await delivery.outcome
                    result = await run.result()
        finally:
            await proxy.aclose()
    assert refused.value.code == "RUN_NOT_ACTIVE"
    assert outcome == Outcome(consumed=False, run_terminal_reason="complete")
    assert result.status == "complete"
    assert [m.id for m in result.undelivered] == [delivery.message.id]
    assert run.queued == []


async def test_a_relay_that_lost_the_history_rejects_outcomes_that_can_no_longer_resolve() -> None:
    """Continuity lost (the seed's drain on continuity loss): a pending outcome must not hang.

    The relay restarts on an empty store; the client's resume is answered
    ``reset``. Its Run is gone from the session, so the steering message's
    outcome can never resolve from the channel: it rejects ``EPOCH_MISMATCH``.
    """
    async with relay.serve(port=0, store="memory://") as first:
        port = first.port
        session_cm = client_side.connect(first.url, "s")
        session = await session_cm.__aenter__()
        try:
            run = await session.send("hello")  # no agent: the Run waits, the steer with it
            delivery = run.steer("pending")
            with anyio.fail_after(10):
                await delivery.published
        except BaseException:
            await session_cm.__aexit__(None, None, None)
            raise
    try:
        async with relay.serve(port=port, store="memory://"):
            with anyio.fail_after(10):
                with pytest.raises(RunwireError) as lost:
                    await delivery.outcome
            assert lost.value.code == "EPOCH_MISMATCH"
            assert lost.value.details["run_id"] == run.run_id
            assert session.connected and session.view.run(run.run_id) is None
    finally:
        await session_cm.__aexit__(None, None, None)


async def test_steer_on_an_ended_run_rejects_both_at_once_and_publishes_nothing() -> None:
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, Model(words=2))

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("hi")
        await run.result()
        head = session.view.newest_serial
        delivery = run.steer("anyone there?")
        with pytest.raises(RunwireError) as a:
            await delivery.published
        with pytest.raises(RunwireError) as b:
            await delivery.outcome
        assert a.value.code == b.value.code == "RUN_NOT_ACTIVE"
        await anyio.sleep(0.1)
        assert session.view.newest_serial == head


async def test_steering_during_a_suspend_stays_pending_until_resume() -> None:
    suspended = anyio.Event()
    resume = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        await wait_until(lambda: bool(run.unanswered()))  # a steer before the suspend
        run.has_input()
        await run.pipe(Model(words=2)([], run.abort_signal))
        await run.suspend()  # e.g. waiting for a tool approval
        suspended.set()
        await resume.wait()
        await run.start()  # resumed
        while run.has_input():
            await run.pipe(Model(words=2)([], run.abort_signal))
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("book it")
        await wait_until(lambda: status(session, run.run_id) == "active")
        before = run.steer("window seat")
        with anyio.fail_after(10):
            await suspended.wait()
        # Consumed before the suspend: resolves at the suspend, with no terminal reason.
        assert await before.outcome == Outcome(consumed=True, run_terminal_reason=None)
        during = run.steer("aisle, actually")
        await during.published
        await anyio.sleep(0.2)
        assert not during.outcome.done()  # still pending while suspended
        assert [m.id for m in run.queued] == [during.message.id]
        resume.set()
        assert await during.outcome == Outcome(consumed=True, run_terminal_reason="complete")


async def test_several_steering_messages_drain_into_one_model_call() -> None:
    model = Model(words=3)
    model.gate = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        while run.has_input():
            conversation = [vm.message for vm in run.view.messages()]
            await run.pipe(model(conversation, run.abort_signal))
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("first")
        with anyio.fail_after(10):
            await model.started.wait()
        deliveries = [run.steer(f"s{i} more") for i in range(3)]
        for d in deliveries:
            await d.published
        await anyio.sleep(0.2)  # let them fold into the agent's view
        model.gate.set()
        outcomes = [await d.outcome for d in deliveries]
        assert outcomes == [Outcome(consumed=True, run_terminal_reason="complete")] * 3
        assert len(model.calls) == 2  # the prompt, then all three steers at once
        tail = [message_text(m) for m in model.calls[1][-3:]]
        assert tail == ["s0 more", "s1 more", "s2 more"]


async def test_tokens_after_a_cancel_belong_to_the_cancelled_run() -> None:
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, Model(words=400, delay=0.002))

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        first = await session.send("alpha go")
        await wait_until(lambda: any("alpha-5" in t for _, t in texts(session)))
        await session.cancel(first.run_id)
        second = await session.send("beta go")
        await first.result()
        await second.result()
        assert status(session, first.run_id) == "cancelled"
        assert status(session, second.run_id) == "complete"
        for vm in session.view.messages():
            if vm.message.role == "assistant":
                text = message_text(vm.message)
                own = "alpha" if vm.run_id == first.run_id else "beta"
                other = "beta" if own == "alpha" else "alpha"
                assert own in text and other not in text


async def test_a_run_cancelled_while_awaiting_a_tool_ends_cancelled() -> None:
    tool_started = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()

        async def call_tool() -> AsyncIterator[dict[str, object]]:
            yield {
                "type": "tool-input-available",
                "toolCallId": "c1",
                "toolName": "search_flights",
                "input": {"to": "LIS"},
            }

        await run.pipe(call_tool())
        tool_started.set()
        async with run.abort_signal.scope():  # the tool honours the Run's signal
            await anyio.sleep_forever()
        await run.end("cancelled" if run.abort_signal.aborted else "complete")

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("find flights")
        with anyio.fail_after(10):
            await tool_started.wait()
        await run.cancel()
        result = await run.result()
        assert result.status == "cancelled" and result.end_reason == "cancelled"


async def test_a_network_drop_cancels_nothing_and_the_reply_is_there_after() -> None:
    model = Model(words=150, delay=0.005)

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("story time")
        await wait_until(lambda: any("story-3" in t for _, t in texts(session)))
        await session.link.conn.kill_socket()
        result = await run.result()
        assert result.status == "complete"
        reply = [t for role, t in texts(session) if role == "assistant"]
        assert reply == ["".join(f"story-{i} " for i in range(150))]
        serials = [vm.serial for vm in session.view.messages()]
        assert serials == sorted(serials)


async def test_cancel_from_a_second_device() -> None:
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, Model(words=10_000, delay=0.01))

    async with stack(handle) as (server, _):
        async with (
            client_side.connect(server.url, "s") as phone,
            client_side.connect(server.url, "s") as laptop,
        ):
            run = await phone.send("long answer")
            await wait_until(lambda: status(laptop, run.run_id) == "active")
            await laptop.cancel(run.run_id)
            result = await run.result()
            assert result.status == "cancelled"
            await wait_until(lambda: status(laptop, run.run_id) == "cancelled")


async def test_steering_persists_and_comes_back_in_order_on_rehydration() -> None:
    model = Model(words=100)

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model)

    async with stack(handle) as (server, _):
        async with client_side.connect(server.url, "s") as session:
            run = await session.send("plan trip")
            await wait_until(lambda: model.started.is_set())
            model.words = 3
            deliveries = [run.steer(text) for text in ("steer one", "steer two")]
            for d in deliveries:
                assert (await d.outcome).consumed
            await run.result()
            live = texts(session)
        async with client_side.connect(server.url, "s") as again:
            assert texts(again) == live
        users = [t for role, t in live if role == "user"]
        assert users == ["plan trip", "steer one", "steer two"]


async def test_two_runs_side_by_side_fold_by_run_id_and_cancel_one_leaves_the_other() -> None:
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, Model(words=300, delay=0.003))

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        a = await session.send("red go")
        b = await session.send("blue go")
        await wait_until(lambda: sum(1 for r in session.view.runs() if r.status == "active") == 2)
        await a.cancel()
        assert (await a.result()).status == "cancelled"
        assert (await b.result()).status == "complete"
        for vm in session.view.messages():
            if vm.message.role == "assistant":
                words = message_text(vm.message).split()
                tags = {w.split("-")[0] for w in words}
                assert tags == ({"red"} if vm.run_id == a.run_id else {"blue"})


async def test_a_message_sent_while_no_agent_is_up_starts_its_run_when_one_connects() -> None:
    async with stack(None) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("anyone?")
        await anyio.sleep(0.2)
        assert status(session, run.run_id) == "pending"
        worker = agent_side.Agent(server.url)

        @worker.on_run
        async def handle(r: Run) -> None:
            await agent_side.steering_loop(r, Model(words=3))

        async with worker:
            result = await run.result()
        assert result.status == "complete"


async def test_a_killed_agent_process_ends_its_run_agent_lost_and_outcomes_resolve() -> None:
    async with (
        stack(None, grace=0.5) as (server, _),
        client_side.connect(server.url, "s") as session,
    ):
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "steering_agent.py"), "--url", server.url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            run = await session.send("Plan a 9-day trip")
            await wait_until(lambda: status(session, run.run_id) == "active", timeout=20)
            await wait_until(lambda: any(r == "assistant" for r, _ in texts(session)))
            os.kill(proc.pid, signal.SIGKILL)
            delivery = run.steer("make it 2 days")
            result = await run.result()
        finally:
            proc.kill()
            proc.wait()
        assert result.status == "error"
        info = session.view.run(run.run_id)
        assert info is not None and info.error is not None
        assert info.error["code"] == "AGENT_LOST"
        outcome = await delivery.outcome
        assert outcome.run_terminal_reason == "error"


async def test_each_run_answers_its_own_prompt_when_runs_go_alongside() -> None:
    seen: dict[str, list[str]] = {}
    both_sent = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        await both_sent.wait()  # the other Run's prompt is on the channel by now
        seen[run.run_id] = [message_text(vm.message) for vm in run.view.messages()]
        await run.end()

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        a = await session.send("red first")
        b = await session.send("blue second")
        both_sent.set()
        await a.result()
        await b.result()
    assert seen[a.run_id] == ["red first"]
    assert seen[b.run_id] == ["red first", "blue second"]
