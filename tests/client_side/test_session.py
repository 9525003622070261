"""ClientSession: attaching, resuming, reconnecting, publishing."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import client_side
from client_side import ClientSession
from transport.errors import RunwireError
from transport.frames import Ack, Attach, Attached, Deliver, Publish, RelayFrame
from transport.messages import user_message
from transport.mirror import Attachment

from .fake_agent import FakeAgent, channel_entries, prompt_entry

# ------------------------------------------------ unit: a scripted connection --


class ScriptedConn:
    """Stands in for ``Connection``: each request gets the next scripted reply."""

    def __init__(self, replies: list[Callable[[BaseModel], RelayFrame]]) -> None:
        self.replies = replies
        self.sent: list[BaseModel] = []
        self.welcome = None

    async def request(
        self, frame: BaseModel, *, wait_ready: bool = True, slot: int | None = None
    ) -> RelayFrame:
        self.sent.append(frame)
        return self.replies.pop(0)(frame)


def attached(entries: list[dict[str, Any]], head: int, epoch: str = "E1", **kw: Any) -> Attached:
    return Attached(
        req=1, session_id="s", epoch=epoch, head=head, entries=entries, has_older=False, **kw
    )


def serials(session: ClientSession) -> list[int]:
    return [vm.serial for vm in session.view.messages()]


@pytest.mark.anyio
async def test_deliveries_during_attach_fold_after_its_entries_without_duplicates() -> None:
    session = ClientSession("ws://unused", "s")
    added: list[str] = []
    session.view.on("message", lambda e: added.append(e.message.message.id))

    def reply(frame: BaseModel) -> RelayFrame:
        # Live entries overtake the attach reply (one overlaps the page).
        session.link.on_frame(Deliver(session_id="s", entries=[prompt_entry(2, "b")]))
        session.link.on_frame(Deliver(session_id="s", entries=[prompt_entry(3, "c")]))
        session.link.on_frame(Deliver(session_id="other", entries=[prompt_entry(4, "x")]))
        assert session.view.messages() == []  # held until the page folded
        return attached([prompt_entry(1, "a"), prompt_entry(2, "b")], head=2)

    conn = ScriptedConn([reply, lambda f: attached([], head=3)])
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    assert serials(session) == [1, 2, 3]
    assert added == ["a", "b", "c"]
    first = conn.sent[0]
    assert isinstance(first, Attach)
    assert (first.from_serial, first.epoch, first.limit) == (None, None, 100)

    # The next connect resumes after the newest serial, in the epoch the relay named.
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    second = conn.sent[1]
    assert isinstance(second, Attach)
    assert (second.from_serial, second.epoch) == (3, "E1")
    assert serials(session) == [1, 2, 3]


@pytest.mark.anyio
async def test_resume_skips_what_the_view_holds() -> None:
    session = ClientSession("ws://unused", "s")
    conn = ScriptedConn(
        [
            lambda f: attached([prompt_entry(1, "a")], head=1),
            lambda f: attached([prompt_entry(1, "a"), prompt_entry(2, "b")], head=2),
        ]
    )
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    assert [vm.message.id for vm in session.view.messages()] == ["a", "b"]


@pytest.mark.anyio
async def test_reset_rebuilds_the_view_from_the_page() -> None:
    session = ClientSession("ws://unused", "s")
    conn = ScriptedConn(
        [
            lambda f: attached([prompt_entry(5, "old1"), prompt_entry(6, "old2")], head=6),
            lambda f: attached([prompt_entry(1, "new")], head=1, epoch="E2", reset=True),
            lambda f: attached([], head=1, epoch="E2"),
        ]
    )
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    assert [vm.message.id for vm in session.view.messages()] == ["new"]
    assert session.view.newest_serial == 1
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    third = conn.sent[2]
    assert isinstance(third, Attach)
    assert (third.from_serial, third.epoch) == (1, "E2")


@pytest.mark.anyio
async def test_run_finds_its_prompt_when_a_fork_above_left_it_off_the_active_branch() -> None:
    session = ClientSession("ws://unused", "s")
    fork = {**prompt_entry(4, "m-fork", "r-fork"), "parent_id": "m0"}
    response = {"serial": 3, "kind": "response_open", "id": "e3", "run_id": "r1"}
    response["message_id"] = "a1"
    page = [prompt_entry(1, "m0", "r0"), prompt_entry(2, "m1", "r1"), response, fork]
    conn = ScriptedConn([lambda f: attached(page, head=4)])
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    assert [vm.message.id for vm in session.view.messages()] == ["m0", "m-fork"]
    handle = session.run("r1")
    assert handle.prompt is not None, "the prompt is loaded: it is on another branch"
    assert handle.prompt.id == "m1"


@pytest.mark.anyio
async def test_empty_channel_resumes_from_its_head() -> None:
    session = ClientSession("ws://unused", "s")
    conn = ScriptedConn([lambda f: attached([], head=0), lambda f: attached([], head=0)])
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    await session.link.on_connect(conn)  # type: ignore[arg-type]
    resume = conn.sent[1]
    assert isinstance(resume, Attach) and resume.from_serial == 0


@pytest.mark.anyio
async def test_duplicate_ack_of_a_retried_prompt_is_not_an_error() -> None:
    """The ack was lost in a drop; the retry is acknowledged as a duplicate of our own entry."""
    session = ClientSession("ws://unused", "s")

    def ack(frame: BaseModel) -> RelayFrame:
        assert isinstance(frame, Publish)
        stamped = frame.entry.model_dump(mode="json", exclude_none=True) | {"serial": 1}
        session.link.on_frame(Deliver(session_id="s", entries=[stamped]))  # the resume folded it
        return Ack(req=1, serial=1, duplicate=True)

    session.link.conn = ScriptedConn([ack])  # type: ignore[assignment]
    run = await session.send("hi")
    assert session.view.messages()[0].run_id == run.run_id


@pytest.mark.anyio
async def test_a_duplicate_ack_that_comes_before_its_entry_waits_for_the_entry() -> None:
    """A Redis failover: the first try was stored but its ack lost, and the retry's duplicate
    ack comes before the entry's deliver. Only the entry tells whose id it is."""
    session = ClientSession("ws://unused", "s")
    stored: list[dict[str, Any]] = []

    def ack(frame: BaseModel) -> RelayFrame:
        assert isinstance(frame, Publish)
        stored.append(frame.entry.model_dump(mode="json", exclude_none=True) | {"serial": 1})
        return Ack(req=1, serial=1, duplicate=True)

    session.link.conn = ScriptedConn([ack])  # type: ignore[assignment]
    sent: list[client_side.ClientRun] = []

    async def send() -> None:
        sent.append(await session.send("hi"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        with anyio.fail_after(5):
            while not stored:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        assert sent == []  # acknowledged, its entry not seen yet: not told
        session.link.on_frame(Deliver(session_id="s", entries=stored))
    assert session.view.messages()[0].run_id == sent[0].run_id


@pytest.mark.anyio
async def test_a_duplicate_ack_of_another_runs_entry_is_a_reused_id() -> None:
    session = ClientSession("ws://unused", "s")

    def ack(frame: BaseModel) -> RelayFrame:
        assert isinstance(frame, Publish)
        theirs = frame.entry.model_dump(mode="json", exclude_none=True)
        theirs |= {"serial": 1, "run_id": "r-other"}
        session.link.on_frame(Deliver(session_id="s", entries=[theirs]))
        return Ack(req=1, serial=1, duplicate=True)

    session.link.conn = ScriptedConn([ack])  # type: ignore[assignment]
    with anyio.fail_after(5), pytest.raises(RunwireError) as info:
        await session.send("hi")
    assert info.value.code == "VALIDATION_ERROR"


def test_connect_validates_history_limit() -> None:
    with pytest.raises(RunwireError) as info:
        client_side.connect("ws://unused", "s", history_limit=0)
    assert info.value.code == "VALIDATION_ERROR"


@pytest.mark.anyio
async def test_send_takes_only_text_or_a_ui_message() -> None:
    session = ClientSession("ws://unused", "s")
    with pytest.raises(RunwireError) as info:
        await session.send(42)  # type: ignore[arg-type]
    assert info.value.code == "VALIDATION_ERROR"


# ------------------------------------------------------------- integration --


@pytest.mark.anyio
async def test_connect_to_nothing_raises() -> None:
    with anyio.fail_after(10), pytest.raises(RunwireError) as info:
        async with client_side.connect("ws://127.0.0.1:1", "s"):
            pass
    assert info.value.code == "CONNECTION_CLOSED"


@pytest.mark.anyio
async def test_network_drop_while_streaming_leaves_no_gap_and_no_duplicate(
    relay_url: str, session_id: str
) -> None:
    states: list[str] = []
    dropped = anyio.Event()
    back = anyio.Event()

    def on_state(state: str) -> None:
        states.append(state)
        if state == "disconnected":
            dropped.set()
        elif state == "connected" and dropped.is_set():
            back.set()

    added: dict[str, int] = {}
    with anyio.fail_after(20):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            assert session.connected and session.client_id
            session.on_state(on_state)

            def count(event: Any) -> None:
                if event.op == "added":
                    mid = event.message.message.id
                    added[mid] = added.get(mid, 0) + 1

            session.view.on("message", count)
            run = await session.send("Tell me a story.")
            await agent.start(run.run_id)
            mid = await agent.open(run.run_id)
            words = [f"w{i}" for i in range(30)]
            for word in words[:10]:
                await agent.append(run.run_id, mid, word + " ")
            await _wait(session, lambda: session.view.tree.message(mid) is not None)

            # Reconnect late enough that the agent's next entries come as the resume backlog.
            session.link.conn.backoff_initial = 0.3
            resumed: list[int] = []
            mirror = session.view.mirror
            real_attached = mirror.attached

            def spy(reply: Attached) -> Attachment:
                attachment = real_attached(reply)
                if not attachment.first and not attachment.reset:
                    resumed.append(len(reply.entries))
                return attachment

            mirror.attached = spy  # type: ignore[method-assign]
            await session.link.conn.kill_socket()
            await dropped.wait()
            assert not session.connected
            # The agent keeps streaming while the client is away; a steer waits for the link.
            for word in words[10:20]:
                await agent.append(run.run_id, mid, word + " ")
            delivery = run.steer("shorter please")
            await back.wait()
            await delivery.published
            for word in words[20:]:
                await agent.append(run.run_id, mid, word + " ")
            await agent.close(run.run_id, mid, " ".join(words))
            await agent.end(run.run_id)
            result = await run.result()
            assert result.status == "complete"
            assert result.undelivered == [delivery.message]
            assert resumed and resumed[0] >= 10

            messages = session.view.messages()
            ids = [vm.message.id for vm in messages]
            assert run.prompt is not None
            assert ids == [run.prompt.id, mid, delivery.message.id]
            assert messages[1].message.text() == " ".join(words)
            assert all(n == 1 for n in added.values()) and set(added) == set(ids)
            seq = [vm.serial for vm in messages]
            assert seq == sorted(set(seq))
            entries = await channel_entries(relay_url, session_id)
            assert session.view.newest_serial == entries[-1]["serial"]
            assert [e["serial"] for e in entries] == list(range(1, len(entries) + 1))
            assert states[:2] == ["disconnected", "connected"]
            assert session.connected
    assert states[-1] == "closed"


@pytest.mark.anyio
async def test_appends_streamed_during_a_drop_arrive_in_order(
    relay_url: str, session_id: str
) -> None:
    """Whatever the client folded before the drop, the text after resume is the whole text."""
    with anyio.fail_after(20):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("count")
            await agent.start(run.run_id)
            mid = await agent.open(run.run_id)
            texts: list[str] = []
            session.view.on(
                "message",
                lambda e: (
                    texts.append(e.message.message.text()) if e.message.message.id == mid else None
                ),
            )
            for i in range(5):
                await agent.append(run.run_id, mid, f"{i},")
                if i == 2:
                    await session.link.conn.kill_socket()
            await agent.end(run.run_id)
            await _wait(session, lambda: run.status == "complete")
            assert session.view.tree.message(mid) is not None
            text = session.view.tree.message(mid).message.text()  # type: ignore[union-attr]
            assert text == "0,1,2,3,4,"
            # Each update only ever grew the text: nothing was folded twice or skipped.
            assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(texts))


@pytest.mark.anyio
async def test_a_second_client_sees_the_same_conversation(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as phone,
            client_side.connect(relay_url, session_id) as laptop,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await phone.send(user_message("hello from the phone"))
            await agent.start(run.run_id)
            await agent.reply(run.run_id, "hello to both")
            await agent.end(run.run_id)
            for session in (phone, laptop):
                await _wait(session, lambda s=session: _run_ended(s, run.run_id))
            assert phone.view.messages() == laptop.view.messages()
            assert [vm.message.text() for vm in laptop.view.messages()] == [
                "hello from the phone",
                "hello to both",
            ]
            info = laptop.view.run(run.run_id)
            assert info is not None and info.client_id == phone.client_id
            assert phone.client_id != laptop.client_id
            # Either device may cancel or steer; the laptop sees the phone's Run ended.
            handle = laptop.run(run.run_id)
            assert handle.status == "complete"
            assert handle.prompt is not None and handle.prompt.text() == "hello from the phone"
            with pytest.raises(RunwireError) as info:
                laptop.run("no-such-run")
            assert info.value.code == "RUN_NOT_FOUND"
        # A client that attaches later gets the same conversation from history.
        async with client_side.connect(relay_url, session_id) as late:
            assert [vm.message.id for vm in late.view.messages()] == [
                vm.message.id for vm in phone.view.messages()
            ]


@pytest.mark.anyio
async def test_on_state_remover_stops_callbacks(relay_url: str, session_id: str) -> None:
    seen: list[str] = []
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            remove = session.on_state(seen.append)
            remove()
            remove()  # twice is harmless
    assert seen == []
    assert session.closed and not session.connected


def _run_ended(session: ClientSession, run_id: str) -> bool:
    info = session.view.run(run_id)
    return info is not None and info.status == "complete"


async def _wait(session: ClientSession, condition: Callable[[], bool]) -> None:
    while not condition():
        await session.run_host.wait_change()


@pytest.mark.anyio
async def test_send_while_disconnected_fails_when_the_session_closes(
    relay_url: str, session_id: str
) -> None:
    errors: list[str] = []
    dropped = anyio.Event()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with client_side.connect(relay_url, session_id) as session:
                session.link.conn.backoff_initial = 60.0  # stay disconnected
                session.on_state(lambda state: dropped.set() if state == "disconnected" else None)
                await session.link.conn.kill_socket()
                await dropped.wait()

                async def send() -> None:
                    try:
                        await session.send("into the void")
                    except RunwireError as exc:
                        errors.append(exc.code)

                tg.start_soon(send)
                await anyio.wait_all_tasks_blocked()
                assert errors == []  # waiting for the link
    assert errors == ["CONNECTION_CLOSED"]
