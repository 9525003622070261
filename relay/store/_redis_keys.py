"""The names of ``RedisStore``'s keys, and the arguments its scripts take per Run record.

Keys live under a prefix (``rw:`` by default). Every key of a session carries
the session as a hash tag, ``rw:{<session>}:meta`` and so on, so a session's keys
share one hash slot. The status index, the agents' dispatch streams, the owners'
sets and the presence are keys of the prefix alone. In Cluster mode the prefix is
itself a hash tag, ``{rw:}``, so every key of the store shares one slot. A sharded
store is several such stores, each with a prefix of its own.

See docs/explanation/stores.md for what each key holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transport._codec import dumps
from transport._runs import RunRecord
from transport.errors import VALIDATION_ERROR, RunwireError

from ._redis_lua import INDEXED, STATUSES

__all__ = ["SESSION_KEYS", "RedisKeys", "glob_escape"]

SESSION_KEYS = ("meta", "log", "ids", "runs", "order")
"""A session's keys, in the order the scripts take them (``KEYS[1]`` to ``KEYS[5]``)."""

_CACHED = 10_000
"""Sessions whose key names are kept (the cache starts over when full)."""


def glob_escape(text: str) -> str:
    """``text`` matched literally in a ``SCAN MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisKeys:
    """The key names of one store prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.presence = prefix + "presence"
        """The agents' presence: a sorted set, client id -> deadline (ms, Redis's clock)."""
        self.scoped_presence = prefix + "scoped"
        """The agents' presence in some sessions only: a sorted set, ``scope_member`` ->
        deadline (ms, Redis's clock); each client id's members also in ``scopes``."""
        self.run_keys = [self.status(status) for status in INDEXED]
        """The keys an append that writes Run records takes after the session's: the
        status index sets, then the presence."""
        self.run_keys.append(self.presence)
        self._sessions: dict[str, list[str]] = {}

    def session(self, session_id: str) -> list[str]:
        """The session's keys, as ``SESSION_KEYS`` names them."""
        keys = self._sessions.get(session_id)
        if keys is None:
            if len(self._sessions) >= _CACHED:
                self._sessions.clear()
            base = f"{self.prefix}{{{session_id}}}:"
            keys = [base + name for name in SESSION_KEYS]
            self._sessions[session_id] = keys
        return keys

    def forget(self, session_id: str) -> None:
        """Drop the session's names from the cache."""
        self._sessions.pop(session_id, None)

    def live_channel(self, session_id: str) -> bytes:
        """The pub/sub channel a session's entries are published on."""
        return f"{self.prefix}{{{session_id}}}:live".encode()

    @property
    def all_runs(self) -> str:
        """A ``SCAN MATCH`` pattern for every session's ``runs`` hash."""
        return glob_escape(self.prefix) + "{*}:runs"

    def status(self, status: str) -> str:
        """The index set of the Runs with ``status``."""
        return f"{self.prefix}status:{status}"

    def key(self, *parts: str) -> str:
        """A key under the prefix for node coordination (``<prefix>a:b``)."""
        return self.prefix + ":".join(parts)

    def dispatch_stream(self, agent: str) -> str:
        """The stream of an agent's Runs waiting for a worker (``<prefix>agent:<name>:runs``)."""
        return self.key("agent", agent, "runs")

    @property
    def dispatch_streams(self) -> str:
        """A ``SCAN MATCH`` pattern for every agent's dispatch stream (and nothing else)."""
        return glob_escape(self.key("agent", "")) + "*:runs"

    def scopes(self, client_id: str) -> str:
        """The set of an agent's members of ``scoped_presence``."""
        return self.prefix + "scopes:" + client_id

    def owner(self, owner: str) -> str:
        """The set of an owner's active Runs (members as in the status index)."""
        return self.prefix + "owns:" + owner

    def run_args(self, session_id: str, runs: Sequence[RunRecord]) -> list[Any]:
        """The append script's arguments for ``runs``, seven per record.

        Raises ``RunwireError(VALIDATION_ERROR)`` for a record of another session.
        """
        args: list[Any] = []
        for record in runs:
            if record.session_id != session_id:
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"Run {record.run_id!r} of {record.session_id!r} written with {session_id!r}",
                )
            args += [
                record.run_id,
                str(STATUSES.index(record.status) + 1),
                dumps(record.to_dict()),
                dumps([session_id, record.run_id]),
                self.dispatch_stream(record.agent),
                record.owner or "",
                self.owner(record.owner or ""),
            ]
        return args
