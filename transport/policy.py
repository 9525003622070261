"""Who may do what in a session, and the relay-wide settings the Run rules use (no I/O).

A token grants capabilities per session-id pattern (see ``relay.auth``). The
relay passes the Run rules (``transport.runs``) a ``Sender`` that carries the
sender's capabilities in the session at hand. ``SlotBook`` counts the Runs
that hold a slot of the relay's ``max_concurrent_runs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ._run_record import RunRecord
from .frames import Multitask, ThreadAccess

__all__ = [
    "AGENT",
    "CANCEL",
    "CANCEL_ANY",
    "CAPABILITIES",
    "PUBLISH",
    "RELAY",
    "STEER",
    "SUBSCRIBE",
    "Policy",
    "Sender",
    "SlotBook",
]

SUBSCRIBE = "subscribe"
PUBLISH = "publish"
STEER = "steer"
CANCEL = "cancel"
CANCEL_ANY = "cancel-any"
AGENT = "agent"
CAPABILITIES: frozenset[str] = frozenset({SUBSCRIBE, PUBLISH, STEER, CANCEL, CANCEL_ANY, AGENT})
"""What a token may grant per session-id pattern."""


@dataclass(frozen=True, slots=True)
class Sender:
    """Who publishes: stamped from the connection, never from the frame.

    ``caps`` are the sender's capabilities for the session at hand; ``None``
    means every right (an anonymous relay). The relay itself has every right.
    """

    client_id: str
    user_id: str | None = None
    role: Literal["client", "agent", "relay"] = "client"
    caps: frozenset[str] | None = None

    def can(self, capability: str) -> bool:
        """True if the sender holds ``capability`` for the session."""
        return self.role == "relay" or self.caps is None or capability in self.caps


RELAY = Sender(client_id="relay", role="relay")


@dataclass(frozen=True)
class Policy:
    """The relay-wide defaults the rules use (every relay node must use the same)."""

    multitask: Multitask = "alongside"
    """The strategy of a prompt that names none."""
    thread_access: ThreadAccess = "own"
    """Whether a session whose first prompt says nothing is shared."""
    max_run_seconds: float | None = None
    """The longest a Run may stay active from a start (None: no limit); an agent's
    shorter ``timeout`` wins."""


Key = tuple[str, str]


class SlotBook:
    """Runs holding a slot of one relay's ``max_concurrent_runs`` (no limit: ``None``).

    A Run holds a slot while it is running (``pending`` or ``active``); a
    queued or suspended Run holds none. A suspended Run takes one again when it
    resumes, and waits for one to be free. If a cancel stands, it resumes at
    once to end instead, holding a slot past the limit if none is free.
    Registries share one book: ``plan`` holds a slot for the Run it starts (so
    two sessions planning at once cannot both take the last one), ``apply`` /
    ``abandon`` / ``reload`` settle it.
    """

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError("max_concurrent_runs must be at least 1")
        self.limit = limit
        self._held: set[Key] = set()

    @property
    def in_use(self) -> int:
        """How many slots are held."""
        return len(self._held)

    def free(self) -> bool:
        """True if a new Run may take a slot."""
        return self.limit is None or len(self._held) < self.limit

    def available(self) -> int | None:
        """How many slots are free (``None``: no limit)."""
        if self.limit is None:
            return None
        return max(0, self.limit - len(self._held))

    def hold(self, key: Key) -> None:
        """Take a slot for ``(session_id, run_id)``."""
        self._held.add(key)

    def sync(self, records: Iterable[RunRecord]) -> None:
        """Hold slots for the records running, release them for the rest."""
        for record in records:
            key = (record.session_id, record.run_id)
            if record.going_on:
                self._held.add(key)
            else:
                self._held.discard(key)

    def replace_session(self, session_id: str, records: Iterable[RunRecord]) -> None:
        """Forget the session's slots, then hold those of ``records`` running."""
        self._held = {k for k in self._held if k[0] != session_id}
        self.sync(records)
