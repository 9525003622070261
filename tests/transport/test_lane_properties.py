"""Properties of the publish lane over generated runs of a fake relay and a fake clock.

A small simulation plays the driver: each publish asks for its turn, goes, and gets an ack or
a refusal, in an order and at times Hypothesis picks. Whatever happens, no publish goes while
an earlier one is unsent or waits to go again, a refused one never goes before its retry
time, and the lane never stalls: every publish ends, taken or given up. Now and then the link
drops: the publishes in flight go again at once, in the order they were sent, or back in
line, and none that goes again at once has an earlier one still to go.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from transport._lane import PublishLane
from transport.errors import RATE_LIMITED, STORE_UNAVAILABLE, RunwireError

WAITING, FLYING, DONE = "waiting", "flying", "done"

_REPLIES = st.one_of(
    st.just(("ack", None)),
    st.tuples(st.just(RATE_LIMITED), st.sampled_from([None, 0.05, 0.5, 3.0])),
    st.tuples(st.just(STORE_UNAVAILABLE), st.sampled_from([None, "earlier"])),
)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    count=st.integers(1, 6),
    jitter=st.sampled_from([0.0, 0.5, 1.0]),
    store_wait=st.sampled_from([0.3, 2.0, 60.0]),
)
def test_no_publish_overtakes_and_none_is_stuck(
    data: st.DataObject, count: int, jitter: float, store_wait: float
) -> None:
    lane = PublishLane(jitter=lambda: jitter, rate_limit_wait=2.0, store_wait=store_wait)
    now = 0.0
    places = [lane.reserve() for _ in range(count)]
    state = dict.fromkeys(places, WAITING)
    retry_at: dict[int, float] = {}
    wake: dict[int, float | None] = {}
    taken: list[int] = []
    sent_at: dict[int, int] = {}  # the order of the sends: a driver re-sends in that order
    sends = 0
    for step in range(400):
        moved = True
        while moved:  # every publish that may go now goes
            moved = False
            for p in places:
                if state[p] != WAITING:
                    continue
                try:
                    turn = lane.turn(p, now)
                except RunwireError:
                    state[p] = DONE
                    lane.finish(p)
                    moved = True
                    continue
                if not turn.go:
                    assert turn.wake_at is None or turn.wake_at > now
                    wake[p] = turn.wake_at
                    continue
                assert all(state[q] != WAITING for q in places if q < p), (p, state)
                assert now >= retry_at.get(p, 0.0)
                lane.sent(p)
                sent_at[p] = sends = sends + 1
                state[p] = FLYING
                moved = True
        flying = [p for p in places if state[p] == FLYING]
        waiting = [p for p in places if state[p] == WAITING]
        if not flying and not waiting:
            break
        times = [t for p in waiting if (t := wake.get(p)) is not None]
        assert flying or times, f"stuck: {state}"  # nothing could ever wake them
        if flying and step <= 60 and data.draw(st.integers(0, 9)) == 0:
            for p in sorted(flying, key=sent_at.__getitem__):  # the link dropped
                if lane.resend(p):
                    assert all(state[q] != WAITING for q in places if q < p), (p, state)
                else:
                    state[p] = WAITING
                    wake[p] = None
            continue
        if flying and (not times or data.draw(st.booleans())):
            p = data.draw(st.sampled_from(flying))
            code, detail = ("ack", None) if step > 60 else data.draw(_REPLIES)
            if code == "ack":
                lane.accepted(p)
                lane.finish(p)
                state[p] = DONE
                taken.append(p)
                continue
            details: dict[str, object] = {}
            if code == RATE_LIMITED and detail is not None:
                details["retry_after"] = detail
            if code == STORE_UNAVAILABLE and detail == "earlier" and p > 1:
                details["held"] = f"e{p - 1}"
            again = lane.refused(p, f"e{p}", RunwireError(code, details=details), now)
            if again is None:
                lane.finish(p)
                state[p] = DONE
            else:
                assert again > now
                retry_at[p] = again
                state[p] = WAITING
        else:
            now = min(times)
    else:
        raise AssertionError(f"the lane did not settle: {state}")
    assert all(s == DONE for s in state.values())
    assert len(set(taken)) == len(taken)  # each publish was taken at most once
