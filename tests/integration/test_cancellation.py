"""The seed's "Cancellation": what an aborted Run leaves in the conversation.

Relay + agent SDK (with its tool runner) + client SDK over loopback WebSockets.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import agent_side
import client_side
from agent_side import CancelRequest, Run
from client_side import ClientSession
from transport import (
    ABORTED_BEFORE_DISPATCH,
    OUTCOME_UNKNOWN,
    ToolCallPart,
    ToolResultPart,
    UIMessage,
    message_text,
)

from .harness import UNTIL_ABORT, ScriptedModel, stack, stored_entries, texts, wait_until

pytestmark = pytest.mark.anyio


class Query(BaseModel):
    q: str


def call(cid: str, name: str) -> dict[str, Any]:
    return {
        "type": "tool-input-available",
        "toolCallId": cid,
        "toolName": name,
        "input": {"q": cid},
    }


def results(session: ClientSession) -> dict[str, ToolResultPart]:
    return {
        p.tool_call_id: p
        for vm in session.view.messages()
        for p in vm.message.parts
        if isinstance(p, ToolResultPart)
    }


def assistant_messages(session: ClientSession) -> list[UIMessage]:
    return [vm.message for vm in session.view.messages() if vm.message.role == "assistant"]


async def test_a_cancel_mid_stream_leaves_an_interrupted_reply_and_aborted_tool_calls() -> None:
    """Seed: “Text already streamed ... metadata.interrupted”; unstarted calls are aborted."""
    ran: list[str] = []

    @agent_side.tool
    def book(params: Query) -> str:
        """Book it."""
        ran.append(params.q)
        return "booked"

    model = ScriptedModel(
        ["Let me book both. ", call("c1", "book"), call("c2", "book"), "Also", UNTIL_ABORT],
        ["after the cancel"],
    )

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model, tools=[book])

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("Book the hotel and the flight")
        await wait_until(lambda: any(t.endswith("Also") for _, t in texts(session)))
        await run.cancel(reason="changed my mind")
        result = await run.result()
        assert result.status == "cancelled"
        reply, _tools = assistant_messages(session)
        assert reply.metadata == {"interrupted": True}
        assert message_text(reply) == "Let me book both. Also"
        assert [p.tool_call_id for p in reply.parts if isinstance(p, ToolCallPart)] == ["c1", "c2"]
        aborted = results(session)
        assert set(aborted) == {"c1", "c2"}
        for part in aborted.values():
            assert part.is_error and part.output == {
                "code": ABORTED_BEFORE_DISPATCH,
                "message": "Aborted before dispatch: the run stopped before this tool call started",
            }
        assert ran == []
        # A later Run reads the reply with [interrupted by the user] after it.
        later = await session.send("where were we?")
        await later.result()
    history = model.calls[-1]
    interrupted = next(m for m in history if m.id == reply.id)
    assert message_text(interrupted) == "Let me book both. Also\n[interrupted by the user]"


async def test_finished_calls_keep_results_a_running_one_gets_none_the_rest_are_aborted() -> None:
    """Finished calls keep results; a running tool gets no result, its late one never written."""
    running = threading.Event()
    let_go = threading.Event()
    finished_late = threading.Event()

    @agent_side.tool
    def lookup(params: Query) -> str:
        """Answers at once."""
        return f"found {params.q}"

    @agent_side.tool
    def charge(params: Query) -> str:
        """Ignores the cancel: a plain function in a thread."""
        running.set()
        let_go.wait(10)
        finished_late.set()
        return "charged"

    @agent_side.tool
    def notify(params: Query) -> str:
        """Never reached."""
        raise AssertionError("a call after the cancel must not start")

    model = ScriptedModel(
        [call("c1", "lookup"), call("c2", "charge"), call("c3", "notify")], ["recovered"]
    )

    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model, tools=[lookup, charge, notify])

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("book and pay")
        await wait_until(running.is_set)
        await run.cancel()
        assert (await run.result()).status == "cancelled"
        let_go.set()
        await wait_until(finished_late.is_set)
        await anyio.sleep(0.2)  # time for a late result to show up, if it ever did
        got = results(session)
        assert got["c1"].output == "found c1" and not got["c1"].is_error
        assert "c2" not in got  # running when stopped: no result, not even a late one
        assert got["c3"].output["code"] == ABORTED_BEFORE_DISPATCH
        stored = await stored_entries(server, "s")
        assert "charged" not in repr(stored)
        later = await session.send("did it charge?")
        await later.result()
    repaired = {
        p.tool_call_id: p.output
        for m in model.calls[-1]
        for p in m.parts
        if isinstance(p, ToolResultPart)
    }
    assert repaired["c2"]["code"] == OUTCOME_UNKNOWN  # the next Run knows it may have run
    assert repaired["c3"]["code"] == ABORTED_BEFORE_DISPATCH


async def test_save_interrupted_reply_false_leaves_it_to_the_agents_code() -> None:
    """Seed:
    “saveInterruptedReply: false leaves it to your code” (a voice agent keeps what was spoken).
    """
    spoken: list[str] = []

    async def handle(run: Run) -> None:
        async def speak(messages: list[UIMessage], signal: Any) -> Any:
            for word in ["One ", "two ", "three ", "four "]:
                spoken.append(word)
                yield word
                if len(spoken) == 2:
                    await signal.wait()  # the user talks over the agent here
                    return

        await run.start()
        result = await run.pipe(speak([], run.abort_signal))
        assert result.reason == "cancelled" and not result.closed
        assert result.message is not None and message_text(result.message) == "One two "
        await run.save_reply("One ")  # only the first word was heard
        await run.end("cancelled")

    async with (
        stack(handle, save_interrupted_reply=False) as (server, _),
        client_side.connect(server.url, "s") as session,
    ):
        run = await session.send("count for me")
        await wait_until(lambda: any("two" in t for _, t in texts(session)))
        await run.cancel()
        await run.result()
        (reply,) = assistant_messages(session)
        assert message_text(reply) == "One " and reply.metadata == {"interrupted": True}


async def test_a_cancel_carries_its_reason_and_closes_the_run() -> None:
    """Seed:
    “A run is cancelled by ... handle.abort() ...: the run then fails with the abort's reason.”
    """
    reasons: list[str | None] = []

    async def handle(run: Run) -> None:
        await run.start()
        await run.abort_signal.wait()
        request = run.abort_signal.reason
        assert isinstance(request, CancelRequest)
        reasons.append(request.reason)
        await run.end("cancelled")

    async with stack(handle) as (server, _), client_side.connect(server.url, "s") as session:
        run = await session.send("go")
        # Started: its agent hears the cancel (one no agent started, the relay ends).
        await wait_until(lambda: run.status == "active")
        await run.cancel(reason="user pressed stop")
        result = await run.result()
        assert (result.status, result.end_reason) == ("cancelled", "cancelled")
        stored = await stored_entries(server, "s")
        cancel = next(e for e in stored if e["kind"] == "cancel")
        assert cancel["reason"] == "user pressed stop"
    assert reasons == ["user pressed stop"]
