"""The five multitask strategies end to end: relay + agent SDK + client SDK on real sockets."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import agent_side
import client_side
import relay
from client_side import ClientRun, ClientSession
from transport import RunwireError
from transport.asyncio._abort import AbortController
from transport.errors import STORE_UNAVAILABLE

from .conductor import SECRET, Conductor, stack, status, texts, token, until

pytestmark = pytest.mark.anyio


async def send_together(
    *sends: tuple[ClientSession, str, str | None],
) -> list[ClientRun | RunwireError]:
    """Start every send at the same instant; each one's run or error, in argument order."""
    results: list[ClientRun | RunwireError | None] = [None] * len(sends)

    async def one(i: int, session: ClientSession, text: str, multitask: str | None) -> None:
        try:
            results[i] = await session.send(text, multitask=multitask)  # type: ignore[arg-type]
        except RunwireError as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i, (session, text, multitask) in enumerate(sends):
            tg.start_soon(one, i, session, text, multitask)
    return [r for r in results if r is not None]


async def test_alongside_runs_side_by_side() -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        a = await session.send("a")
        b = await session.send("b", multitask="alongside")
        await agent.wait(lambda: len(agent.started) == 2)
        agent.release(b.run_id)
        assert (await b.result()).status == "complete"
        assert status(session, a.run_id) == "active"
        agent.release(a.run_id)
        await a.result()


async def test_reject_from_two_devices_at_the_same_instant_lets_exactly_one_win() -> None:
    agent = Conductor()
    async with (
        stack(agent) as server,
        client_side.connect(server.url, "s") as phone,
        client_side.connect(server.url, "s") as laptop,
    ):
        results = await send_together((phone, "phone", "reject"), (laptop, "laptop", "reject"))
        runs = [r for r in results if isinstance(r, ClientRun)]
        errors = [r for r in results if isinstance(r, RunwireError)]
        assert len(runs) == 1 and [e.code for e in errors] == ["THREAD_BUSY"]
        assert errors[0].details["run_ids"] == [runs[0].run_id]
        await until(phone, lambda: len(phone.view.runs()) == 1)
        await agent.wait(lambda: agent.started == [runs[0].run_id])
        agent.release(runs[0].run_id)
        await runs[0].result()
        # Once nothing goes on, reject starts a Run.
        again = await laptop.send("again", multitask="reject")
        agent.release(again.run_id)
        assert (await again.result()).status == "complete"


async def test_enqueue_from_two_devices_runs_them_one_after_the_other_in_arrival_order() -> None:
    agent = Conductor()
    async with (
        stack(agent) as server,
        client_side.connect(server.url, "s") as phone,
        client_side.connect(server.url, "s") as laptop,
    ):
        first = await phone.send("first")
        await until(phone, lambda: texts(phone) == ["first", "first: started"])
        results = await send_together((phone, "phone", "enqueue"), (laptop, "laptop", "enqueue"))
        assert all(isinstance(r, ClientRun) for r in results)
        await until(phone, lambda: len(phone.view.waiting()) == 2)
        arrival = [r.run_id for r in phone.view.runs()][1:]  # the channel's order
        assert sorted(arrival) == sorted(r.run_id for r in results if isinstance(r, ClientRun))
        assert [status(phone, r) for r in arrival] == ["queued", "queued"]
        assert texts(phone) == ["first", "first: started"]  # waiting prompts are not in it yet
        agent.release(first.run_id)
        await agent.wait(lambda: len(agent.started) == 2)
        assert agent.started[1] == arrival[0]
        assert status(phone, arrival[1]) == "queued"
        agent.release(arrival[0])
        await agent.wait(lambda: len(agent.started) == 3)
        assert agent.started[2] == arrival[1]
        assert [run for run, _ in agent.ended] == [first.run_id, arrival[0]]
        agent.release(arrival[1])
        await until(laptop, lambda: status(laptop, arrival[1]) == "complete")
        # Each waiting prompt joined the conversation after the answer before it.
        first_text, second_text = (
            "phone" if r == arrival[0] else "laptop" for r in arrival
        )  # whichever arrived first
        assert texts(laptop) == [
            "first",
            "first: started and done",
            first_text,
            f"{first_text}: started and done",
            second_text,
            f"{second_text}: started and done",
        ]


async def test_a_queued_run_its_sender_cancels_stops_waiting() -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        first = await session.send("first")
        waiting = await session.send("never mind", multitask="enqueue")
        after = await session.send("after", multitask="enqueue")
        assert waiting.status == "queued"
        await waiting.cancel()
        assert waiting.status == "cancelled"
        agent.release(first.run_id)
        await agent.wait(lambda: len(agent.started) == 2)
        assert agent.started == [first.run_id, after.run_id]
        assert "never mind" not in texts(session)


async def test_a_send_whose_signal_aborted_changes_nothing_and_a_later_abort_stops_it() -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        first = await session.send("first")
        gone = AbortController()
        gone.abort()
        with pytest.raises(RunwireError) as info:
            await session.send("late", multitask="enqueue", signal=gone.signal)
        assert info.value.code == "ABORTED"
        assert len(session.view.runs()) == 1
        later = AbortController()
        waiting = await session.send("wait", multitask="enqueue", signal=later.signal)
        later.abort()
        await until(session, lambda: waiting.status == "cancelled")
        agent.release(first.run_id)
        await first.result()
        assert agent.started == [first.run_id]


async def test_interrupt_cancels_the_runs_going_on_then_starts() -> None:
    agent = Conductor()
    async with (
        stack(agent) as server,
        client_side.connect(server.url, "s") as phone,
        client_side.connect(server.url, "s") as laptop,
    ):
        a = await phone.send("a")
        b = await phone.send("b")
        await until(phone, lambda: texts(phone)[-2:] == ["a: started", "b: started"])
        new = await laptop.send("c", multitask="interrupt")
        assert new.status == "queued"
        await agent.wait(lambda: len(agent.started) == 3)
        assert agent.started[2] == new.run_id
        assert sorted(agent.ended) == sorted([(a.run_id, "cancelled"), (b.run_id, "cancelled")])
        assert {r.interrupted_by for r in agent.requests} == {new.run_id}
        assert {r.client_id for r in agent.requests} == {laptop.client_id}
        agent.release(new.run_id)
        assert (await new.result()).status == "complete"
        # The interrupted text stays; the new turn comes after it.
        assert texts(phone)[:4] == ["a", "b", "a: started", "b: started"]
        assert texts(phone)[4:] == ["c", "c: started and done"]


async def test_rollback_leaves_the_interrupted_run_on_its_own_branch() -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        hello = await session.send("hi")
        agent.release(hello.run_id)
        await hello.result()
        wrong = await session.send("Lisbon")
        await until(session, lambda: texts(session)[-1:] == ["Lisbon: started"])
        new = await session.send("Porto", multitask="rollback")
        assert (await wrong.result()).status == "cancelled"
        await agent.wait(lambda: new.run_id in agent.started)
        agent.release(new.run_id)
        await new.result()
        assert texts(session) == ["hi", "hi: started and done", "Porto", "Porto: started and done"]
        porto = session.view.messages()[2]
        lisbon = next(vm for vm in session.view.runs() if vm.run_id == wrong.run_id)
        assert lisbon.status == "cancelled"
        siblings = session.view.branches(porto.message.id)
        assert len(siblings) == 2 and siblings[1] == porto.message.id
        session.view.select_branch(siblings[0])
        assert texts(session) == ["hi", "hi: started and done", "Lisbon", "Lisbon: started"]


async def test_the_relay_default_strategy_applies_when_a_send_names_none() -> None:
    agent = Conductor()
    async with (
        stack(agent, multitask="enqueue") as server,
        client_side.connect(server.url, "s") as session,
    ):
        first = await session.send("one")
        second = await session.send("two")
        assert second.status == "queued"
        agent.release(first.run_id)
        await agent.wait(lambda: second.run_id in agent.started)
        agent.release(second.run_id)
        await second.result()
        assert texts(session)[2:] == ["two", "two: started and done"]


async def test_a_run_started_from_a_tool_call_of_the_active_run_is_never_held_back() -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        parent = await session.send("parent")
        await agent.wait(lambda: parent.run_id in agent.started)
        child = await session.send("child", multitask="reject", parent_run_id=parent.run_id)
        await agent.wait(lambda: child.run_id in agent.started)
        with pytest.raises(RunwireError) as info:
            await session.send("stranger", multitask="reject")
        assert info.value.code == "THREAD_BUSY"
        agent.release(child.run_id)
        agent.release(parent.run_id)
        await parent.result()


async def test_a_waiting_run_holds_no_slot_of_max_concurrent_runs() -> None:
    agent = Conductor()
    async with (
        stack(agent, max_concurrent_runs=2) as server,
        client_side.connect(server.url, "one") as one,
        client_side.connect(server.url, "two") as two,
        client_side.connect(server.url, "three") as three,
    ):
        a = await one.send("a")
        waiting = await one.send("w", multitask="enqueue")  # waits for a, holds no slot
        b = await two.send("b")  # so b gets the second slot
        await agent.wait(lambda: set(agent.started) == {a.run_id, b.run_id})
        c = await three.send("c")  # no slot left: it waits
        assert c.status == "queued"
        agent.release(a.run_id)  # a's slot goes to the oldest waiting Run: w
        await agent.wait(lambda: waiting.run_id in agent.started)
        assert c.status == "queued"
        agent.release(b.run_id)
        await agent.wait(lambda: c.run_id in agent.started)
        agent.release(waiting.run_id)
        agent.release(c.run_id)
        await c.result()


async def test_strategies_touch_only_runs_of_their_own_user_unless_shared() -> None:
    agent = Conductor()
    svc = token("svc", ["agent"])
    async with stack(agent, agent_token=svc, secret=SECRET) as server:
        async with (
            client_side.connect(server.url, "own", token=token("alice")) as alice,
            client_side.connect(server.url, "own", token=token("bob")) as bob,
        ):
            run = await alice.send("alice's")
            await agent.wait(lambda: run.run_id in agent.started)
            for strategy in ("reject", "enqueue", "interrupt", "rollback"):
                with pytest.raises(RunwireError) as info:
                    await bob.send("bob's", multitask=strategy)  # type: ignore[arg-type]
                assert info.value.code == "THREAD_ACCESS_DENIED"
            alongside = await bob.send("bob's alongside")  # touches nothing: allowed
            await agent.wait(lambda: alongside.run_id in agent.started)
            assert status(alice, run.run_id) == "active"
            agent.release(run.run_id)
            agent.release(alongside.run_id)
        async with (
            client_side.connect(server.url, "team", token=token("alice")) as alice,
            client_side.connect(server.url, "team", token=token("bob")) as bob,
        ):
            run = await alice.send("alice's", thread_access="shared")
            await agent.wait(lambda: run.run_id in agent.started)
            queued = await bob.send("bob's", multitask="enqueue")
            assert queued.status == "queued"
            agent.release(run.run_id)
            await agent.wait(lambda: queued.run_id in agent.started)
            agent.release(queued.run_id)
            await queued.result()


async def test_interrupting_a_run_no_agent_started_ends_it_at_once() -> None:
    agent = Conductor()
    async with (
        relay.serve(port=0, store="memory://") as server,
        client_side.connect(server.url, "s") as session,
    ):
        unstarted = await session.send("nobody took me")
        new = await session.send("take me instead", multitask="rollback")
        assert (await unstarted.result()).status == "cancelled"
        await until(session, lambda: new.status == "pending")
        assert session.run(new.run_id).prompt is not None
        worker = agent_side.Agent(server.url)
        worker.on_run(agent)
        async with worker:
            await agent.wait(lambda: agent.started == [new.run_id])
            agent.release(new.run_id)
            await new.result()
        assert texts(session) == ["take me instead", "take me instead: started and done"]


async def test_a_worker_whose_dispatched_run_is_interrupted_before_it_started_lets_it_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = anyio.Event()
    took_first = anyio.Event()
    taken: list[str] = []
    outcomes: dict[str, str] = {}

    async def handle(run: agent_side.Run) -> None:
        taken.append(run.run_id)
        took_first.set()
        await gate.wait()  # the worker is slow to start what it was handed
        await run.start()
        await run.end()
        outcomes[run.run_id] = run.status

    async with relay.serve(port=0, store="memory://") as server:
        worker = agent_side.Agent(server.url)
        worker.on_run(handle)
        async with worker, client_side.connect(server.url, "s") as session:
            first = await session.send("first")
            with anyio.fail_after(10):
                await took_first.wait()
            assert taken == [first.run_id]
            second = await session.send("second", multitask="interrupt")
            assert (await first.result()).status == "cancelled"
            await until(session, lambda: second.status == "pending")
            gate.set()
            assert (await second.result()).status == "complete"
    assert outcomes == {second.run_id: "complete"}
    assert not [r for r in caplog.records if "handler of run" in r.getMessage()]


def refuse_relay_entries(
    monkeypatch: pytest.MonkeyPatch, server: relay.Server, times: int
) -> list[str]:
    """Make the store refuse the relay's own entries ``times`` times, as a Redis that is
    away or out of memory would; the ids it refused, in order."""
    store = server.store
    append = store.append
    refused: list[str] = []

    async def flaky(session_id: str, entry_id: str, data: bytes, runs: Any = (), **kw: Any) -> Any:
        if entry_id.startswith("relay:") and len(refused) < times:
            refused.append(entry_id)
            raise RunwireError(STORE_UNAVAILABLE, "the store is away")
        return await append(session_id, entry_id, data, runs, **kw)

    monkeypatch.setattr(store, "append", flaky)
    return refused


async def test_a_queued_runs_turn_the_store_refused_is_given_once_the_store_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        first = await session.send("first")
        waiting = await session.send("next", multitask="enqueue")
        assert waiting.status == "queued"
        refused = refuse_relay_entries(monkeypatch, server, times=3)
        agent.release(first.run_id)
        await agent.wait(lambda: len(agent.started) == 2)
        assert agent.started == [first.run_id, waiting.run_id]
        assert refused == [f"relay:{waiting.run_id}:pending"] * 3
        agent.release(waiting.run_id)
        assert (await waiting.result()).status == "complete"


async def test_an_interrupts_cancel_the_store_refused_is_sent_once_the_store_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = Conductor()
    async with stack(agent) as server, client_side.connect(server.url, "s") as session:
        first = await session.send("first")
        await until(session, lambda: texts(session)[-1:] == ["first: started"])
        refused = refuse_relay_entries(monkeypatch, server, times=2)
        new = await session.send("instead", multitask="interrupt")
        with anyio.fail_after(10):
            assert (await first.result()).status == "cancelled"
        await agent.wait(lambda: agent.started == [first.run_id, new.run_id])
        assert len(refused) == 2 and all("interrupt" in r for r in refused)
        assert {r.interrupted_by for r in agent.requests} == {new.run_id}
        agent.release(new.run_id)
        assert (await new.result()).status == "complete"
