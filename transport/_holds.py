"""Admission holds: whether the relay takes a connection's next publish now.

A connection may have at most ``max_inflight`` publishes running at once. One more
is refused ``RATE_LIMITED``, and that refusal holds the connection: every later
publish is refused too until the refused one comes again. So a client that sends its
refused publishes again, in order, is never overtaken by its own later ones.

A publish the store refused (``STORE_UNAVAILABLE``) holds the connection's later
publishes to that session in the same way. The relay checks this hold when the
publish's turn at the session comes, so publishes already waiting are held too.

A hold ends when its publish comes again, or when it has lasted its time
(``RATE_LIMIT_HOLD``, ``STORE_HOLD``) and the client evidently gave up on it.

``AdmissionHold`` keeps these holds for one connection. It does no I/O and reads
time only from the clock it was given, so tests drive it with a fake clock. The relay's
``Peer`` owns one and the hub asks it before each publish. The back-pressure section
of docs/explanation/guarantees.md says what clients see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import RATE_LIMITED, STORE_UNAVAILABLE, RunwireError

__all__ = [
    "RATE_LIMIT_HOLD",
    "RATE_LIMIT_RETRY_AFTER",
    "STORE_HOLD",
    "AdmissionHold",
    "Clock",
    "Refusal",
]

RATE_LIMIT_RETRY_AFTER = 0.05
"""Seconds a publish refused ``RATE_LIMITED`` should wait before it goes again (its
``details["retry_after"]``): about one store write, after which a slot is likely free."""
RATE_LIMIT_HOLD = 2.0
"""Seconds a refused publish holds its connection's later publishes if it does not come again."""
STORE_HOLD = 2.0
"""Seconds a publish the store refused holds the connection's later publishes to its
session if it does not come again."""

Clock = Callable[[], float]
"""Returns the current time in seconds, on a clock that never goes back."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a publish is not taken now: its error code, the entry id it waits behind
    (``held``) and when that hold lapses (``until``, on the hold's clock)."""

    code: str
    message: str
    held: str
    until: float
    details: dict[str, Any]

    def error(self) -> RunwireError:
        """The refusal as the error the publisher gets (``details.held`` names the entry)."""
        return RunwireError(self.code, self.message, details={**self.details, "held": self.held})


class AdmissionHold:
    """One connection's publish holds: the rate hold and the store holds.

    ``reserve`` admits a publish (counting it as running) or refuses it; ``release``
    says a reserved publish finished. ``admit_stored`` checks the store hold of a
    session when the publish's turn comes, and ``store_refused`` sets one.
    """

    __slots__ = ("_clock", "_rate", "_stores", "inflight", "rate_hold", "store_hold")

    def __init__(
        self,
        clock: Clock,
        *,
        rate_hold: float | None = None,
        store_hold: float | None = None,
    ) -> None:
        self._clock = clock
        self.rate_hold = RATE_LIMIT_HOLD if rate_hold is None else rate_hold
        self.store_hold = STORE_HOLD if store_hold is None else store_hold
        self.inflight = 0
        """Publishes reserved and not yet released."""
        self._rate: tuple[str, str, float] | None = None  # session, entry id, until
        self._stores: dict[str, tuple[str, float]] | None = None  # session -> entry id, until

    def reserve(self, session_id: str, entry_id: str, limit: int) -> Refusal | None:
        """Admit a publish (it counts as running until ``release``), or say why not.

        A publish over ``limit`` running is refused ``RATE_LIMITED`` and holds the
        connection. The held publish itself (same session, same entry id: ids are unique
        per session only) ends the hold when it comes again.
        """
        held = self._rate  # the clock is read only when a hold is in question
        if held is not None and (held[:2] == (session_id, entry_id) or self._clock() >= held[2]):
            self._rate = held = None  # its retry came (or it never did)
        if held is None and self.inflight < limit:
            self.inflight += 1
            return None
        if held is None:
            held = self._rate = (session_id, entry_id, self._clock() + self.rate_hold)
            message = "too many publishes waiting on this connection"
        else:
            message = "an earlier publish of this connection was refused; send it again first"
        details = {"retry_after": RATE_LIMIT_RETRY_AFTER, "limit": limit}
        return Refusal(RATE_LIMITED, message, held[1], held[2], details)

    def release(self) -> None:
        """A publish ``reserve`` admitted has finished, stored or not."""
        self.inflight -= 1

    def admit_stored(self, session_id: str, entry_id: str) -> Refusal | None:
        """Refuse ``STORE_UNAVAILABLE`` a publish to a session behind one the store refused,
        until that one comes again or ``store_hold`` seconds passed."""
        hold = None if self._stores is None else self._stores.get(session_id)
        if hold is None:
            return None
        held, until = hold
        if held == entry_id or self._clock() >= until:
            self._forget_store_hold(session_id)  # its retry came (or it never did)
            return None
        message = (
            "an earlier publish of this connection to this session was not stored; "
            "send it again first"
        )
        return Refusal(STORE_UNAVAILABLE, message, held, until, {})

    def store_refused(self, session_id: str, entry_id: str) -> None:
        """The store refused this publish: hold the later ones to its session behind it
        (unless an earlier refused one already holds them)."""
        if self._stores is None:
            self._stores = {}
        self._stores.setdefault(session_id, (entry_id, self._clock() + self.store_hold))

    def store_held(self, session_id: str) -> str | None:
        """The entry id the connection's publishes to ``session_id`` wait behind, if any."""
        hold = None if self._stores is None else self._stores.get(session_id)
        return None if hold is None else hold[0]

    def rate_held(self) -> str | None:
        """The entry id the connection's publishes wait behind after ``RATE_LIMITED``."""
        return None if self._rate is None else self._rate[1]

    def _forget_store_hold(self, session_id: str) -> None:
        if self._stores is not None:
            self._stores.pop(session_id, None)
            if not self._stores:
                self._stores = None
