"""The Run rules as the relay applies them, frame by frame (``transport._runs``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import relay
from relay import Server
from transport.errors import STORE_UNAVAILABLE, RunwireError
from transport.messages import new_id

from .test_http_api import call
from .wire import RawPeer, prompt, run_status

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://", agent_grace=5) as s:
        yield s


async def ended(peer: RawPeer, run_id: str, timeout: float = 5.0) -> str:
    """The status a delivered ``run`` entry ends ``run_id`` with."""
    with anyio.fail_after(timeout):
        while True:
            for entry in await peer.entries(1, timeout):
                if entry["kind"] == "run" and entry["run_id"] == run_id:
                    if entry["status"] in ("complete", "cancelled", "error"):
                        return str(entry["status"])


async def test_no_agent_refuses_the_cancels_of_or_checkpoints_a_run_nobody_started(
    server: Server,
) -> None:
    client = await RawPeer.open(server.url)
    agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
    try:
        await client.attach("s1")
        await agent.attach("s1")
        assert (await client.publish("s1", prompt("a")))["type"] == "ack"
        assert (await agent.publish("s1", run_status("a", "active")))["type"] == "ack"
        queued = await client.publish("s1", {**prompt("b"), "multitask": "enqueue"})
        assert queued["type"] == "ack"
        pending = await client.publish("s1", prompt("c"))  # alongside: pending, not started
        assert pending["type"] == "ack"
        for run_id in ("b", "c"):
            entries: list[dict[str, Any]] = [
                {"kind": "cancel_denied", "id": new_id(), "run_id": run_id},
                {"kind": "checkpoint", "id": new_id(), "run_id": run_id, "step": 1},
            ]
            for entry in entries:
                reply = await agent.publish("s1", entry)
                assert reply["type"] == "error", reply
                assert reply["error"]["code"] == "UNAUTHORIZED"
                assert reply["error"]["details"]["run_id"] == run_id
        # Nobody could refuse their cancels: each ends its Run at once.
        assert (await client.publish("s1", cancel("b")))["type"] == "ack"
        assert await ended(client, "b") == "cancelled"
        assert (await client.publish("s1", cancel("c")))["type"] == "ack"
        assert await ended(client, "c") == "cancelled"
        late = await agent.publish("s1", run_status("c", "active"))
        assert late["type"] == "error" and late["error"]["code"] == "RUN_NOT_ACTIVE"
        # The agent that starts a Run owns it: its refusal of the Run's cancel is taken.
        assert (await client.publish("s1", prompt("d")))["type"] == "ack"
        assert (await agent.publish("s1", run_status("d", "active")))["type"] == "ack"
        assert (await client.publish("s1", cancel("d")))["type"] == "ack"
        refusal = {"kind": "cancel_denied", "id": new_id(), "run_id": "d"}
        assert (await agent.publish("s1", refusal))["type"] == "ack"
    finally:
        await client.close()
        await agent.close()


def cancel(run_id: str) -> dict[str, Any]:
    return {"kind": "cancel", "id": new_id(), "run_id": run_id}


class Log:
    """Every entry a peer was delivered, in serial order."""

    def __init__(self, peer: RawPeer) -> None:
        self.peer = peer
        self.entries: list[dict[str, Any]] = []

    async def until(self, kind: str, run_id: str, status: str, timeout: float = 5.0) -> int:
        """The serial of the first ``kind`` entry of ``run_id`` with ``status``."""
        with anyio.fail_after(timeout):
            while True:
                for entry in self.entries:
                    if (entry["kind"], entry["run_id"], entry.get("status")) == (
                        kind,
                        run_id,
                        status,
                    ):
                        return int(entry["serial"])
                self.entries.extend(await self.peer.entries(1, timeout))


def pause(run_id: str) -> dict[str, Any]:
    return {
        "kind": "interrupt",
        "id": new_id(),
        "run_id": run_id,
        "status": "paused",
        "interrupts": [{"id": "q1", "message": "Which region?"}],
    }


def answer(run_id: str) -> dict[str, Any]:
    return {
        "kind": "interrupt",
        "id": new_id(),
        "run_id": run_id,
        "status": "resumed",
        "responses": {"q1": "eu"},
    }


async def test_a_resume_waits_for_a_free_slot_of_max_concurrent_runs() -> None:
    """A paused Run holds no slot; answered while none is free, it stays suspended (the
    limit holds) and resumes once one frees."""
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", agent_grace=5, max_concurrent_runs=1
    ) as server:
        client = await RawPeer.open(server.url)
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
        try:
            await client.attach("s1")
            await agent.attach("s1")
            log = Log(client)
            assert (await client.publish("s1", prompt("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await client.publish("s1", prompt("r2")))["type"] == "ack"  # no slot
            assert (await agent.publish("s1", pause("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "suspended")))["type"] == "ack"
            await log.until("run", "r2", "pending")  # r1's slot went to r2
            assert (await client.publish("s1", answer("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r2", "active")))["type"] == "ack"
            assert server.hub.slots.in_use == 1
            assert server.hub.channels["s1"].registry.runs["r1"].status == "suspended"
            assert (await agent.publish("s1", run_status("r2", "complete")))["type"] == "ack"
            ended = await log.until("run", "r2", "complete")
            resumed = await log.until("run", "r1", "pending")  # it was not lost
            assert ended < resumed
            assert server.hub.slots.in_use == 1
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "complete")))["type"] == "ack"
            await log.until("run", "r1", "complete")
        finally:
            await client.close()
            await agent.close()


async def test_reject_and_interrupt_treat_a_run_owed_its_resume_as_going_on(
    server: Server,
) -> None:
    """A prompt moves on a Run paused on a question, which then resumes: a reject prompt
    is refused, and an interrupt cancels that Run before its own turn."""
    client = await RawPeer.open(server.url)
    agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
    try:
        await client.attach("s1")
        await agent.attach("s1")
        log = Log(client)
        assert (await client.publish("s1", prompt("r1")))["type"] == "ack"
        assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
        assert (await agent.publish("s1", pause("r1")))["type"] == "ack"
        assert (await agent.publish("s1", run_status("r1", "suspended")))["type"] == "ack"
        busy = await client.publish("s1", {**prompt("r2"), "multitask": "reject"})
        assert busy["type"] == "error", busy
        assert busy["error"]["code"] == "THREAD_BUSY"
        assert busy["error"]["details"]["run_ids"] == ["r1"]
        ack = await client.publish("s1", {**prompt("r3"), "multitask": "interrupt"})
        assert ack["type"] == "ack", ack
        await log.until("message", "r3", None)
        [stamped] = [e for e in log.entries if e["run_id"] == "r3"]
        assert (stamped["queued"], stamped["interrupts"]) == (True, ["r1"])
        await log.until("run", "r1", "pending")  # its resume, for a worker to apply the cancel
        cancels = [e for e in log.entries if e["kind"] == "cancel" and e["run_id"] == "r1"]
        if not cancels:
            await log.until("cancel", "r1", None)
            cancels = [e for e in log.entries if e["kind"] == "cancel" and e["run_id"] == "r1"]
        assert cancels[0]["interrupted_by"] == "r3"
        assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
        assert (await agent.publish("s1", run_status("r1", "cancelled")))["type"] == "ack"
        ended = await log.until("run", "r1", "cancelled")
        assert await log.until("run", "r3", "pending") > ended
    finally:
        await client.close()
        await agent.close()


async def test_a_run_answered_while_no_slot_is_free_resumes_when_one_frees_unwatched() -> None:
    """Answered over HTTP with nobody attached to its session: the relay keeps the session
    loaded while the resume waits for a slot, and resumes the Run when one frees elsewhere."""
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", agent_grace=5, max_concurrent_runs=1
    ) as server:
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
        other = await RawPeer.open(server.url)
        try:
            await agent.attach("s1")
            assert (await agent.publish("s1", prompt("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", pause("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "suspended")))["type"] == "ack"
            assert (await agent.request({"type": "detach", "session_id": "s1"}))["type"] == "ack"
            await other.attach("s2")
            assert (await other.publish("s2", prompt("x")))["type"] == "ack"  # the one slot
            reply = await call(
                server, "POST", "/v1/sessions/s1/runs/r1/resume", {"responses": {"q1": "eu"}}
            )
            assert reply.status == 202, reply.body
            assert server.hub.slots.in_use == 1
            await agent.attach("s2")
            assert (await agent.publish("s2", run_status("x", "active")))["type"] == "ack"
            assert (await agent.publish("s2", run_status("x", "complete")))["type"] == "ack"
            with anyio.fail_after(5):
                # Read the store: reading the session over the API would load it again.
                while not any(
                    r.run_id == "r1" for r in await server.hub.store.runs_with_status(["pending"])
                ):
                    await anyio.sleep(0.02)
            assert server.hub.slots.in_use == 1
        finally:
            await agent.close()
            await other.close()


async def waiting_for_the_one_slot(store: str) -> None:
    """On a relay of ``store`` with one slot, which x (session s0) holds: r1 (s1) owed its
    resume, and b (s2, sent after r1 started) queued; the relay stops."""
    async with relay.serve(
        host="127.0.0.1", port=0, store=store, agent_grace=60, max_concurrent_runs=1
    ) as server:
        client = await RawPeer.open(server.url)
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
        try:
            for session_id in ("s0", "s1", "s2"):
                await client.attach(session_id)
                await agent.attach(session_id)
            assert (await client.publish("s1", prompt("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", pause("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "suspended")))["type"] == "ack"
            assert (await client.publish("s0", prompt("x")))["type"] == "ack"  # the one slot
            assert (await agent.publish("s0", run_status("x", "active")))["type"] == "ack"
            assert (await client.publish("s1", answer("r1")))["type"] == "ack"  # owed, no slot
            assert (await client.publish("s2", prompt("b")))["type"] == "ack"  # queued
            registry = server.hub.channels["s1"].registry
            assert registry.runs["r1"].resume_owed
            assert server.hub.channels["s2"].registry.runs["b"].status == "queued"
        finally:
            await client.close()
            await agent.close()


async def test_a_restarted_relay_gives_a_free_slot_to_the_oldest_waiting_run(
    tmp_path: Any,
) -> None:
    """A relay that restarts (SQLite) with a resume owed in one session and a younger
    queued Run in another, one slot free: the resume takes it (oldest first), as it
    would have had the slot freed while the relay ran; the queued Run waits."""
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    await waiting_for_the_one_slot(store)
    # Restarted with one more slot: x still holds one, the other is free.
    async with relay.serve(
        host="127.0.0.1", port=0, store=store, agent_grace=60, max_concurrent_runs=2
    ) as server:
        with anyio.fail_after(5):
            while not await server.hub.store.runs_with_status(["pending"]):
                await anyio.sleep(0.02)
        await anyio.sleep(0.2)  # let every session loaded at start have its turn
        pending = {r.run_id for r in await server.hub.store.runs_with_status(["pending"])}
        queued = {r.run_id for r in await server.hub.store.runs_with_status(["queued"])}
        assert (pending, queued) == ({"r1"}, {"b"})
        assert server.hub.slots.in_use == 2


async def test_a_slot_given_back_by_a_prompt_the_store_refused_goes_to_a_waiting_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prompt holds the last slot while the store writes it; a Run answered meanwhile is
    owed its resume but finds no slot. The store refuses the prompt, which gives the slot
    back: the waiting resume takes it then, not only when some Run ends later."""
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", agent_grace=60, max_concurrent_runs=1
    ) as server:
        store = server.hub.store
        append = store.append
        answered = anyio.Event()
        b = prompt("b")

        async def slow_then_refused(session_id: str, entry_id: str, *a: Any, **kw: Any) -> Any:
            if entry_id == b["id"]:
                await answered.wait()  # holds its slot until the answer is in
                raise RunwireError(STORE_UNAVAILABLE, "the store is away")
            return await append(session_id, entry_id, *a, **kw)

        monkeypatch.setattr(store, "append", slow_then_refused)
        client = await RawPeer.open(server.url)
        writer = await RawPeer.open(server.url)
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
        try:
            await client.attach("s1")
            await agent.attach("s1")
            await writer.attach("s2")
            log = Log(client)
            assert (await client.publish("s1", prompt("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", pause("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "suspended")))["type"] == "ack"
            assert server.hub.slots.free()
            await writer.send({"type": "publish", "req": 7, "session_id": "s2", "entry": b})
            with anyio.fail_after(5):
                while server.hub.slots.free():  # b's plan took the slot
                    await anyio.sleep(0.01)
            assert (await client.publish("s1", answer("r1")))["type"] == "ack"
            assert server.hub.channels["s1"].registry.runs["r1"].resume_owed
            answered.set()
            with anyio.fail_after(5):
                while (frame := await writer.recv()).get("req") != 7:
                    pass
            assert frame["error"]["code"] == STORE_UNAVAILABLE
            await log.until("run", "r1", "pending")  # the slot b gave back
            assert server.hub.slots.in_use == 1
        finally:
            await client.close()
            await writer.close()
            await agent.close()


async def test_a_freed_slot_goes_to_an_older_resume_before_a_younger_queued_run_elsewhere() -> None:
    """Two sessions wait for the one slot: a Run owed its resume (started first) and a Run
    queued in another session. When the slot frees, the resume takes it; the queued Run
    takes the next one."""
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", agent_grace=60, max_concurrent_runs=1
    ) as server:
        client = await RawPeer.open(server.url)
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-1")
        try:
            for session_id in ("s0", "s1", "s2"):
                await client.attach(session_id)
                await agent.attach(session_id)
            log = Log(client)
            assert (await client.publish("s1", prompt("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", pause("r1")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "suspended")))["type"] == "ack"
            assert (await client.publish("s0", prompt("x")))["type"] == "ack"
            assert (await agent.publish("s0", run_status("x", "active")))["type"] == "ack"
            assert (await client.publish("s1", answer("r1")))["type"] == "ack"
            assert (await client.publish("s2", prompt("b")))["type"] == "ack"
            assert (await agent.publish("s0", run_status("x", "complete")))["type"] == "ack"
            await log.until("run", "r1", "pending")
            assert server.hub.channels["s2"].registry.runs["b"].status == "queued"
            assert server.hub.slots.in_use == 1
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "complete")))["type"] == "ack"
            await log.until("run", "b", "pending")
            assert server.hub.slots.in_use == 1
        finally:
            await client.close()
            await agent.close()


async def test_a_resume_waiting_for_a_slot_across_a_restart_takes_the_one_x_frees(
    tmp_path: Any,
) -> None:
    """Restarted (SQLite) with the same limit: the resume is still owed, x still holds the
    slot; x's agent never comes back, so x ends AGENT_LOST and its slot goes to r1, then
    (r1 ended) to b."""
    store = f"sqlite:///{tmp_path / 'relay.db'}"
    await waiting_for_the_one_slot(store)
    async with relay.serve(
        host="127.0.0.1", port=0, store=store, agent_grace=0.3, max_concurrent_runs=1
    ) as server:
        hub = server.hub
        assert hub.slots.in_use == 1
        with anyio.fail_after(5):
            while not await hub.store.runs_with_status(["pending"]):
                await anyio.sleep(0.02)
        pending = {r.run_id for r in await hub.store.runs_with_status(["pending"])}
        queued = {r.run_id for r in await hub.store.runs_with_status(["queued"])}
        assert (pending, queued) == ({"r1"}, {"b"})
        assert [r.run_id for r in await hub.store.runs_with_status(["error"])] == ["x"]
        agent = await RawPeer.open(server.url, role="agent", client_id="agent-2")
        try:
            await agent.attach("s1")
            assert (await agent.publish("s1", run_status("r1", "active")))["type"] == "ack"
            assert (await agent.publish("s1", run_status("r1", "complete")))["type"] == "ack"
            with anyio.fail_after(5):
                while not await hub.store.runs_with_status(["pending"]):
                    await anyio.sleep(0.02)
            assert [r.run_id for r in await hub.store.runs_with_status(["pending"])] == ["b"]
        finally:
            await agent.close()
