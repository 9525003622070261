"""The reconnect policy of an SDK's connection: when it tries again, and when it gives up.

A connection to the relay drops now and then. ``ReconnectPolicy`` decides what happens next:
try again after a backoff, try again at once after a relay restart, or give up for good. It
also says when to ask the token provider for a fresh token.

The policy does no I/O and reads no clock. Every time is an argument, and the jitter of its
backoff comes from a function passed in. ``transport.asyncio._connection.Connection`` drives
it. Which publishes go again after a reconnect, and in which order, is the publish lane's
part (``transport._lane.PublishLane.resend``). The reasons are in
docs/explanation/publish-lane.md.
"""

from __future__ import annotations

from collections.abc import Callable

from ._lane import backoff
from .errors import TOKEN_EXPIRED, UNAUTHORIZED

__all__ = ["EXPIRED_RETRIES", "ReconnectPolicy"]

EXPIRED_RETRIES = 3
"""Tokens in a row the relay may refuse as expired before the connection gives up."""


class ReconnectPolicy:
    """When a connection tries again, without I/O.

    The driver calls ``start`` before each try, ``ended`` when a connected socket closed
    as usual, ``failed`` when a try raised an error of the protocol, and ``next_try_at``
    before it waits to try again.
    """

    def __init__(
        self,
        *,
        jitter: Callable[[], float],
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        token_provider: bool = False,
    ) -> None:
        self.backoff_initial = backoff_initial
        """Seconds at most before the first try again; it doubles after each failed try."""
        self.backoff_max = backoff_max
        """The longest wait between two tries."""
        self.token_provider = token_provider
        """True when the connection can ask for a fresh token."""
        self._jitter = jitter
        self._attempt = 0  # tries that failed since the last connect that got through
        self._tries = 0  # tries so far
        self._expired = 0  # tokens refused as expired since the last connect that got through

    def start(self, has_token: bool) -> bool:
        """A try starts. Returns True when the driver asks the provider for a token first.

        It does before every try but a first one that already has a token."""
        fresh = self.token_provider and (self._tries > 0 or not has_token)
        self._tries += 1
        return fresh

    def ended(self) -> None:
        """A socket that was up closed as usual: the backoff starts again from the start."""
        self._attempt = 0

    def failed(self, code: str, *, welcomed: bool, started: bool) -> bool:
        """A try ended with the error ``code``. Returns True when the connection gives up.

        ``welcomed``: the relay welcomed this try before the error. ``started``: an earlier
        try got through, so the connection is in use. ``UNAUTHORIZED`` is final. So is
        ``TOKEN_EXPIRED`` without a token provider, or after ``EXPIRED_RETRIES`` fresh
        tokens in a row. Before the first try got through, any other error is final too.
        """
        if welcomed:
            self._expired = self._attempt = 0
        if code == TOKEN_EXPIRED:
            self._expired += 1
        final = code == UNAUTHORIZED or (
            code == TOKEN_EXPIRED and (not self.token_provider or self._expired > EXPIRED_RETRIES)
        )
        return final or (not started and code != TOKEN_EXPIRED)

    def next_try_at(self, now: float, *, restarting: bool) -> float:
        """When the next try goes, the last one having ended at ``now``.

        After a 1012 close (``restarting``) the first try goes at once, since the relay
        restarts and a load balancer sends it elsewhere. Otherwise, and should that try
        fail, the wait is a backoff from ``backoff_initial`` that doubles up to
        ``backoff_max``, with jitter: between half of it and all of it.
        """
        attempt = self._attempt
        self._attempt += 1
        if restarting and attempt == 0:
            return now
        return now + backoff(self.backoff_initial, self.backoff_max, attempt, self._jitter())
