"""View: folding, events, callbacks, paging, branches."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import client_side
from client_side import View
from transport._tree import DeliveryEvent, MessageEvent, RunEvent
from transport.asyncio._view import ViewFeed
from transport.errors import RunwireError
from transport.frames import Attached, History, Page

from .fake_agent import FakeAgent, prompt_entry, run_entry


async def _no_history(request: History) -> Page:
    raise AssertionError("no history expected")


def make_feed() -> ViewFeed:
    return ViewFeed("s", _no_history)


def make_view() -> View:
    return make_feed().view


def attach(
    feed: ViewFeed, entries: list[dict[str, Any]], head: int, has_older: bool, **kw: Any
) -> None:
    """Feed an attach answered with ``entries`` (a reset with ``reset=True``)."""
    feed.attach(100)
    reply = Attached(
        req=1,
        session_id="s",
        epoch=kw.pop("epoch", "E1"),
        head=head,
        entries=entries,
        has_older=has_older,
        **kw,
    )
    feed.take_attachment(feed.attached(reply))


# ------------------------------------------------------------------- unit --


def test_fold_skips_serials_the_view_holds() -> None:
    feed = make_feed()
    view = feed.view
    events: list[Any] = []
    view.on("message", events.append)
    attach(feed, [prompt_entry(1, "a"), prompt_entry(2, "b")], head=2, has_older=False)
    feed.deliver([prompt_entry(2, "b"), prompt_entry(3, "c"), prompt_entry(1, "a")])
    assert [vm.message.id for vm in view.messages()] == ["a", "b", "c"]
    assert [e.message.message.id for e in events] == ["a", "b", "c"]
    assert view.newest_serial == 3 and view.oldest_serial == 1


def test_an_unreadable_entry_is_skipped_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    feed = make_feed()
    view = feed.view
    with caplog.at_level(logging.WARNING, logger="runwire.client"):
        feed.deliver([{"serial": 1, "kind": "bogus"}, prompt_entry(2, "b")])
    assert [vm.message.id for vm in view.messages()] == ["b"]
    assert "cannot read" in caplog.text


def test_on_routes_by_kind_and_unsubscribes(caplog: pytest.LogCaptureFixture) -> None:
    feed = make_feed()
    view = feed.view
    got: dict[str, list[Any]] = {"message": [], "run": [], "delivery": []}
    removers = {kind: view.on(kind, got[kind].append) for kind in got}

    def broken(event: Any) -> None:
        raise ValueError("a listener's bug")

    view.on("run", broken)
    with caplog.at_level(logging.ERROR, logger="runwire.client"):
        feed.deliver(
            [
                prompt_entry(1, "p", run_id="r"),
                run_entry(2, "r", "active"),
                prompt_entry(3, "s", run_id="r", intent="steer"),
                run_entry(4, "r", "complete"),
            ]
        )
    assert "callback failed" in caplog.text
    assert all(isinstance(e, MessageEvent) for e in got["message"])
    assert [e.message.message.id for e in got["message"]] == ["p", "s"]
    assert [e.run.status for e in got["run"] if isinstance(e, RunEvent)] == [
        "pending",
        "active",
        "complete",
    ]
    [delivery] = got["delivery"]
    assert isinstance(delivery, DeliveryEvent)
    assert delivery.outcome.message_id == "s" and not delivery.outcome.consumed
    removers["message"]()
    removers["message"]()
    feed.deliver([prompt_entry(5, "q", run_id="r2")])
    assert len(got["message"]) == 2
    assert got["run"][-1].run.run_id == "r2"


def test_on_unknown_event_raises() -> None:
    with pytest.raises(RunwireError) as info:
        make_view().on("messages", print)
    assert info.value.code == "VALIDATION_ERROR"


def test_reset_replaces_everything() -> None:
    feed = make_feed()
    view = feed.view
    attach(feed, [prompt_entry(7, "a", run_id="r")], head=7, has_older=True)
    attach(
        feed, [prompt_entry(1, "z", run_id="q")], head=1, has_older=False, epoch="E2", reset=True
    )
    assert [vm.message.id for vm in view.messages()] == ["z"]
    assert [r.run_id for r in view.runs()] == ["q"]
    assert view.run("r") is None
    assert not view.has_older()
    assert view.oldest_serial == view.newest_serial == 1


def test_branches_and_select_branch() -> None:
    feed = make_feed()
    view = feed.view
    fork = prompt_entry(3, "b2")
    fork["message"]["parts"][0]["text"] = "edited"
    fork["parent_id"] = "a"
    feed.deliver([prompt_entry(1, "a"), prompt_entry(2, "b1"), fork])
    assert view.branches("b1") == ["b1", "b2"]
    assert [vm.message.id for vm in view.messages()] == ["a", "b2"]
    seen: list[Any] = []
    view.on("message", seen.append)
    view.select_branch("b1")
    assert [vm.message.id for vm in view.messages()] == ["a", "b1"]
    assert [(e.op, e.message.message.id, e.shown) for e in seen] == [
        ("removed", "b2", False),
        ("added", "b1", True),
    ]


@pytest.mark.anyio
async def test_events_follow_every_change_of_the_shown_branch() -> None:
    # What a UI that renders from events holds: upsert what is shown, drop the rest.
    feed = make_feed()
    view = feed.view
    shown: dict[str, Any] = {}
    stream = view.events()

    def drain() -> None:
        while stream._buffer:
            event = stream._buffer.popleft()
            if isinstance(event, MessageEvent):
                if event.op != "removed" and event.shown:
                    shown[event.message.message.id] = event.message
                else:
                    shown.pop(event.message.message.id, None)
        assert list(shown) == [vm.message.id for vm in view.messages()]

    feed.deliver([prompt_entry(1, "a", run_id="r1"), prompt_entry(2, "b1", run_id="r2")])
    drain()
    assert list(shown) == ["a", "b1"]
    fork = prompt_entry(3, "b2", run_id="r3")
    fork["parent_id"] = "a"  # another device edits the second question
    feed.deliver([fork])
    drain()
    assert list(shown) == ["a", "b2"]
    view.select_branch("b1")
    drain()
    assert list(shown) == ["a", "b1"]
    later = prompt_entry(4, "c", run_id="r4")  # no parent: under the newest branch's tip
    feed.deliver([later])
    drain()
    assert list(shown) == ["a", "b1"]
    view.select_branch("c")
    drain()
    assert sorted(shown) == ["a", "b2", "c"]
    await stream.aclose()


@pytest.mark.anyio
async def test_each_events_iterator_has_its_own_buffer_and_ends_on_close() -> None:
    feed = make_feed()
    view = feed.view
    first, second = view.events(), view.events()
    feed.deliver([prompt_entry(1, "a", run_id="r")])
    late = view.events()
    feed.deliver([run_entry(2, "r", "active")])
    feed.close()
    with anyio.fail_after(5):
        kinds_first = [e.kind async for e in first]
        kinds_second = [e.kind async for e in second]
        kinds_late = [e.kind async for e in late]
        assert [e async for e in view.events()] == []  # opened after the close
    assert kinds_first == kinds_second == ["run", "message", "run"]
    assert kinds_late == ["run"]


@pytest.mark.anyio
async def test_events_iterator_wakes_on_new_events_and_aclose_stops_it() -> None:
    feed = make_feed()
    view = feed.view
    stream = view.events()
    got: list[str] = []

    async def consume() -> None:
        async for event in stream:
            got.append(event.kind)
            if len(got) == 2:
                await stream.aclose()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            feed.deliver([prompt_entry(1, "a", run_id="r")])
    assert got == ["run", "message"]
    feed.deliver([prompt_entry(2, "b", run_id="r2")])
    assert not stream._buffer


# ------------------------------------------------------------- integration --


@pytest.mark.anyio
async def test_load_older_pages_back_to_the_start(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as writer:
            texts = [f"message {i}" for i in range(12)]
            for text in texts:
                await writer.send(text)
        async with client_side.connect(relay_url, session_id, history_limit=5) as reader:
            view = reader.view
            assert [vm.message.text() for vm in view.messages()] == texts[-5:]
            assert view.has_older()
            added: list[str] = []
            view.on(
                "message",
                lambda e: added.append(e.message.message.text()) if e.op == "added" else None,
            )
            assert await view.load_older(limit=4) == 4
            assert [vm.message.text() for vm in view.messages()] == texts[-9:]
            assert sorted(added) == sorted(texts[3:7])
            assert view.has_older()
            assert await view.load_older() == 3
            assert [vm.message.text() for vm in view.messages()] == texts
            assert not view.has_older()
            assert await view.load_older() == 0
            assert view.oldest_serial == 1
            assert [r.status for r in view.runs()] == ["pending"] * 12
            with pytest.raises(RunwireError):
                await view.load_older(limit=0)


@pytest.mark.anyio
async def test_on_and_events_report_a_run_as_it_happens(relay_url: str, session_id: str) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            statuses: list[str] = []
            session.view.on("run", lambda e: statuses.append(e.run.status))
            stream = session.view.events()
            run = await session.send("hi")
            await agent.start(run.run_id)
            steer = run.steer("shorter")
            await agent.wait_steer(steer.message.id)
            await agent.reply(run.run_id, "ok", seen=[steer.message.id])
            await agent.end(run.run_id)
            await steer.outcome
            seen: list[tuple[str, str]] = []
            async for event in stream:
                seen.append((event.kind, _describe(event)))
                if event.kind == "delivery":
                    break
    assert statuses == ["pending", "active", "complete"]
    assert seen[:3] == [("run", "pending"), ("message", "added"), ("run", "active")]
    assert ("message", "updated") in seen
    assert seen[-2:] == [("run", "complete"), ("delivery", "consumed")]


@pytest.mark.anyio
async def test_events_end_when_the_session_closes(relay_url: str, session_id: str) -> None:
    got: list[str] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with client_side.connect(relay_url, session_id) as session:
                stream = session.view.events()

                async def consume() -> None:
                    async for event in stream:
                        got.append(event.kind)

                tg.start_soon(consume)
                await session.send("hi")
                await _wait(session, lambda: len(session.view.messages()) == 1)
            # Leaving the session ends the iterator, so the task group can finish.
    assert got == ["run", "message"]


def _describe(event: Any) -> str:
    if isinstance(event, MessageEvent):
        return event.op
    if isinstance(event, RunEvent):
        return event.run.status
    return "consumed" if event.outcome.consumed else "not consumed"


async def _wait(session: client_side.ClientSession, condition: Callable[[], bool]) -> None:
    while not condition():
        await session._wait_change()


@pytest.mark.anyio
async def test_a_failed_attach_drops_what_it_held_and_a_wrong_reply_is_a_protocol_error() -> None:
    feed = make_feed()
    attach(feed, [prompt_entry(1, "a")], head=1, has_older=False)

    async def dropped(frame: Any) -> Any:
        feed.deliver([prompt_entry(2, "b")])  # held while the attach runs
        raise RunwireError("CONNECTION_CLOSED", "dropped")

    with pytest.raises(RunwireError) as info:
        await feed.request_attach(100, dropped)
    assert info.value.code == "CONNECTION_CLOSED"
    assert not feed.mirror.attaching
    assert [vm.message.id for vm in feed.view.messages()] == ["a"]

    async def wrong(frame: Any) -> Any:
        return Page(req=1, session_id="s", entries=[], has_older=False)

    with pytest.raises(RunwireError) as info:
        await feed.request_attach(100, wrong)
    assert info.value.code == "PROTOCOL_ERROR"

    sent: list[Any] = []

    async def resumed(frame: Any) -> Any:
        sent.append(frame)
        return Attached(
            req=1,
            session_id="s",
            epoch="E1",
            head=2,
            entries=[prompt_entry(2, "b")],
            has_older=False,
        )

    feed.take_attachment(await feed.request_attach(100, resumed))
    assert (sent[0].from_serial, sent[0].epoch) == (1, "E1")
    assert [vm.message.id for vm in feed.view.messages()] == ["a", "b"]
