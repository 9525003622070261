"""SessionMirror: attach, resume, reset and paging, fed frames synchronously (no I/O)."""

from __future__ import annotations

from typing import Any

from transport._mirror import Folded, SessionMirror
from transport._tree import MessageEvent, RunEvent
from transport.frames import Attach, Attached, History, Page


def prompt(serial: int, message_id: str, run_id: str = "r1") -> dict[str, Any]:
    return {
        "serial": serial,
        "kind": "message",
        "id": message_id,
        "run_id": run_id,
        "intent": "prompt",
        "message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "hi"}]},
    }


def attached(
    entries: list[dict[str, Any]],
    head: int,
    *,
    epoch: str = "E1",
    has_older: bool = False,
    reset: bool = False,
) -> Attached:
    return Attached(
        req=1,
        session_id="s",
        epoch=epoch,
        head=head,
        entries=entries,
        has_older=has_older,
        reset=reset,
    )


def ids(mirror: SessionMirror) -> list[str]:
    return [vm.message.id for vm in mirror.tree.messages()]


def added(folded: list[Folded]) -> list[str]:
    return [
        e.message.message.id
        for f in folded
        for e in f.events
        if isinstance(e, MessageEvent) and e.op == "added"
    ]


def attach(mirror: SessionMirror, reply: Attached) -> list[Folded]:
    """Send an attach and take ``reply`` in; everything folded, in order."""
    mirror.attach(100)
    attachment = mirror.attached(reply)
    return [*attachment.folded, *attachment.held]


def test_first_attach_asks_for_the_newest_page_and_holds_deliveries_until_it_folded() -> None:
    mirror = SessionMirror("s")
    frame = mirror.attach(100)
    assert isinstance(frame, Attach)
    assert (frame.session_id, frame.from_serial, frame.epoch, frame.limit) == ("s", None, None, 100)
    assert mirror.attaching
    # Live entries overtake the attach reply (one overlaps the page): nothing folds yet.
    assert list(mirror.deliver([prompt(2, "b")])) == []
    assert list(mirror.deliver([prompt(3, "c")])) == []
    assert ids(mirror) == []

    attachment = mirror.attached(attached([prompt(1, "a"), prompt(2, "b")], head=2))
    assert attachment.first and not attachment.reset and not mirror.attaching
    folded = [*attachment.folded, *attachment.held]
    assert [f.entry["serial"] for f in folded] == [1, 2, 3]
    assert added(folded) == ["a", "b", "c"]
    assert ids(mirror) == ["a", "b", "c"]
    assert (mirror.epoch, mirror.newest_serial, mirror.oldest_serial) == ("E1", 3, 1)


def test_a_resume_starts_after_the_newest_serial_and_skips_what_is_held() -> None:
    mirror = SessionMirror("s")
    attach(mirror, attached([prompt(1, "a")], head=1))
    frame = mirror.attach(100)
    assert (frame.from_serial, frame.epoch) == (1, "E1")
    attachment = mirror.attached(attached([prompt(1, "a"), prompt(2, "b")], head=2))
    assert not attachment.first and not attachment.reset
    folded = list(attachment.folded)
    assert [f.entry["serial"] for f in folded] == [2]
    assert ids(mirror) == ["a", "b"]


def test_live_entries_fold_one_at_a_time_as_the_driver_iterates() -> None:
    mirror = SessionMirror("s")
    attach(mirror, attached([], head=0))
    seen: list[list[str]] = []
    for _ in mirror.deliver([prompt(1, "a"), prompt(2, "b", run_id="r2")]):
        seen.append(ids(mirror))
    assert seen == [["a"], ["a", "b"]]
    assert list(mirror.deliver([prompt(2, "b", run_id="r2")])) == []  # a repeated frame


def test_an_empty_channel_resumes_from_its_head() -> None:
    mirror = SessionMirror("s")
    attach(mirror, attached([], head=0))
    assert mirror.attach(100).from_serial == 0


def test_a_reset_rebuilds_from_the_page_and_reports_what_left() -> None:
    mirror = SessionMirror("s")
    attach(mirror, attached([prompt(5, "old1", "r1"), prompt(6, "old2", "r2")], head=6))
    mirror.attach(100)
    held = list(mirror.deliver([prompt(2, "late", "r4")]))
    assert held == []
    attachment = mirror.attached(
        attached([prompt(1, "new", "r3")], head=1, epoch="E2", has_older=True, reset=True)
    )
    assert attachment.reset and not attachment.first
    assert added(list(attachment.folded)) == ["new"]
    removed = [
        (type(e).__name__, e.op)
        for e in attachment.removed
        if isinstance(e, (MessageEvent, RunEvent))
    ]
    assert ("MessageEvent", "removed") in removed and ("RunEvent", "removed") in removed
    gone = {e.run.run_id for e in attachment.removed if isinstance(e, RunEvent)}
    assert gone == {"r1", "r2"}
    assert [f.entry["serial"] for f in attachment.held] == [2]
    assert ids(mirror) == ["new", "late"]
    assert (mirror.epoch, mirror.oldest_serial, mirror.newest_serial) == ("E2", 1, 2)
    assert mirror.has_older
    assert (mirror.attach(100).from_serial, mirror.attach(100).epoch) == (2, "E2")


def test_a_failed_attach_drops_what_it_held_and_the_next_one_resumes() -> None:
    mirror = SessionMirror("s")
    attach(mirror, attached([prompt(1, "a")], head=1))
    mirror.attach(100)
    assert list(mirror.deliver([prompt(2, "b")])) == []
    mirror.attach_failed()
    assert not mirror.attaching
    assert ids(mirror) == ["a"]
    assert mirror.attach(100).from_serial == 1


def test_history_pages_back_from_the_oldest_serial_until_nothing_is_older() -> None:
    mirror = SessionMirror("s")
    assert mirror.history(50) is None  # nothing attached yet
    attach(mirror, attached([prompt(3, "c", "r3"), prompt(4, "d", "r4")], head=4, has_older=True))
    request = mirror.history(2)
    assert isinstance(request, History)
    assert (request.before, request.limit) == (3, 2)
    page = Page(
        req=1, session_id="s", entries=[prompt(1, "a"), prompt(2, "b", "r2")], has_older=False
    )
    events = mirror.page(page)
    joined = [
        e.message.message.id for e in events if isinstance(e, MessageEvent) and e.op == "added"
    ]
    assert joined == ["a", "b"]
    assert ids(mirror) == ["a", "b", "c", "d"]
    assert mirror.oldest_serial == 1 and mirror.newest_serial == 4
    assert not mirror.has_older
    assert mirror.history(2) is None


def test_an_unreadable_entry_is_held_but_changes_nothing() -> None:
    mirror = SessionMirror("s")
    attach(mirror, attached([], head=0))
    folded = list(mirror.deliver([{"serial": 1, "kind": "bogus"}, prompt(2, "b")]))
    assert [(f.entry["serial"], f.read, f.events == []) for f in folded] == [
        (1, False, True),
        (2, True, False),
    ]
    assert ids(mirror) == ["b"]
    assert list(mirror.deliver([{"kind": "message"}])) == []  # no serial: skipped


def test_select_branch_reports_what_left_and_what_joined() -> None:
    mirror = SessionMirror("s")
    fork = {**prompt(3, "b2", "r3"), "parent_id": "a"}
    attach(mirror, attached([prompt(1, "a"), prompt(2, "b1", "r2"), fork], head=3))
    assert ids(mirror) == ["a", "b2"]
    events = mirror.select_branch("b1")
    assert [(e.op, e.message.message.id) for e in events if isinstance(e, MessageEvent)] == [
        ("removed", "b2"),
        ("added", "b1"),
    ]
    assert ids(mirror) == ["a", "b1"]
