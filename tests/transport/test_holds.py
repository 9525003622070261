"""``AdmissionHold`` with a fake clock: the rate hold (``RATE_LIMITED``) and the store hold
(``STORE_UNAVAILABLE``) of one connection, admitted, held until a time, or lapsed. The same
behaviours over real sockets are in tests/relay/test_limits.py and test_store_hold.py."""

from __future__ import annotations

from transport._holds import (
    RATE_LIMIT_HOLD,
    RATE_LIMIT_RETRY_AFTER,
    STORE_HOLD,
    AdmissionHold,
)
from transport.errors import RATE_LIMITED, STORE_UNAVAILABLE


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def hold() -> tuple[AdmissionHold, FakeClock]:
    clock = FakeClock()
    return AdmissionHold(clock), clock


# ------------------------------------------------------------ rate hold --


def test_publishes_up_to_the_limit_are_admitted_and_counted_until_released() -> None:
    h, _ = hold()
    assert h.reserve("s", "a", 2) is None
    assert h.reserve("s", "b", 2) is None
    assert h.inflight == 2
    h.release()
    assert h.inflight == 1
    assert h.reserve("s", "c", 2) is None


def test_one_over_the_limit_is_refused_and_holds_until_a_time() -> None:
    h, clock = hold()
    assert h.reserve("s", "a", 1) is None
    refusal = h.reserve("s", "b", 1)
    assert refusal is not None
    assert refusal.code == RATE_LIMITED
    assert refusal.held == "b"
    assert refusal.until == clock.now + RATE_LIMIT_HOLD
    error = refusal.error()
    assert error.code == RATE_LIMITED
    assert error.details == {"retry_after": RATE_LIMIT_RETRY_AFTER, "limit": 1, "held": "b"}
    assert h.inflight == 1  # a refused publish does not count as running
    assert h.rate_held() == "b"


def test_later_publishes_wait_behind_the_refused_one_even_with_room() -> None:
    h, _ = hold()
    h.reserve("s", "a", 1)
    h.reserve("s", "b", 1)  # refused: holds the connection
    h.release()  # "a" finished: there is room now
    later = h.reserve("s", "c", 1)
    assert later is not None and later.code == RATE_LIMITED and later.held == "b"
    assert "send it again first" in later.message
    assert h.reserve("s", "b", 1) is None  # the refused one comes again: taken
    assert h.rate_held() is None
    h.release()
    assert h.reserve("s", "c", 1) is None


def test_the_same_entry_id_in_another_session_does_not_end_the_hold() -> None:
    h, _ = hold()
    h.reserve("s", "a", 1)
    h.reserve("s", "b", 1)
    h.release()
    other = h.reserve("t", "b", 1)
    assert other is not None and other.held == "b"
    assert h.rate_held() == "b"


def test_the_rate_hold_lapses_after_its_time_if_the_refused_one_never_comes_again() -> None:
    h, clock = hold()
    h.reserve("s", "a", 1)
    h.reserve("s", "b", 1)
    h.release()
    clock.now += RATE_LIMIT_HOLD - 0.001
    assert h.reserve("s", "c", 1) is not None  # not yet
    clock.now += 0.001
    assert h.reserve("s", "c", 1) is None
    assert h.rate_held() is None


def test_a_publish_over_the_limit_after_a_lapse_starts_a_new_hold() -> None:
    h, clock = hold()
    h.reserve("s", "a", 1)
    h.reserve("s", "b", 1)
    clock.now += RATE_LIMIT_HOLD
    refusal = h.reserve("s", "c", 1)  # "a" still runs: "c" is over the limit itself
    assert refusal is not None and refusal.held == "c"
    assert refusal.until == clock.now + RATE_LIMIT_HOLD
    assert "too many publishes" in refusal.message


def test_a_limit_of_zero_refuses_every_publish() -> None:
    h, _ = hold()
    first = h.reserve("s", "a", 0)
    assert first is not None and first.held == "a"
    again = h.reserve("s", "a", 0)  # its retry ends the hold, and is over the limit again
    assert again is not None and again.held == "a"


# ----------------------------------------------------------- store hold --


def test_no_store_hold_admits_everything() -> None:
    h, _ = hold()
    assert h.admit_stored("s", "a") is None
    assert h.store_held("s") is None


def test_a_publish_the_store_refused_holds_later_ones_to_its_session_only() -> None:
    h, clock = hold()
    h.store_refused("s", "a")
    refusal = h.admit_stored("s", "b")
    assert refusal is not None
    assert refusal.code == STORE_UNAVAILABLE
    assert refusal.until == clock.now + STORE_HOLD
    assert refusal.error().details == {"held": "a"}
    assert h.admit_stored("t", "b") is None  # another session is not held
    assert h.admit_stored("s", "a") is None  # the refused one comes again: taken
    assert h.admit_stored("s", "b") is None
    assert h.store_held("s") is None


def test_the_first_refused_publish_keeps_the_store_hold() -> None:
    h, _ = hold()
    h.store_refused("s", "a")
    h.store_refused("s", "b")
    assert h.store_held("s") == "a"


def test_the_store_hold_lapses_after_its_time_if_the_refused_one_never_comes_again() -> None:
    h, clock = hold()
    h.store_refused("s", "a")
    clock.now += STORE_HOLD - 0.001
    assert h.admit_stored("s", "b") is not None
    clock.now += 0.001
    assert h.admit_stored("s", "b") is None
    assert h.store_held("s") is None


def test_hold_times_are_the_holds_own() -> None:
    clock = FakeClock()
    h = AdmissionHold(clock, rate_hold=0.5, store_hold=0.25)
    h.reserve("s", "a", 0)
    h.store_refused("s", "x")
    clock.now += 0.25
    assert h.admit_stored("s", "y") is None
    assert h.reserve("s", "b", 1) is not None
    clock.now += 0.25
    assert h.reserve("s", "b", 1) is None
