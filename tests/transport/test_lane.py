"""The publish lane (``transport._lane.PublishLane``), run synchronously with a fake clock.

Each scenario drives a lane through a ``Script``: the script calls the lane, asserts what
it answers, and records every call with its answer. The recordings are the shared vectors
in tests/vectors/lane/*.json, which the JavaScript client's lane must pass too
(tests/js/lane.test.mjs). Regenerate them with ``python -m tests.transport.test_lane``
after the lane changes; ``test_the_vectors_are_the_scenarios`` fails until then.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from transport._lane import (
    RATE_LIMIT_WAIT,
    STORE_HELD_WAIT,
    STORE_WAIT,
    PublishLane,
    backoff,
    retry_delay,
)
from transport.errors import RATE_LIMITED, STORE_UNAVAILABLE, VALIDATION_ERROR, RunwireError

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors" / "lane"

Result = dict[str, Any]


class Script:
    """A lane, a fake clock and the record of every call made to the lane."""

    def __init__(
        self,
        *,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        store_wait: float = STORE_WAIT,
        jitter: float = 1.0,
    ) -> None:
        self.config = {
            "rate_limit_wait": rate_limit_wait,
            "store_wait": store_wait,
            "jitter": jitter,
        }
        self.lane = PublishLane(
            jitter=lambda: jitter, rate_limit_wait=rate_limit_wait, store_wait=store_wait
        )
        self.now = 0.0
        self.steps: list[dict[str, Any]] = []

    def at(self, now: float) -> Script:
        """Move the fake clock to ``now``; it never goes back."""
        assert now >= self.now
        self.now = now
        return self

    def _record(self, step: dict[str, Any], expect: Any) -> Any:
        self.steps.append({**step, "expect": expect})
        return expect

    def reserve(self) -> int:
        return int(self._record({"op": "reserve"}, self.lane.reserve()))

    def release(self, place: int) -> bool:
        return bool(self._record({"op": "release", "place": place}, self.lane.release(place)))

    def sent(self, place: int) -> bool:
        return bool(self._record({"op": "sent", "place": place}, self.lane.sent(place)))

    def resend(self, place: int) -> bool:
        return bool(self._record({"op": "resend", "place": place}, self.lane.resend(place)))

    def turn(self, place: int) -> Result:
        """``{"go": True}``, ``{"wait": wake_at or None}`` or ``{"raise": code and message}``."""
        try:
            turn = self.lane.turn(place, self.now)
        except RunwireError as exc:
            result: Result = {"raise": {"code": exc.code, "message": exc.message}}
        else:
            result = {"go": True} if turn.go else {"wait": turn.wake_at}
        return dict(self._record({"op": "turn", "place": place, "now": self.now}, result))

    def refused(
        self, place: int, entry_id: str, code: str, message: str, **details: Any
    ) -> float | None:
        """The relay refused the publish of ``place``: when it goes again, or None."""
        error = RunwireError(code, message, details=details)
        retry_at = self.lane.refused(place, entry_id, error, self.now)
        step = {
            "op": "refused",
            "place": place,
            "now": self.now,
            "entry_id": entry_id,
            "error": {"code": code, "message": message, "details": details},
        }
        return self._record(step, retry_at)  # type: ignore[no-any-return]

    def accepted(self, place: int) -> None:
        self.lane.accepted(place)
        self._record({"op": "accepted", "place": place}, None)

    def finish(self, place: int) -> bool:
        return bool(self._record({"op": "finish", "place": place}, self.lane.finish(place)))

    def go(self, place: int) -> None:
        """Its turn, then sent: the usual way a publish goes out."""
        assert self.turn(place) == {"go": True}
        self.sent(place)

    def done(self, place: int) -> None:
        """Acknowledged, then finished."""
        self.accepted(place)
        self.finish(place)


def raised(code: str, message: str) -> Result:
    return {"raise": {"code": code, "message": message}}


WAIT_FOR_THE_LANE: Result = {"wait": None}


# ------------------------------------------------------------------------ scenarios --


def in_order_acks(s: Script) -> None:
    """One publish at a time goes at once; acks in order change nothing for the next."""
    for _ in range(3):
        place = s.reserve()
        s.go(place)
        s.done(place)
    assert s.steps[0]["expect"] == 1 and s.steps[-1]["place"] == 3


def several_in_flight(s: Script) -> None:
    """Publishes sent before the first ack was back all go; acks may come in any order."""
    places = [s.reserve() for _ in range(3)]
    for place in places:
        s.go(place)
    s.done(3)
    s.done(1)
    s.done(2)
    assert s.turn(s.reserve()) == {"go": True}


def reserved_place_goes_first(s: Script) -> None:
    """A place taken early holds the publishes behind it until it is sent; a place given
    back holds nothing; giving it back twice does nothing."""
    first, unused, second = s.reserve(), s.reserve(), s.reserve()
    assert s.turn(second) == WAIT_FOR_THE_LANE
    assert s.turn(unused) == WAIT_FOR_THE_LANE
    assert s.release(unused) is True
    assert s.release(unused) is False
    assert s.turn(second) == WAIT_FOR_THE_LANE  # ``first`` is still before it
    assert s.turn(first) == {"go": True}
    assert s.sent(first) is True  # the publishes behind it may go now
    assert s.turn(second) == {"go": True}
    s.sent(second)
    s.done(first)
    s.done(second)


def refused_with_retry_after(s: Script) -> None:
    """``RATE_LIMITED`` with ``retry_after``: it goes again then, in its place; the publish
    behind it, refused too, waits for it even once its own retry time passed."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.go(second)
    assert s.refused(first, "e1", RATE_LIMITED, "busy", retry_after=0.2, limit=1) == 0.2
    s.at(0.01)
    again = s.refused(second, "e2", RATE_LIMITED, "busy", retry_after=0.2, limit=1)
    assert again == pytest.approx(0.21)
    assert s.turn(first) == {"wait": 0.2}
    s.at(again)
    assert s.turn(second) == {"wait": 0.01 + RATE_LIMIT_WAIT}  # behind the first
    assert s.turn(first) == {"go": True}
    s.sent(first)
    s.accepted(first)
    assert s.finish(first) is True  # the one behind it may go
    assert s.turn(second) == {"go": True}
    s.sent(second)
    s.done(second)


def refused_without_retry_after(s: Script) -> None:
    """No ``retry_after``: a backoff from 50 ms, doubling, with jitter (here all of it)."""
    place = s.reserve()
    s.go(place)
    assert s.refused(place, "e1", RATE_LIMITED, "busy") == 0.05
    s.at(0.05)
    s.go(place)
    again = s.refused(place, "e1", RATE_LIMITED, "busy")
    assert again == pytest.approx(0.15)
    s.at(again)  # type: ignore[arg-type]
    s.go(place)
    s.done(place)


def rate_limit_gives_up(s: Script) -> None:
    """Still refused when going again would pass ``rate_limit_wait``: it gives up, and the
    publish behind it gives up at its own deadline while it waits."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.go(second)
    assert s.refused(first, "e1", RATE_LIMITED, "busy 1", retry_after=0.2) == 0.2
    s.at(0.1)
    assert s.refused(second, "e2", RATE_LIMITED, "busy 2", retry_after=0.2) == pytest.approx(0.3)
    s.at(0.2)
    s.go(first)
    again = s.refused(first, "e1", RATE_LIMITED, "busy 1", retry_after=0.2)
    assert again == 0.4
    s.at(again)
    s.go(first)
    assert s.refused(first, "e1", RATE_LIMITED, "busy 1", retry_after=0.2) is None
    assert s.finish(first) is True
    s.at(0.5)
    s.go(second)
    assert s.refused(second, "e2", RATE_LIMITED, "busy 2", retry_after=0.2) is None
    s.finish(second)


def timeout_while_waiting(s: Script) -> None:
    """A refused publish that waits behind an earlier refused one gives up at its own
    deadline, raising its refusal, without going again."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.go(second)
    s.refused(first, "e1", RATE_LIMITED, "busy 1", retry_after=0.4)
    s.at(0.1)
    assert s.refused(second, "e2", RATE_LIMITED, "busy 2", retry_after=0.1) == pytest.approx(0.2)
    s.at(0.2)
    assert s.turn(second) == {"wait": pytest.approx(0.6)}
    s.at(0.6)
    assert s.turn(second) == raised(RATE_LIMITED, "busy 2")
    s.finish(second)
    s.go(first)
    s.done(first)


def store_outage_then_back(s: Script) -> None:
    """``STORE_UNAVAILABLE``: a backoff from 100 ms doubling up to 2 s; once the store takes
    it, the publishes behind it go, in order."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.go(second)
    assert s.refused(first, "e1", STORE_UNAVAILABLE, "away") == 0.1
    s.at(0.01)
    assert s.refused(second, "e2", STORE_UNAVAILABLE, "held", held="e1") == pytest.approx(0.11)
    s.at(0.1)
    s.go(first)
    again = s.refused(first, "e1", STORE_UNAVAILABLE, "away")
    assert again == pytest.approx(0.3)
    s.at(again)  # type: ignore[arg-type]
    s.go(first)
    s.accepted(first)
    assert s.finish(first) is True
    s.go(second)
    s.done(second)


def hold_then_release(s: Script) -> None:
    """Held by the relay behind an earlier publish (``details.held``): it keeps trying for
    ``STORE_HELD_WAIT`` even when ``store_wait`` is shorter, and goes once the earlier
    one was taken."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.go(second)
    s.refused(first, "e1", STORE_UNAVAILABLE, "away")
    assert s.refused(second, "e2", STORE_UNAVAILABLE, "held", held="e1") == 0.1
    s.at(0.1)
    assert s.turn(second) == {"wait": STORE_HELD_WAIT}  # waits for the first
    s.go(first)
    s.accepted(first)
    assert s.finish(first) is True
    assert s.turn(second) == {"go": True}
    s.sent(second)
    s.done(second)


def store_gives_up(s: Script) -> None:
    """The store stays away past ``store_wait``: the publish gives up; one that waited
    behind it raises its own refusal rather than go; a publish the store refuses then
    gives up at once, until one is taken again."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.go(second)
    assert s.refused(first, "e1", STORE_UNAVAILABLE, "away 1") == 0.1
    assert s.refused(second, "e2", STORE_UNAVAILABLE, "away 2") == 0.1
    s.at(0.1)
    s.go(first)
    again = s.refused(first, "e1", STORE_UNAVAILABLE, "away 1")
    assert again == pytest.approx(0.3)
    s.at(again)  # type: ignore[arg-type]
    s.go(first)
    assert s.refused(first, "e1", STORE_UNAVAILABLE, "away 1") is None  # 0.3 + 0.4 > 0.5
    assert s.turn(second) == raised(STORE_UNAVAILABLE, "away 2")
    assert s.finish(first) is True
    s.finish(second)
    third = s.reserve()
    s.go(third)
    assert s.refused(third, "e3", STORE_UNAVAILABLE, "away 3") is None  # at once
    s.finish(third)
    fourth = s.reserve()
    s.go(fourth)
    s.done(fourth)  # the store is back
    fifth = s.reserve()
    s.go(fifth)
    assert s.refused(fifth, "e5", STORE_UNAVAILABLE, "away 5") == pytest.approx(s.now + 0.1)


def waiting_behind_one_that_gave_up(s: Script) -> None:
    """A publish made before one gave up on the store, that waited behind it without being
    refused itself, raises that one's error instead of going; one made after goes."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    s.refused(first, "e1", STORE_UNAVAILABLE, "away 1")
    assert s.turn(second) == WAIT_FOR_THE_LANE
    s.at(0.1)
    s.go(first)
    again = s.refused(first, "e1", STORE_UNAVAILABLE, "away 1")
    s.at(again)  # type: ignore[arg-type]
    s.go(first)
    assert s.refused(first, "e1", STORE_UNAVAILABLE, "away 1") is None
    s.finish(first)
    assert s.turn(second) == raised(STORE_UNAVAILABLE, "away 1")
    s.finish(second)
    third = s.reserve()
    assert s.turn(third) == {"go": True}


def reconnect_resend(s: Script) -> None:
    """The link drops with publishes queued: what counts is that a publish is queued
    (``sent``), not that it reached the relay. The ones queued while the link was down
    go after it, and the driver sends them all again in that order on the next connect.
    A refusal that comes on the new link goes again as usual."""
    first = s.reserve()
    s.go(first)  # on the old link; no reply comes: it is sent again after the reconnect
    second = s.reserve()
    s.go(second)  # queued while the link is down
    s.at(1.0)
    again = s.refused(second, "e2", STORE_UNAVAILABLE, "held", held="e1")
    assert again == pytest.approx(1.1)
    s.done(first)
    s.at(again)  # type: ignore[arg-type]
    s.go(second)
    s.done(second)


def reconnect_behind_a_refused_one(s: Script) -> None:
    """The store refuses ``a`` while ``b`` is in flight, and the link drops before ``b``'s
    reply. The new connection has no relay hold behind ``a``: ``b`` must not go again
    before ``a``, or the store, back by then, takes ``b`` first. So ``b`` goes back in line,
    and so does ``c``, in flight behind it. A publish with nothing before it goes at once."""
    a, b, c = s.reserve(), s.reserve(), s.reserve()
    for place in (a, b, c):
        s.go(place)
    again = s.refused(a, "e1", STORE_UNAVAILABLE, "away")
    assert again == pytest.approx(0.1)
    assert s.resend(b) is False  # the link dropped: b has no reply yet
    assert s.resend(c) is False
    assert s.turn(b) == WAIT_FOR_THE_LANE
    assert s.turn(c) == WAIT_FOR_THE_LANE
    s.at(again)  # type: ignore[arg-type]
    s.go(a)
    s.done(a)
    assert s.turn(c) == WAIT_FOR_THE_LANE  # b is not sent yet
    s.go(b)
    s.go(c)
    assert s.resend(b) is True  # dropped again, nothing before it waits: both go at once
    assert s.resend(c) is True
    s.done(b)
    s.done(c)


def duplicate_ack(s: Script) -> None:
    """A publish refused ``STORE_UNAVAILABLE`` may have been stored: the relay acks its
    retry as a duplicate. For the lane that is an ack like any other."""
    place = s.reserve()
    s.go(place)
    s.refused(place, "e1", STORE_UNAVAILABLE, "timed out")
    s.at(0.1)
    s.go(place)
    s.done(place)
    later = s.reserve()
    s.go(later)
    assert s.refused(later, "e2", STORE_UNAVAILABLE, "away") == pytest.approx(0.2)


def stale_places(s: Script) -> None:
    """Calls about a place that is over change nothing: sent, released or finished again."""
    place = s.reserve()
    s.go(place)
    s.done(place)
    assert s.sent(place) is False
    assert s.release(place) is False
    assert s.finish(place) is False
    assert s.finish(99) is False
    assert s.turn(s.reserve()) == {"go": True}


def other_errors_are_not_retried(s: Script) -> None:
    """An error other than ``RATE_LIMITED`` or ``STORE_UNAVAILABLE`` is raised at once and
    leaves the lane as it was."""
    first, second = s.reserve(), s.reserve()
    s.go(first)
    assert s.refused(first, "e1", VALIDATION_ERROR, "bad") is None
    assert s.finish(first) is False
    assert s.turn(second) == {"go": True}


def half_jitter(s: Script) -> None:
    """With no jitter a backoff waits half its cap (the vectors use a fixed jitter)."""
    place = s.reserve()
    s.go(place)
    assert s.refused(place, "e1", STORE_UNAVAILABLE, "away") == 0.05
    s.at(0.05)
    s.go(place)
    assert s.refused(place, "e1", RATE_LIMITED, "busy") == pytest.approx(0.075)


def backoffs_double_up_to_their_caps(s: Script) -> None:
    """Each backoff doubles from its first wait up to 2 s: 100 ms for the store, 50 ms for
    a rate limit without ``retry_after``. A refusal with another code starts afresh."""
    place = s.reserve()
    waits = []
    for _ in range(7):
        s.go(place)
        again = s.refused(place, "e1", STORE_UNAVAILABLE, "away")
        assert again is not None
        waits.append(again - s.now)
        s.at(again)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    waits = []
    for _ in range(7):
        s.go(place)
        again = s.refused(place, "e1", RATE_LIMITED, "busy")
        assert again is not None
        waits.append(again - s.now)
        s.at(again)
    assert waits == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0])
    s.go(place)
    s.done(place)


SCENARIOS: dict[str, tuple[Callable[[Script], None], dict[str, float]]] = {
    "in_order_acks": (in_order_acks, {}),
    "several_in_flight": (several_in_flight, {}),
    "reserved_place_goes_first": (reserved_place_goes_first, {}),
    "refused_with_retry_after": (refused_with_retry_after, {}),
    "refused_without_retry_after": (refused_without_retry_after, {}),
    "rate_limit_gives_up": (rate_limit_gives_up, {"rate_limit_wait": 0.5}),
    "timeout_while_waiting": (timeout_while_waiting, {"rate_limit_wait": 0.5}),
    "store_outage_then_back": (store_outage_then_back, {}),
    "hold_then_release": (hold_then_release, {"store_wait": 0.3}),
    "store_gives_up": (store_gives_up, {"store_wait": 0.5}),
    "waiting_behind_one_that_gave_up": (waiting_behind_one_that_gave_up, {"store_wait": 0.5}),
    "reconnect_resend": (reconnect_resend, {}),
    "reconnect_behind_a_refused_one": (reconnect_behind_a_refused_one, {}),
    "duplicate_ack": (duplicate_ack, {}),
    "stale_places": (stale_places, {}),
    "other_errors_are_not_retried": (other_errors_are_not_retried, {}),
    "half_jitter": (half_jitter, {"jitter": 0.0}),
    "backoffs_double_up_to_their_caps": (backoffs_double_up_to_their_caps, {}),
}


def run(name: str) -> Script:
    scenario, config = SCENARIOS[name]
    script = Script(**config)
    scenario(script)
    return script


def vector(name: str) -> dict[str, Any]:
    script = run(name)
    scenario = SCENARIOS[name][0]
    description = " ".join((scenario.__doc__ or "").split())
    return {"description": description, "config": script.config, "steps": script.steps}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str) -> None:
    assert run(name).steps


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_vectors_are_the_scenarios(name: str) -> None:
    path = VECTORS / f"{name}.json"
    assert path.exists(), f"run python -m tests.transport.test_lane to write {path}"
    assert json.loads(path.read_text()) == vector(name)


def test_no_vector_without_a_scenario() -> None:
    assert sorted(p.stem for p in VECTORS.glob("*.json")) == sorted(SCENARIOS)


def test_the_wait_is_the_relays_retry_after_else_a_bounded_backoff_with_jitter() -> None:
    said = RunwireError(RATE_LIMITED, details={"retry_after": 0.2})
    assert retry_delay(said, 0, 0.5) == 0.2
    assert retry_delay(said, 9, 0.5) == 0.2
    for details in ({}, {"retry_after": "soon"}, {"retry_after": True}, {"retry_after": -1}):
        silent = RunwireError(RATE_LIMITED, details=details)
        for jitter in (0.0, 0.5, 1.0):
            assert 0.025 <= retry_delay(silent, 0, jitter) <= 0.05
            assert 0.05 <= retry_delay(silent, 1, jitter) <= 0.1
            assert 1.0 <= retry_delay(silent, 40, jitter) <= 2.0
    store = RunwireError(STORE_UNAVAILABLE, details={"retry_after": 5})
    assert retry_delay(store, 0, 1.0) == 0.1  # the store's backoff, whatever it says
    assert backoff(0.1, 2.0, 99, 0.0) == 1.0


def write_vectors() -> None:
    VECTORS.mkdir(parents=True, exist_ok=True)
    for old in VECTORS.glob("*.json"):
        old.unlink()
    for name in sorted(SCENARIOS):
        text = json.dumps(vector(name), indent=1) + "\n"
        (VECTORS / f"{name}.json").write_text(text)


if __name__ == "__main__":
    write_vectors()
