"""Explicit mode over a real relay: ``connect``, ``create_run`` and the ``Run`` API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import CancelRequest, Invocation
from transport._tree import RunEvent
from transport.errors import RunwireError
from transport.frames import CancelDenied, CancelEntry, RunEntry

from .helpers import client_end

pytestmark = pytest.mark.anyio


async def words(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


class Counter:
    """A plain callable that counts calls and lets a test wait for a count."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = anyio.Event()

    def __call__(self) -> None:
        self.count += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def reach(self, n: int, timeout: float = 5.0) -> None:
        with anyio.fail_after(timeout):
            while self.count < n:
                await self._changed.wait()


async def test_a_plain_turn_from_invocation_to_complete(relay_url: str) -> None:
    async with client_end(relay_url, "plain") as client:
        run_id = await client.prompt("Plan a 3-day trip to Lisbon.")
        async with agent_side.connect(relay_url, "plain") as session:
            assert session.invocations() == [Invocation("plain", run_id)]
            run = session.create_run(run_id)  # a plain run id works too
            assert run.invocation == Invocation("plain", run_id) and not run.adopted
            assert run.has_input()  # the prompt
            await run.start()
            await client.wait_status(run_id, "active")
            assert session.invocations() == []
            result = await run.pipe(words("Day 1", ": Alfama."))
            assert result.reason == "complete" and result.error is None
            assert not run.has_input()
            assert [m.role for m in run.messages] == ["user", "assistant"]
            assert run.messages[-1].text() == "Day 1: Alfama."
            await run.end()
            await run.end("error", error="ignored: already ended")
            await client.wait_status(run_id, "complete")
        assert client.response_texts(run_id) == ["Day 1: Alfama."]
        assert client.of(run_id, "response_close")[0]["message"]["id"] == result.message_id


async def test_on_steer_fires_and_unanswered_steering_sits_last(relay_url: str) -> None:
    async with client_end(relay_url, "steer") as client:
        run_id = await client.prompt("Plan a trip.")
        async with agent_side.connect(relay_url, "steer") as session:
            steered = Counter()
            run = session.create_run(run_id, on_steer=steered)
            await run.start()
            assert run.has_input()  # drains nothing yet: the prompt
            steer_id = await client.steer(run_id, "Make it 5 days.")
            await steered.reach(1)
            # The response opens after the steering message, but has not seen it.
            first = await run.pipe(words("3 days: ..."))
            opens = client.of(run_id, "response_open")
            await client.wait_for(lambda: len(client.of(run_id, "response_close")) == 1)
            assert client.of(run_id, "response_open")[0]["seen"] == []
            ids = [vm.message.id for vm in run.view.messages()]
            assert ids[-1] == steer_id and ids[-2] == first.message_id
            assert run.has_input()
            second = await run.pipe(words("5 days: ..."))
            await client.wait_for(lambda: len(client.of(run_id, "response_open")) == 2)
            opens = client.of(run_id, "response_open")
            assert opens[1]["seen"] == [steer_id]
            assert [vm.message.id for vm in run.view.messages()][-1] == second.message_id
            assert not run.has_input()
            await run.end()
            await client.wait_status(run_id, "complete")
        outcome = client.tree.outcome(steer_id)
        assert outcome is not None and outcome.consumed


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("all", [["s1", "s2", "s3"]]), ("one-at-a-time", [["s1"], ["s2"], ["s3"]])],
)
async def test_queue_modes_drain_steering(
    relay_url: str, mode: str, expected: list[list[str]]
) -> None:
    async with client_end(relay_url, f"q-{mode}") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, f"q-{mode}") as session:
            steered = Counter()
            run = session.create_run(run_id, on_steer=steered, queue={"steering": mode})
            await run.start()
            assert run.has_input()
            await run.pipe(words("first answer"))
            sent = {await client.steer(run_id, f"s{i}"): f"s{i}" for i in (1, 2, 3)}
            await steered.reach(3)
            while run.has_input():
                await run.pipe(words("answer"))
            await run.end()
            await client.wait_status(run_id, "complete")
        seen = [[sent[i] for i in o["seen"]] for o in client.of(run_id, "response_open")]
        assert seen == [[], *expected]


async def test_cancel_fires_abort_signal_and_pipe_returns_cancelled(relay_url: str) -> None:
    async with client_end(relay_url, "cancel") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "cancel") as session:
            run = session.create_run(run_id)
            await run.start()
            closed = anyio.Event()

            async def endless() -> AsyncIterator[str]:
                try:
                    yield "partial"
                    await anyio.sleep_forever()
                    yield "never"
                finally:
                    closed.set()

            async def cancel_after_first_append() -> None:
                await client.wait_for(lambda: bool(client.of(run_id, "response_append")))
                await client.cancel(run_id, reason="changed my mind")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_after_first_append)
                    result = await run.pipe(endless())
            assert result.reason == "cancelled"
            assert closed.is_set()
            assert run.abort_signal.aborted
            request = run.abort_signal.reason
            assert isinstance(request, CancelRequest)
            assert request.reason == "changed my mind"
            assert request.client_id == client.conn.client_id
            await run.end("cancelled")
            await client.wait_status(run_id, "cancelled")
        assert client.response_texts(run_id) == ["partial"]


async def test_a_cancel_before_any_agent_started_the_run_ends_it(relay_url: str) -> None:
    """No agent could refuse it: the relay ends the Run, and an agent that starts it late
    is refused (a cancel offered at start is one of a Run handed over, tested below)."""
    async with client_end(relay_url, "early") as client:
        run_id = await client.prompt("go")
        await client.steer(run_id, "and this")
        await client.cancel(run_id, reason="too late")
        await client.wait_status(run_id, "cancelled")
        async with agent_side.connect(relay_url, "early") as session:
            run = session.create_run(run_id)
            with pytest.raises(RunwireError) as info:
                await run.start()
            assert info.value.code == "RUN_NOT_ACTIVE"
        assert client.of(run_id, "response_open") == []
        [end] = [e for e in client.of(run_id, "run") if e["status"] == "cancelled"]
        assert end["client_id"] == "relay"


async def test_on_cancel_may_refuse_or_accept_later(relay_url: str) -> None:
    async with client_end(relay_url, "oncancel") as client:
        run_a = await client.prompt("a")
        run_b = await client.prompt("b")
        async with agent_side.connect(relay_url, "oncancel") as session:
            asked: list[CancelRequest] = []
            refused = anyio.Event()

            def refuse(request: CancelRequest) -> bool:
                asked.append(request)
                refused.set()
                return False

            async def accept(request: CancelRequest) -> bool:
                await anyio.lowlevel.checkpoint()
                return True

            a = session.create_run(run_a, on_cancel=refuse)
            b = session.create_run(run_b, on_cancel=accept)
            await a.start()
            await b.start()
            await client.cancel(run_a)
            await client.cancel(run_b)
            with anyio.fail_after(5):
                await refused.wait()
                await b.abort_signal.wait()
            assert not a.abort_signal.aborted
            assert asked[0].run_id == run_a
            assert (await a.pipe(words("still here"))).reason == "complete"
            await a.end()
            await b.end("cancelled")
            await client.wait_status(run_a, "complete")
            await client.wait_status(run_b, "cancelled")


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        ("boom", "AGENT_ERROR", "boom"),
        (ValueError("bad value"), "AGENT_ERROR", "bad value"),
        (RunwireError("TOOL_FAILED", "the tool broke"), "TOOL_FAILED", "the tool broke"),
    ],
)
async def test_end_error_carries_the_code_and_message(
    relay_url: str, error: object, code: str, message: str
) -> None:
    async with client_end(relay_url, "err") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "err") as session:
            run = session.create_run(run_id)
            await run.start()
            await run.end("error", error=error)  # type: ignore[arg-type]
            await client.wait_status(run_id, "error")
        info = client.tree.run(run_id)
        assert info is not None and info.error is not None
        assert (info.error["code"], info.error["message"]) == (code, message)


async def test_suspend_then_resume_then_end(relay_url: str) -> None:
    async with client_end(relay_url, "susp") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "susp") as session:
            run = session.create_run(run_id)
            with pytest.raises(RunwireError):
                await run.suspend()
            await run.start()
            await run.suspend()
            await client.wait_status(run_id, "suspended")
            await run.start()
            await client.wait_status(run_id, "active")
            await run.end()
            with pytest.raises(RunwireError) as info:
                await run.pipe(words("too late"))
            assert info.value.code == "RUN_NOT_ACTIVE"
            await client.wait_status(run_id, "complete")


async def test_create_run_refuses_a_second_live_run_and_another_session(relay_url: str) -> None:
    async with client_end(relay_url, "dup") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "dup") as session:
            session.create_run(run_id)
            with pytest.raises(ValueError):
                session.create_run(run_id)
            with pytest.raises(ValueError):
                session.create_run(Invocation("other", "x"))
            with pytest.raises(ValueError):
                session.create_run("y", queue={"steering": "sometimes"})


async def test_a_dropped_connection_does_not_disturb_an_active_run(relay_url: str) -> None:
    async with client_end(relay_url, "drop") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "drop") as session:
            steered = Counter()
            run = session.create_run(run_id, on_steer=steered)
            await run.start()
            client_id = session.client_id
            expected = [f"w{i} " for i in range(60)]
            steer_id = ""

            async def stream() -> AsyncIterator[str]:
                nonlocal steer_id
                for i, w in enumerate(expected):
                    if i == 20:
                        await session._link.conn.kill_socket()
                        steer_id = await client.steer(run_id, "steer while the agent is away")
                    yield w
                    await anyio.sleep(0.002)  # pace the model so appends spread over the drop

            with anyio.fail_after(15):
                result = await run.pipe(stream())
            assert result.reason == "complete"
            await steered.reach(1)
            assert session._link.conn.connects >= 2
            assert session.client_id == client_id
            assert run.has_input()
            assert run.view.messages()[-1].message.id == steer_id
            await run.pipe(words("answered"))
            await run.end()
            await client.wait_status(run_id, "complete")
        assert client.response_texts(run_id) == ["".join(expected), "answered"]
        entry_ids = [e["id"] for e in client.entries]
        assert len(entry_ids) == len(set(entry_ids))


async def test_load_older_pages_in_the_whole_conversation(relay_url: str) -> None:
    async with client_end(relay_url, "older") as client:
        first = await client.prompt("first")
        for i in range(250):
            await client.steer(first, f"note {i}")
        last = await client.prompt("second")
        async with agent_side.connect(relay_url, "older") as session:
            run = session.create_run(last)
            assert run.view.has_older()
            before = len(run.view.messages())
            while run.view.has_older():
                assert await run.view.load_older(limit=50) > 0
            messages = run.view.messages()
            assert len(messages) > before
            assert messages[0].message.text() == "first"
            assert messages[-1].message.text() == "second"


async def test_an_error_in_the_block_propagates_as_itself(relay_url: str) -> None:
    with pytest.raises(KeyError):
        async with agent_side.connect(relay_url, "raises"):
            raise KeyError("mine")


async def test_connect_to_nowhere_raises_runwire_error() -> None:
    with anyio.fail_after(15), pytest.raises(RunwireError) as info:
        async with agent_side.connect("ws://127.0.0.1:9", "nowhere"):
            pass
    assert info.value.code == "CONNECTION_CLOSED"


async def test_the_relay_ending_the_run_fires_abort_and_end_is_a_no_op() -> None:
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.1) as server,
        client_end(server.url, "lost") as client,
    ):
        run_id = await client.prompt("go")
        async with agent_side.connect(server.url, "lost") as session:
            run = session.create_run(run_id)
            await run.start()
            conn = session._link.conn
            conn.backoff_initial = conn.backoff_max = 1.0  # stay away past the grace period
            await conn.kill_socket()
            await client.wait_status(run_id, "error")
            with anyio.fail_after(10):
                reason = await run.abort_signal.wait()
            assert isinstance(reason, RunwireError) and reason.code == "AGENT_LOST"
            assert run.ended and run.status == "error"
            await run.end()  # already ended by the relay: nothing to do, no error
            assert not run.has_input()


async def test_view_events_reach_listeners(relay_url: str) -> None:
    async with client_end(relay_url, "events") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "events") as session:
            kinds: list[str] = []
            statuses: list[str] = []
            completed = anyio.Event()

            def on_run(event: RunEvent) -> None:
                statuses.append(event.run.status)
                if event.run.status == "complete":
                    completed.set()

            remove = session.view.on("message", lambda e: kinds.append(e.kind))
            session.view.on("run", on_run)
            with pytest.raises(ValueError):
                session.view.on("nonsense", print)
            run = session.create_run(run_id)
            await run.start()
            await run.pipe(words("hi"))
            remove()
            await run.end()
            await client.wait_status(run_id, "complete")
            with anyio.fail_after(5):
                await completed.wait()
        assert "message" in kinds
        assert statuses[0] == "active" and statuses[-1] == "complete"


async def test_a_cancel_sent_before_a_refusal_of_the_first_is_offered_at_start() -> None:
    """The stream holds the phone's cancel, the laptop's, then a refusal of the phone's (an
    earlier worker that started the durable Run refused it and went away before it answered
    the laptop; only the agent that started a Run may refuse its cancels): the next worker
    to start the Run is offered the laptop's cancel, and only that one."""
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=0.1) as server,
        client_end(server.url, "two-cancels") as client,
    ):
        run_id = await client.prompt("go")
        async with agent_side.connect(server.url, "two-cancels") as earlier:
            await earlier._publish(
                RunEntry(id="earlier-start", run_id=run_id, status="active", durable=True)
            )
            await client.publish(CancelEntry(id="phone-cancel", run_id=run_id, reason="phone"))
            await client.publish(CancelEntry(id="laptop-cancel", run_id=run_id, reason="laptop"))
            await earlier._publish(
                CancelDenied(id="no-to-phone", run_id=run_id, cancel_id="phone-cancel")
            )
        await client.wait_for(lambda: bool(client.of(run_id, "cancel_denied")))
        await client.wait_for(lambda: len(client.of(run_id, "run")) == 2)  # handed over
        async with agent_side.connect(server.url, "two-cancels") as session:
            with anyio.fail_after(5):
                while (session.last_serial or 0) < 6:
                    await anyio.sleep(0.01)
            asked: list[str | None] = []

            def note(request: CancelRequest) -> bool:
                asked.append(request.reason)
                return True

            run = session.create_run(run_id, on_cancel=note)
            await run.start()
            assert asked == ["laptop"]
            assert run.abort_signal.aborted
            await run.end("cancelled")
            await client.wait_status(run_id, "cancelled")


async def test_an_abort_listener_that_raises_neither_stops_pipe_nor_breaks_the_connection(
    relay_url: str,
) -> None:
    streaming = anyio.Event()

    async def endless() -> AsyncIterator[str]:
        yield "Day 1"
        streaming.set()
        await anyio.sleep(30)
        yield "never"

    def buggy_listener(_reason: object) -> None:
        raise RuntimeError("a bug in the agent's own listener")

    async with client_end(relay_url, "abort-listener") as client:
        run_id = await client.prompt("go")
        async with agent_side.connect(relay_url, "abort-listener") as session:
            run = session.create_run(run_id)
            await run.start()
            run.abort_signal.add_callback(buggy_listener)

            async def cancel_when_streaming() -> None:
                await streaming.wait()
                await client.cancel(run_id)

            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_when_streaming)
                    result = await run.pipe(endless())
            assert result.reason == "cancelled"
            await run.end("cancelled")  # the connection is still up
            await client.wait_status(run_id, "cancelled")
        assert client.response_texts(run_id) == ["Day 1"]


async def test_an_async_on_steer_is_awaited(relay_url: str) -> None:
    heard: list[str] = []
    done = anyio.Event()

    async def on_steer() -> None:
        await anyio.sleep(0.01)  # slow work of its own: it must not hold up delivery
        heard.append("steered")
        done.set()

    async with client_end(relay_url, "async-steer") as client:
        run_id = await client.prompt("Plan a trip.")
        async with agent_side.connect(relay_url, "async-steer") as session:
            run = session.create_run(run_id, on_steer=on_steer)
            await run.start()
            await client.steer(run_id, "Make it 5 days.")
            with anyio.fail_after(5):
                await done.wait()
            assert heard == ["steered"]
            await run.end()


async def test_session_end_ends_the_runs_it_started_cancelled_and_aclose_leaves_them(
    relay_url: str,
) -> None:
    """The seed's ``session.end()``: a handler that forgot ``run.end()`` leaves no Run streaming.

    ``end()`` ends every active Run the session started, ``cancelled`` (pending
    steering resolves not consumed), and leaves Runs it never started pending
    and suspended ones suspended; ``aclose()`` (the seed's detach) leaves them
    all as they are.
    """
    async with client_side.connect(relay_url, "forgot") as phone:
        forgot = await phone.send("first")
        untouched = await phone.send("second")
        detached = await phone.send("third")
        paused = await phone.send("fourth")
        async with agent_side.connect(relay_url, "forgot") as session:
            run = session.create_run(forgot.run_id)
            session.create_run(untouched.run_id)  # never started
            waiting = session.create_run(paused.run_id)
            await waiting.start()
            await waiting.suspend()  # waits on a person: not the session's to end
            await run.start()
            await run.pipe(words("half an answer"))
            with anyio.fail_after(5):
                while phone.view.run(forgot.run_id).status != "active":  # type: ignore[union-attr]
                    await anyio.sleep(0.005)
            steer = forgot.steer("too late")
            await steer.published
            await session.end()  # no run.end() before it
        with anyio.fail_after(5):
            result = await forgot.result()
            outcome = await steer.outcome
        assert (result.status, result.end_reason) == ("cancelled", "cancelled")
        assert (outcome.consumed, outcome.run_terminal_reason) == (False, "cancelled")
        assert untouched.status == "pending"
        assert paused.status == "suspended"
        async with agent_side.connect(relay_url, "forgot") as session:
            other = session.create_run(detached.run_id)
            await other.start()
            await session.aclose()
        await anyio.sleep(0.2)
        assert detached.status == "active"  # left for another process (or agent_grace)
