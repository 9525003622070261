"""The chaos suite's ``Ledger`` counts what it should, and nothing else."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import anyio
import pytest

import client_side
import relay
from relay.store._memory import MemoryStore
from transport._mirror import Folded
from transport.asyncio._view import ViewFeed
from transport.frames import History, Page

from .checker import Counts, Ledger, watch_connection, watch_view

STORED = {"s": [(1, "a"), (2, "b"), (3, "c")]}
DONE = {"r1": "complete", "r2": "error"}


def ledger_of(seen: list[tuple[int, str]]) -> Ledger:
    ledger = Ledger()
    ledger.observer("phone", "s")
    for serial, entry_id in seen:
        ledger.saw("phone", serial, entry_id)
    return ledger


def test_a_clean_history_counts_zero() -> None:
    ledger = ledger_of(STORED["s"])
    ledger.acked("s", "a", 1)
    ledger.acked("s", "c", 3)
    ledger.acked("s", "c", 3)  # the repeat of a re-sent publish
    ledger.watch_run("s", "r1")
    counts = ledger.count(STORED, DONE)
    assert counts == Counts() and counts.zero
    assert ledger.problems == []


def test_an_acked_publish_the_store_lacks_is_lost() -> None:
    ledger = ledger_of(STORED["s"])
    ledger.acked("s", "z", 4)
    counts = ledger.count(STORED, DONE)
    # Not stored, and the observer never saw it: two losses of one publish.
    assert counts == Counts(lost=2)
    assert "lost: s z@4 not stored" in ledger.problems


def test_an_acked_publish_stored_at_another_serial_is_lost() -> None:
    ledger = ledger_of(STORED["s"])
    ledger.acked("s", "b", 3)
    assert ledger.count(STORED, DONE).lost == 1


def test_two_acks_naming_two_serials_count_as_lost() -> None:
    ledger = ledger_of(STORED["s"])
    ledger.acked("s", "b", 2)
    ledger.acked("s", "b", 3)
    assert ledger.count(STORED, DONE).lost >= 1


def test_an_acked_publish_an_observer_missed_is_lost() -> None:
    ledger = ledger_of([(1, "a"), (2, "b")])
    ledger.acked("s", "c", 3)
    counts = ledger.count(STORED, DONE)
    assert counts.lost == 1
    assert "lost: phone never saw c" in ledger.problems


def test_an_entry_stored_or_seen_twice_is_duplicated() -> None:
    stored = {"s": [(1, "a"), (2, "b"), (3, "a")]}
    ledger = ledger_of([(1, "a"), (2, "b"), (3, "a")])
    counts = ledger.count(stored, DONE)
    assert counts.duplicated == 2  # once in the store, once on the phone
    assert counts.lost == counts.gapped == counts.hung == 0


def test_a_serial_jump_a_step_back_and_a_late_start_are_gaps() -> None:
    assert ledger_of([(1, "a"), (3, "c")]).count(STORED, DONE).gapped == 1
    back = [(1, "a"), (2, "b"), (1, "a"), (2, "b"), (3, "c")]
    assert ledger_of(back).count(STORED, DONE).gapped == 1
    assert ledger_of([(2, "b"), (3, "c")]).count(STORED, DONE).gapped == 1
    assert ledger_of([(1, "a")]).count(STORED, DONE).gapped == 1  # short of the head
    assert Ledger().count({"s": [(1, "a"), (3, "c")]}, DONE).gapped == 1  # in the store


def test_a_reset_is_a_gap_and_starts_what_the_observer_saw_again() -> None:
    ledger = ledger_of([(1, "a")])
    ledger.reset("phone")
    for pair in STORED["s"]:
        ledger.saw("phone", *pair)
    ledger.acked("s", "a", 1)
    counts = ledger.count(STORED, DONE)
    assert counts == Counts(gapped=1)


def test_a_run_not_terminal_or_never_stored_is_hung() -> None:
    ledger = ledger_of(STORED["s"])
    ledger.watch_run("s", "r1")
    ledger.watch_run("s", "r9")
    counts = ledger.count(STORED, {**DONE, "r3": "active", "r4": "pending"})
    assert counts == Counts(hung=3)
    assert "hung: run r9 is not stored" in ledger.problems


def test_the_report_names_the_counts_and_what_they_counted() -> None:
    ledger = ledger_of([(1, "a")])
    counts = ledger.count(STORED, DONE)
    assert counts == Counts(lost=0, duplicated=0, gapped=1, hung=0)
    assert ledger.report(counts).splitlines() == [
        "Counts(lost=0, duplicated=0, gapped=1, hung=0)",
        "gapped: phone stopped at serial 1 of 3",
    ]


@pytest.mark.anyio
async def test_the_watchers_record_a_real_clients_acks_and_entries() -> None:
    store = MemoryStore()
    ledger = Ledger()
    async with (
        relay.serve(port=0, store=store) as server,
        client_side.connect(server.url, "s") as phone,
    ):
        watch_view(ledger, "phone", phone.view)
        watch_connection(ledger, phone.link.conn)
        handles = [await phone.send(f"p{i}") for i in range(3)]
        for handle in handles:
            ledger.watch_run("s", handle.run_id)
        with anyio.fail_after(10):
            while len(ledger.seen["phone"]) < 3:
                await phone._wait_change()
        stored = [(e.serial, _id(e.data)) for e in await store.read("s", after=0, limit=100)]
    assert [i for _, i in ledger.seen["phone"]] == [i for _, i in stored]
    assert len(ledger.acks["s"]) == 3
    # No agent: the Runs stay pending, so they are hung; nothing else is off.
    counts = ledger.count({"s": stored}, {h.run_id: "pending" for h in handles})
    assert counts == Counts(hung=3)


def _id(data: bytes) -> str:
    from transport import _codec as codec

    return str(codec.loads(data)["id"])


def test_watch_view_records_only_what_the_view_took_in() -> None:
    async def no_older(request: History) -> Page:
        raise AssertionError("no history expected")

    feed = ViewFeed("s", no_older)
    view = feed.view
    take = view.mirror.deliver

    def dropping(entries: Iterable[dict[str, Any]]) -> Iterator[Folded]:  # loses serial 2
        return take([e for e in entries if e.get("serial") != 2])

    view.mirror.deliver = dropping  # type: ignore[method-assign]
    ledger = Ledger()
    watch_view(ledger, "phone", view)
    entries = [{"serial": s, "id": i, "kind": "unknown-kind"} for s, i in STORED["s"]]
    feed.deliver(entries)
    feed.deliver(entries[:2])  # a repeat the view skips
    assert ledger.seen["phone"] == [(1, "a"), (3, "c")]
    assert ledger.count(STORED, DONE) == Counts(gapped=1)


def test_a_reply_missing_or_repeating_a_word_counts_lost_or_duplicated() -> None:
    ledger = ledger_of(STORED["s"])
    ledger.reply("phone", "p1-0 p1-1 p1-2 ")
    ledger.reply("phone", "s2-0 ")
    assert ledger.count(STORED, DONE) == Counts()
    ledger.reply("phone", "p3-0 p3-2 p3-3 p3-3 ")
    assert ledger.count(STORED, DONE) == Counts(lost=1, duplicated=1)
    assert ledger.problems == [
        "lost: phone skips to p3-2 in 'p3-0 p3-2 p3-3 p3-3 '",
        "duplicated: phone shows p3-3 twice in 'p3-0 p3-2 p3-3 p3-3 '",
    ]
