"""Worker mode over a real relay: dispatch, concurrency, handler errors, reconnects."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest
from pydantic import BaseModel

import relay
from agent_side import AbortSignal, Agent, Run, steering_loop
from transport.errors import RunwireError
from transport.frames import Detach, Dispatch, RelayFrame
from transport.messages import UIMessage

from .helpers import client_end

pytestmark = pytest.mark.anyio


async def echo(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    yield f"echo: {messages[-1].text()}"


@asynccontextmanager
async def serving(
    url: str, handler: Callable[[Run], Awaitable[object]], **kw: object
) -> AsyncIterator[Agent]:
    agent = Agent(url, **kw)  # type: ignore[arg-type]
    agent.on_run(handler)
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.serve)
        try:
            yield agent
        finally:
            tg.cancel_scope.cancel()


async def test_a_dispatched_run_runs_the_handler(relay_url: str) -> None:
    seen: list[Run] = []

    async def handle(run: Run) -> None:
        seen.append(run)
        await steering_loop(run, echo)

    async with serving(relay_url, handle), client_end(relay_url, "w-basic") as client:
        run_id = await client.prompt("hello agent")
        await client.wait_status(run_id, "complete")
    assert client.response_texts(run_id) == ["echo: hello agent"]
    assert [(r.session_id, r.run_id) for r in seen] == [("w-basic", run_id)]


async def test_runs_that_waited_for_a_worker_are_taken_when_it_starts(relay_url: str) -> None:
    async def handle(run: Run) -> None:
        await run.pipe(echo(run.messages, run.abort_signal))  # this Run's own turn

    async with client_end(relay_url, "w-waiting") as client:
        waiting = [await client.prompt(f"waiting {i}") for i in range(3)]
        async with serving(relay_url, handle):
            for run_id in waiting:
                await client.wait_status(run_id, "complete")
    assert [client.response_texts(r) for r in waiting] == [[f"echo: waiting {i}"] for i in range(3)]


async def test_only_runs_for_its_name_reach_a_worker(relay_url: str) -> None:
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    async with (
        serving(relay_url, handle, name="planner"),
        client_end(relay_url, "w-name") as client,
    ):
        other = await client.prompt("for nobody", agent="someone-else")
        run_id = await client.prompt("for the planner", agent="planner")
        await client.wait_status(run_id, "complete")
        info = client.tree.run(other)
        assert info is not None and info.status == "pending"


async def test_two_runs_of_one_session_at_once_share_one_attachment(relay_url: str) -> None:
    inside: list[Run] = []
    both_inside = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        inside.append(run)
        if len(inside) == 2:
            both_inside.set()
        with anyio.fail_after(10):
            await both_inside.wait()
        await run.pipe(echo(run.messages, run.abort_signal))
        await run.end()

    async with serving(relay_url, handle) as agent, client_end(relay_url, "w-two") as client:
        first = await client.prompt("first")
        second = await client.prompt("second")
        await client.wait_status(first, "complete")
        await client.wait_status(second, "complete")
        assert inside[0].session is inside[1].session
        with pytest.raises(RuntimeError):
            await inside[0].session.aclose()  # the Agent owns the connection
        assert agent.connection.connects == 1
    texts = {r: client.response_texts(r) for r in (first, second)}
    assert texts == {first: ["echo: first"], second: ["echo: second"]}


async def test_a_handler_that_raises_ends_its_run_error(relay_url: str) -> None:
    async def handle(run: Run) -> None:
        await run.start()
        if run.messages[0].text() == "custom":
            raise RunwireError("TOOL_FAILED", "the tool broke")
        raise ValueError("handler bug")

    async with serving(relay_url, handle), client_end(relay_url, "w-raise") as client:
        plain = await client.prompt("plain")
        custom = await client.prompt("custom")
        await client.wait_status(plain, "error")
        await client.wait_status(custom, "error")
    errors = {r: client.tree.run(r).error for r in (plain, custom)}  # type: ignore[union-attr]
    assert errors[plain] == {"code": "AGENT_ERROR", "message": "handler bug", "details": {}}
    assert errors[custom] == {"code": "TOOL_FAILED", "message": "the tool broke", "details": {}}


async def test_a_handler_that_returns_leaves_the_sdk_to_end_the_run(relay_url: str) -> None:
    async def handle(run: Run) -> None:
        await run.start()
        if run.messages[0].text() == "wait for cancel":
            with anyio.fail_after(10):
                await run.abort_signal.wait()
            return
        await run.pipe(echo(run.messages, run.abort_signal))

    async with serving(relay_url, handle), client_end(relay_url, "w-return") as client:
        done = await client.prompt("finish")
        waiting = await client.prompt("wait for cancel")
        await client.wait_status(done, "complete")
        await client.wait_status(waiting, "active")
        await client.cancel(waiting)
        await client.wait_status(waiting, "cancelled")


async def test_the_worker_keeps_its_identity_and_registration_across_a_drop(
    relay_url: str,
) -> None:
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    async with serving(relay_url, handle) as agent, client_end(relay_url, "w-drop") as client:
        first = await client.prompt("before the drop")
        await client.wait_status(first, "complete")
        client_id = agent.client_id
        await agent.connection.kill_socket()
        second = await client.prompt("after the drop")
        await client.wait_status(second, "complete")
        assert agent.connection.connects >= 2
        assert agent.client_id == client_id
    assert client.response_texts(second) == ["echo: after the drop"]


async def test_serve_without_a_handler_is_refused(relay_url: str) -> None:
    with pytest.raises(RuntimeError):
        await Agent(relay_url).serve()


async def test_agent_as_a_context_manager_serves_until_closed(relay_url: str) -> None:
    agent = Agent(relay_url, name="ctx")

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    async with client_end(relay_url, "w-ctx") as client:
        async with agent:
            run_id = await client.prompt("hi", agent="ctx")
            await client.wait_status(run_id, "complete")
        assert not agent.connection.connected
        await agent.aclose()  # closing twice is fine
        with pytest.raises(RuntimeError):
            await agent.serve()  # an Agent serves once


async def test_a_worker_that_registers_later_is_not_handed_runs_another_worker_holds(
    relay_url: str,
) -> None:
    """A Run handed to a live worker that has not started it yet stays that worker's:
    a second worker of the name registering must not be dispatched it too (both
    handlers would run it, one failing on every publish)."""
    seen: dict[str, list[str]] = {"first": [], "second": []}
    first_has_it = anyio.Event()
    go = anyio.Event()

    def handler(name: str) -> Callable[[Run], Awaitable[None]]:
        async def handle(run: Run) -> None:
            seen[name].append(run.run_id)
            if run.run_id == "run-held" and name == "first":
                first_has_it.set()
                with anyio.fail_after(10):
                    await go.wait()
            await steering_loop(run, echo)

        return handle

    async with (
        client_end(relay_url, "w-late-1") as one,
        client_end(relay_url, "w-late-2") as two,
        serving(relay_url, handler("first")),
    ):
        held = await one.prompt("held by the first worker", run_id="run-held")
        with anyio.fail_after(10):
            await first_has_it.wait()
        async with serving(relay_url, handler("second")) as second:
            with anyio.fail_after(10):
                while not second.connection.connected:
                    await anyio.sleep(0.01)
            # The least loaded worker (the second) takes this one; the relay sends
            # anything it handed the second worker on registering before it.
            fresh = await two.prompt("for the second worker")
            await two.wait_status(fresh, "complete")
            go.set()
            await one.wait_status(held, "complete")
    assert seen == {"first": [held], "second": [fresh]}
    assert one.response_texts(held) == ["echo: held by the first worker"]


async def test_closing_the_worker_does_not_wait_on_a_detach_that_gets_no_reply(
    relay_url: str,
) -> None:
    """A session released just before the worker closes waits for its detach's reply;
    closing (or cancelling ``serve()``, which cancels the connection's reader) must
    not then sit out the detach's 10-second timeout."""
    agent = Agent(relay_url)
    detaching = anyio.Event()

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    request = agent.connection.request

    async def held_detach(
        frame: BaseModel, *, wait_ready: bool = True, slot: int | None = None
    ) -> RelayFrame:
        if isinstance(frame, Detach):
            detaching.set()
            await anyio.Event().wait()  # the reply never comes (a connection going down)
        return await request(frame, wait_ready=wait_ready, slot=slot)

    agent.connection.request = held_detach  # type: ignore[method-assign]
    async with client_end(relay_url, "w-close-detach") as client:
        with anyio.fail_after(5):
            async with agent:
                run_id = await client.prompt("hi")
                await client.wait_status(run_id, "complete")
                await detaching.wait()
    assert client.response_texts(run_id) == ["echo: hi"]
    assert agent._link.sessions == {}


async def test_a_run_dispatched_while_the_worker_closes_is_left_to_the_relay(
    relay_url: str,
) -> None:
    """A dispatch frame the connection's reader delivers while ``aclose`` has already
    ended the worker's task group (closing its connection is the last step) is dropped:
    the relay hands the Run to another worker once this one is gone. It raised
    ``RuntimeError`` (task group not active) in the reader, which broke the close."""
    agent = Agent(relay_url)

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, echo)

    async with agent:
        pass
    late = Dispatch(session_id="s-late", run_id="r-late", agent="default", message_id="m-late")
    agent._on_dispatch(late)  # what the reader does with a frame read during the close
    assert ("s-late", "r-late") not in agent._taken


async def test_a_worker_cancelled_while_it_connects_unwinds_cleanly() -> None:
    """Cancelled before its first connect completes (a worker restarted at once, say),
    the connection leaves its task group, so the caller's cancel scopes unwind in order
    (it raised "Attempted to exit a cancel scope that isn't the current task's")."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)

        async def never_answer(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                await anyio.sleep_forever()  # accepts, never completes the handshake

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, never_answer)
            agent = Agent(f"ws://127.0.0.1:{port}")

            @agent.on_run
            async def handle(run: Run) -> None:
                await steering_loop(run, echo)

            with anyio.fail_after(5):
                with anyio.move_on_after(0.3) as scope:
                    async with agent:
                        pytest.fail("connected to a server that never answers")
            assert scope.cancelled_caught
            tg.cancel_scope.cancel()


async def test_a_run_another_worker_started_first_is_let_go_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The relay may hand a Run out twice (it restarted, or a worker's link dropped
    between the dispatch and the start): the chaos suite saw it after a relay SIGKILL.
    The worker whose start loses gets ``VALIDATION_ERROR`` (active to active); its
    handler used to fail with a logged traceback, and it tried to end the other
    worker's Run (refused ``UNAUTHORIZED``). Now it lets the Run go, quietly."""
    from tests.relay.wire import RawPeer, prompt, run_status

    async with relay.serve(port=0, store="memory://") as server:
        dispatched, go = anyio.Event(), anyio.Event()
        refused: list[RunwireError] = []
        agent = Agent(server.url)

        @agent.on_run
        async def handle(run: Run) -> None:
            dispatched.set()
            await go.wait()
            try:
                await steering_loop(run, echo)
            except RunwireError as exc:
                refused.append(exc)
                raise

        async with agent:
            client = await RawPeer.open(server.url)
            await client.attach("s")
            entry = prompt(text="hello")
            await client.publish("s", entry)
            with anyio.fail_after(10):
                await dispatched.wait()
            other = await RawPeer.open(server.url, role="agent")
            await other.attach("s")
            assert (await other.publish("s", run_status(entry["run_id"], "active")))[
                "type"
            ] == "ack"
            with caplog.at_level("INFO", logger="runwire.agent"):
                go.set()
                with anyio.fail_after(10):
                    while not refused or ("s", entry["run_id"]) in agent._taken:
                        await anyio.sleep(0.01)
            done = await other.publish("s", run_status(entry["run_id"], "complete"))
            assert done["type"] == "ack"  # the Run stayed the other worker's, to end
    assert [(e.code, e.details.get("status")) for e in refused] == [("VALIDATION_ERROR", "active")]
    records = [r for r in caplog.records if r.name == "runwire.agent"]
    assert [r.levelname for r in records] == ["INFO"]
    assert "started by another worker" in records[0].getMessage()
