"""Agent presence in Redis, and the AGENT_LOST sweep's questions about it.

The relay nodes mark the agents connected to them present until a deadline, on
Redis's clock, everywhere or in the sessions some patterns match
(``mark_present``). The sweep asks which owners of active Runs have been past
their deadlines for a grace period (``gone_and_lost``): one script, whose work
follows the agents that left rather than the Runs running. ``relay._cluster``
drives the sweep; this module only reads and writes the keys.

See docs/explanation/stores.md for the keys and the scripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transport._codec import dumps, loads

from ._redis_keys import RedisKeys
from ._redis_lua import evalsha
from ._redis_pipeline import Pipeline, check

__all__ = ["GoneOwners", "Presence"]


@dataclass(frozen=True)
class GoneOwners:
    """What one AGENT_LOST sweep found (``RedisStore.gone_and_lost``)."""

    runs: dict[str, list[tuple[str, str]]]
    """Per owner gone past the grace, the Runs (session id, run id) it still owns there."""
    lost: list[tuple[str, str, str]]
    """Of those, the Runs Redis has no record of (owner, session id, run id)."""


class Presence:
    """The agents' presence and the sweep's queries, on a store's keys and pipeline."""

    def __init__(self, keys: RedisKeys, pipeline: Pipeline) -> None:
        self._keys = keys
        self._pipeline = pipeline

    async def mark_present(
        self,
        client_ids: Sequence[str],
        ttl: float,
        *,
        scoped: Sequence[tuple[str, Sequence[str]]] = (),
    ) -> None:
        """Count the agents ``client_ids`` present in every session, and those of
        ``scoped`` (client id, session-id patterns) present in the sessions their patterns
        match, until ``ttl`` seconds from now. One round trip (a script per 1,000)."""
        ttl_ms = str(max(1, round(ttl * 1000)))
        keys = [self._keys.presence, self._keys.scoped_presence]
        ids = list(client_ids)
        pairs = [(client_id, self.scope_member(client_id, p)) for client_id, p in scoped]
        commands = []
        for i in range(0, max(len(ids), len(pairs)), 1000):
            chunk = ids[i : i + 1000]
            args: list[Any] = [ttl_ms, str(len(chunk)), *chunk]
            for client_id, member in pairs[i : i + 1000]:
                args += [client_id, member]
            commands.append(evalsha("present", keys, args))
        for reply in await self._pipeline.call(*commands) if commands else []:
            check(reply)

    @staticmethod
    def scope_member(client_id: str, patterns: Sequence[str]) -> bytes:
        """An agent's member of ``scoped_presence_key``: present where ``patterns`` match."""
        return dumps([client_id, sorted(set(patterns))])

    async def gone_owners(
        self, grace: float, *, limit: int = 1000
    ) -> dict[str, list[tuple[str, str]]]:
        """The owners absent for ``grace`` seconds past a presence deadline (everywhere, or
        in some sessions: ``mark_present``). Each comes with the Runs it still owns
        (session id, run id) in sessions where no deadline of it is that recent. For
        those left owning nothing so, what lapsed is forgotten. At most ``limit`` owners,
        oldest deadline first; an owner returned moves behind the others (its lapsed
        deadlines become ``grace`` ago, so it is still gone), so owners whose Runs' ends
        keep failing do not take every pass's places for ever.

        One round trip, whatever the number of active Runs: the work follows the
        agents that left, not the Runs under way.
        """
        return (await self.gone_and_lost(grace, limit=limit)).runs

    async def gone_and_lost(self, grace: float, *, limit: int = 1000) -> GoneOwners:
        """``gone_owners``, and which of the Runs it returns Redis has no record of
        (``GoneOwners.lost``): Redis evicted or lost them while their owner's set still
        names them. Drop those with ``forget_lost`` once the hub had its try at ending
        them (a node that has the session loaded still knows the Run, and its end writes
        the record again). The same one round trip as ``gone_owners``."""
        args = [
            str(max(0, round(grace * 1000))),
            self._keys.owner(""),
            self._keys.prefix,
            str(limit),
        ]
        keys = [self._keys.presence, self._keys.scoped_presence]
        (reply,) = await self._pipeline.call(evalsha("gone", keys, args))
        check(reply)
        found = GoneOwners({}, [])
        for owner, members, lost in zip(reply[::3], reply[1::3], reply[2::3], strict=True):
            client_id = owner.decode()
            runs = found.runs[client_id] = []
            for member in members:
                session_id, run_id = loads(member)
                runs.append((session_id, run_id))
            for member in lost:
                session_id, run_id = loads(member)
                found.lost.append((client_id, session_id, run_id))
        return found

    async def forget_lost(self, lost: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Drop from their owners' sets the Runs of ``lost`` (owner, session id, run id)
        whose record is still not in Redis (``GoneOwners.lost``): the sweep would return
        them for ever, and keep their owners, since the hub finds no such Run. A Run whose
        record is there (its end was stored meanwhile, or it was never lost) is left alone.
        The ones dropped. One round trip (a script per 500)."""
        commands = []
        for i in range(0, len(lost), 500):
            args: list[Any] = [self._keys.owner(""), self._keys.prefix]
            for owner, session_id, run_id in lost[i : i + 500]:
                args += [owner, dumps([session_id, run_id])]
            commands.append(evalsha("forget_lost", [], args))
        dropped: list[tuple[str, str, str]] = []
        for reply in await self._pipeline.call(*commands) if commands else []:
            check(reply)
            for owner, member in zip(reply[::2], reply[1::2], strict=True):
                session_id, run_id = loads(member)
                dropped.append((owner.decode(), session_id, run_id))
        return dropped

    async def absent_from_now(self) -> int:
        """Restart the absence of owners whose deadline has passed: from now, as if they
        had just been marked for the last time. How many there were."""
        keys = [self._keys.presence, self._keys.scoped_presence]
        (reply,) = await self._pipeline.call(evalsha("absent_from_now", keys, []))
        check(reply)
        return int(reply)

    async def index_owners(self) -> int:
        """Put every active Run in its owner's set if it is not (Runs written by an earlier
        version); how many were added. The append script keeps the sets after that."""
        (members,) = await self._pipeline.call(("SMEMBERS", self._keys.status("active")))
        check(members)
        members = list(members)
        added = 0
        for i in range(0, len(members), 500):
            args = [self._keys.owner(""), self._keys.prefix, *members[i : i + 500]]
            (reply,) = await self._pipeline.call(evalsha("own", [self._keys.presence], args))
            check(reply)
            added += int(reply)
        return added
