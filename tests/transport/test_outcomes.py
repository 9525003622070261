"""OutcomeBook: steering outcomes as the seed defines them."""

from __future__ import annotations

import pytest

from transport._outcomes import OutcomeBook, OutcomeRecord


def test_tracked_message_is_pending_until_its_run_ends() -> None:
    book = OutcomeBook()
    assert book.track("s1", "r1") == []
    assert book.outcome("s1") is None
    assert book.pending("r1") == ["s1"]
    assert book.run_status("r1", "active") == []
    assert book.outcome("s1") is None


@pytest.mark.parametrize("status", ["complete", "cancelled", "error"])
def test_terminal_status_resolves_unseen_as_not_consumed(status: str) -> None:
    book = OutcomeBook()
    book.track("s1", "r1")
    resolved = book.run_status("r1", status)
    record = OutcomeRecord("s1", "r1", consumed=False, run_terminal_reason=status)  # type: ignore[arg-type]
    assert resolved == [record]
    assert book.outcome("s1") == record
    assert book.pending("r1") == []


def test_seen_message_resolves_consumed_at_the_end() -> None:
    book = OutcomeBook()
    book.track("s1", "r1")
    book.saw("r1", ["s1"])
    assert book.consumed("s1")
    assert book.outcome("s1") is None, "consumed is not resolved before a terminal event"
    assert book.run_status("r1", "complete") == [
        OutcomeRecord("s1", "r1", consumed=True, run_terminal_reason="complete")
    ]


def test_suspend_resolves_consumed_only_and_keeps_the_rest_pending() -> None:
    book = OutcomeBook()
    book.track("s1", "r1")
    book.track("s2", "r1")
    book.saw("r1", ["s1"])
    assert book.run_status("r1", "suspended") == [
        OutcomeRecord("s1", "r1", consumed=True, run_terminal_reason=None)
    ]
    assert book.pending("r1") == ["s2"]
    assert book.outcome("s2") is None
    book.run_status("r1", "active")
    book.saw("r1", ["s2"])
    assert book.run_status("r1", "cancelled") == [
        OutcomeRecord("s2", "r1", consumed=True, run_terminal_reason="cancelled")
    ]
    # s1 resolved at the suspend and is not reported again
    assert book.outcome("s1") == OutcomeRecord("s1", "r1", consumed=True)


def test_seen_of_another_run_does_not_consume() -> None:
    book = OutcomeBook()
    book.track("s1", "r1")
    book.saw("r2", ["s1"])
    assert not book.consumed("s1")
    assert book.run_status("r1", "complete")[0].consumed is False


def test_message_for_an_ended_run_resolves_at_once() -> None:
    book = OutcomeBook()
    book.run_status("r1", "error")
    assert book.track("s1", "r1") == [
        OutcomeRecord("s1", "r1", consumed=False, run_terminal_reason="error")
    ]
    assert book.pending("r1") == []


def test_each_message_resolves_once() -> None:
    book = OutcomeBook()
    book.track("s1", "r1")
    assert len(book.run_status("r1", "complete")) == 1
    assert book.run_status("r1", "complete") == []
    assert book.run_status("r1", "error") == []
    assert book.track("s1", "r1") == []
    assert book.outcome("s1") == OutcomeRecord("s1", "r1", False, "complete")
    assert book.resolved() == [OutcomeRecord("s1", "r1", False, "complete")]


def test_first_terminal_status_wins_for_later_tracks() -> None:
    book = OutcomeBook()
    book.run_status("r1", "cancelled")
    book.run_status("r1", "complete")
    assert book.track("s1", "r1")[0].run_terminal_reason == "cancelled"


def test_runs_are_independent_and_order_is_tracking_order() -> None:
    book = OutcomeBook()
    for mid, rid in [("a", "r1"), ("b", "r2"), ("c", "r1"), ("d", "r1")]:
        book.track(mid, rid)
    assert book.pending("r1") == ["a", "c", "d"]
    assert [r.message_id for r in book.run_status("r1", "complete")] == ["a", "c", "d"]
    assert book.pending("r2") == ["b"]
    assert book.pending("unknown") == []


def test_outcome_record_defaults() -> None:
    record = OutcomeRecord("s1", "r1", consumed=True)
    assert record.run_terminal_reason is None
    assert record.refused is None
    with pytest.raises(AttributeError):
        record.consumed = False  # type: ignore[misc]
