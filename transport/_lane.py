"""The publish lane: the order an SDK's publishes go in, and when a refused one goes again.

An SDK sends its publishes over one connection in the order the user made them. Each
publish takes a place in the lane with ``reserve()``. It may go once every place taken
before it was sent and no earlier publish waits to go again. ``turn()`` says so, or says
until when to wait. After a reconnect, ``resend()`` says whether a publish still waiting
for its reply goes again at once or back in line.

The relay may refuse a publish ``RATE_LIMITED`` or ``STORE_UNAVAILABLE``. ``refused()``
then says when it goes again, with the same entry id, or that it gives up. A refused
publish keeps its place while it goes again, so nothing made after it overtakes it.

The lane does no I/O and reads no clock: every time is an argument, and the jitter of its
backoffs comes from a function passed in. ``transport.asyncio._connection.Connection`` and
the JavaScript client's ``Session`` drive it. The long story, with the reasons for each
rule, is in docs/explanation/publish-lane.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from .errors import RATE_LIMITED, STORE_UNAVAILABLE, RunwireError

__all__ = [
    "RATE_LIMIT_BACKOFF_FIRST",
    "RATE_LIMIT_BACKOFF_MAX",
    "RATE_LIMIT_WAIT",
    "RETRIED",
    "STORE_HELD_WAIT",
    "STORE_RETRY_FIRST",
    "STORE_RETRY_MAX",
    "STORE_WAIT",
    "PublishLane",
    "Turn",
    "backoff",
    "retry_delay",
]

RATE_LIMIT_WAIT = 30.0
"""Seconds a publish refused ``RATE_LIMITED`` keeps going again before it gives up."""
RATE_LIMIT_BACKOFF_FIRST = 0.05
"""Seconds before a refused publish goes again when the relay names no ``retry_after``."""
RATE_LIMIT_BACKOFF_MAX = 2.0
"""The longest such wait. It doubles from ``RATE_LIMIT_BACKOFF_FIRST``, with jitter."""
STORE_WAIT = 60.0
"""Seconds a publish refused ``STORE_UNAVAILABLE`` keeps going again before it gives up."""
STORE_RETRY_FIRST = 0.1
"""Seconds at most before a publish refused ``STORE_UNAVAILABLE`` goes again, with jitter."""
STORE_RETRY_MAX = 2.0
"""The longest such wait. It doubles from ``STORE_RETRY_FIRST``, with jitter."""
STORE_HELD_WAIT = 10.0
"""Seconds at least a publish held behind an earlier one keeps going again.

The relay holds a publish behind an earlier one of the same connection that its store
refused. It says so with ``STORE_UNAVAILABLE`` and the earlier entry's id in
``details["held"]``. That hold ends 2 s after the earlier one stops coming, so the held
publish keeps trying for this long even when ``store_wait`` is shorter."""
RETRIED = frozenset({RATE_LIMITED, STORE_UNAVAILABLE})
"""The refusals after which a publish goes again."""

Jitter = Callable[[], float]
"""Returns a number from 0 to 1 that spreads a backoff: ``random.random`` in the drivers."""


def backoff(first: float, most: float, attempt: int, jitter: float) -> float:
    """The wait before try ``attempt`` goes again, 0 being the first try.

    It is ``first`` doubling up to ``most``, between half of that and all of it as
    ``jitter`` goes from 0 to 1."""
    cap = min(most, first * 2.0 ** min(attempt, 16))
    return cap / 2 + jitter * (cap / 2)


def retry_delay(error: RunwireError, attempt: int, jitter: float) -> float:
    """Seconds before a publish refused with ``error`` goes again.

    For ``RATE_LIMITED`` it is the relay's ``details["retry_after"]``. When the relay names
    none, and for ``STORE_UNAVAILABLE``, it is a backoff with jitter."""
    if error.code == STORE_UNAVAILABLE:
        return backoff(STORE_RETRY_FIRST, STORE_RETRY_MAX, attempt, jitter)
    after = error.details.get("retry_after")
    if isinstance(after, int | float) and not isinstance(after, bool) and 0 <= after < 3600:
        return float(after)
    return backoff(RATE_LIMIT_BACKOFF_FIRST, RATE_LIMIT_BACKOFF_MAX, attempt, jitter)


@dataclass(frozen=True, slots=True)
class Turn:
    """What a publish does now: send it (``go``), or wait.

    A publish that waits asks again at ``wake_at``, or sooner when the lane changed. A
    ``wake_at`` of None means only a change of the lane can let it go."""

    go: bool
    wake_at: float | None = None


GO = Turn(go=True)


class _Place:
    """What the lane remembers of one publish that was refused or waited."""

    __slots__ = ("attempt", "deadline", "refusal", "retry_at", "since", "waited")

    def __init__(self) -> None:
        self.refusal: RunwireError | None = None  # its latest refusal
        self.since = 0.0  # when the first refusal with that code came
        self.deadline = 0.0  # when it gives up
        self.attempt = 0  # refusals with that code so far
        self.retry_at = 0.0  # it goes again no sooner than this
        self.waited = False  # it waited behind a refused publish


class PublishLane:
    """The order of one connection's publishes, and their refusals, without I/O.

    A driver takes a place per publish, asks ``turn`` before each send, says ``sent``
    once the frame is queued on the socket, and passes the reply to ``refused`` or
    ``accepted``. ``finish`` ends the publish. Methods that return a bool return True
    when publishes waiting for their turn may go now: the driver wakes them.
    """

    def __init__(
        self,
        *,
        jitter: Jitter,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        store_wait: float = STORE_WAIT,
    ) -> None:
        self.rate_limit_wait = rate_limit_wait
        self.store_wait = store_wait
        self._jitter = jitter
        self._newest = 0  # the newest place taken
        # Places taken whose publish is not on the socket yet, oldest first.
        self._unsent: list[int] = []
        # Refused publishes that go again, in the order of their places.
        self._held: list[int] = []
        self._places: dict[int, _Place] = {}
        self._store_gave_up = False  # a publish gave up on the store; none was taken since
        # The newest place when a publish gave up on the store, and its error. The
        # publishes up to it that still wait for their turn raise it instead of going.
        self._gave_up: tuple[int, RunwireError] = (0, RunwireError(STORE_UNAVAILABLE))

    def reserve(self) -> int:
        """Take the next place in the lane. It must be sent, released or finished."""
        self._newest += 1
        self._unsent.append(self._newest)
        return self._newest

    def release(self, place: int) -> bool:
        """Give back a place no publish will use. Releasing twice does nothing."""
        return self.sent(place)

    def sent(self, place: int) -> bool:
        """The publish of ``place`` is queued on the socket: the next one may go."""
        unsent = self._unsent
        if unsent and unsent[0] == place:
            del unsent[0]  # the usual case: the oldest place goes first
            return True
        if place in unsent:
            unsent.remove(place)
            return True
        return False

    def resend(self, place: int) -> bool:
        """The link dropped before the reply to the publish of ``place`` came: may it go
        again at once on the new connection?

        It may when no publish before it waits to go again or to be sent. Otherwise it goes
        back in line, as if it was never sent: the driver asks ``turn`` again before it
        sends it. The new connection has no relay hold behind the earlier publish, so sent
        at once it could be stored before it.
        """
        held = bool(self._held) and self._held[0] < place
        if not held and not (self._unsent and self._unsent[0] < place):
            return True
        if place not in self._unsent:
            bisect.insort(self._unsent, place)
        return False

    def turn(self, place: int, now: float) -> Turn:
        """May the publish of ``place`` be sent at ``now``?

        It goes when every place before it was sent and no publish before it was refused
        and waits to go again. A refused publish also waits for its own ``retry_at``.
        Raises the refusal when its deadline passed while it waited. Raises the error of a
        publish that gave up on the store when this one was made before that and waited
        behind it, since it must not overtake it.
        """
        p = self._places.get(place)
        if p is not None and now < p.retry_at:
            return Turn(go=False, wake_at=p.retry_at)
        refusal = None if p is None else p.refusal
        last, error = self._gave_up
        if place <= last and (refusal is not None or (p is not None and p.waited)):
            raise refusal if refusal is not None and refusal.code == error.code else error
        held = bool(self._held) and self._held[0] < place
        if not held and not (self._unsent and self._unsent[0] < place):
            return GO
        wake_at = None
        if p is not None and refusal is not None:
            if now >= p.deadline:
                raise refusal
            wake_at = p.deadline
        if held:
            if p is None:
                p = self._places[place] = _Place()
            p.waited = True
        return Turn(go=False, wake_at=wake_at)

    def refused(self, place: int, entry_id: str, error: RunwireError, now: float) -> float | None:
        """The relay refused the publish of ``place`` with ``error`` at ``now``.

        Returns when it goes again, or None when it gives up: the driver raises ``error``.
        Only ``RATE_LIMITED`` and ``STORE_UNAVAILABLE`` are tried again. Each gives up when
        going again would pass its wait since the first refusal with that code.
        """
        if error.code not in RETRIED:
            return None
        p = self._places.get(place)
        if p is None:
            p = self._places[place] = _Place()
        if p.refusal is None or p.refusal.code != error.code:
            p.since, p.attempt = now, 0
        p.refusal = error
        # Held behind an earlier publish of ours that the store refused: not the store's.
        behind = error.details.get("held") not in (None, entry_id)
        store = error.code == STORE_UNAVAILABLE and not behind
        if store and self._store_gave_up:
            return None  # the store stayed away a whole ``store_wait`` already
        delay = retry_delay(error, p.attempt, self._jitter())
        p.attempt += 1
        if error.code == RATE_LIMITED:
            p.deadline = p.since + self.rate_limit_wait
        else:
            p.deadline = p.since + max(self.store_wait, STORE_HELD_WAIT if behind else 0.0)
        if now + delay > p.deadline:
            if store:
                self._store_gave_up = True
                self._gave_up = (self._newest, error)
            return None
        if place not in self._held:
            bisect.insort(self._held, place)
        p.retry_at = now + delay
        return p.retry_at

    def accepted(self, place: int) -> None:
        """The relay took the publish of ``place``: the store, if it was away, is back."""
        self._store_gave_up = False

    def finish(self, place: int) -> bool:
        """The publish of ``place`` is over: it was taken, or it raised."""
        woke = self.sent(place)  # it raised before it was sent
        p = self._places.pop(place, None)
        if p is not None and p.refusal is not None:
            if place in self._held:
                self._held.remove(place)
            return True
        return woke
