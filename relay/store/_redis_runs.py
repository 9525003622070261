"""Run records in Redis: a session's Runs, the status index and the dispatch streams.

A session's Run records are a hash (run id -> record) and a list of run ids in
the order first written. The append script writes them with their entry, and
with them the status index and the agents' dispatch streams. This module reads
them back: ``runs`` mends a list that Redis lost in part, ``runs_with_status``
reads the index, and ``requeue`` and ``ack_dispatch`` move a dispatch.

See docs/explanation/stores.md for the keys and what Redis may lose.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transport._codec import loads
from transport._runs import RunRecord
from transport.errors import RunwireError

from ._redis_keys import RedisKeys
from ._redis_lua import INDEXED, STATUSES, evalsha
from ._redis_pipeline import Pipeline, check

__all__ = ["RunIndex"]

log = logging.getLogger("runwire.relay.store")

_WARNED = 10_000
"""Sessions remembered as warned of (the set starts over when full)."""


def _by_creation(listed: list[RunRecord], missing: list[RunRecord]) -> list[RunRecord]:
    """``listed`` in its order, with each of ``missing`` before the first of them created
    after it (``seq``, then ``created_ts``; ``missing`` among themselves by those, then by
    run id): the order the Runs were first written in, when ``listed`` was."""
    missing = sorted(missing, key=lambda r: (_created(r), r.run_id))
    found: list[RunRecord] = []
    at = 0
    for record in listed:
        while at < len(missing) and _created(missing[at]) < _created(record):
            found.append(missing[at])
            at += 1
        found.append(record)
    found.extend(missing[at:])
    return found


def _created(record: RunRecord) -> tuple[int, int]:
    """When a Run was made: its place among its session's (``seq``), then its stamp."""
    return record.seq, record.created_ts


class RunIndex:
    """Reads of Run records, and the dispatch streams, on a store's keys and pipeline."""

    def __init__(self, keys: RedisKeys, pipeline: Pipeline, where: str) -> None:
        self._keys = keys
        self._pipeline = pipeline
        self._where = where
        self._unordered: set[str] = set()  # sessions warned of as missing Runs from ``order``
        self.maxmemory_policy: str | None = None
        """Redis's ``maxmemory-policy``, as the store read it at start (for the warning)."""

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Every Run record of a session, in the order they were first written.

        One round trip reads the ``order`` list and the ``runs`` hash. Every record of
        the hash is listed. Those the list names come in its order, each once: a record
        written again after Redis lost the hash is on the list twice. Any it does not
        name, because Redis lost the list or part of it, go where their creation puts
        them (``seq``, then ``created_ts``, then run id). Only then is the list mended
        (``mend_order``, one more round trip) and a warning logged, once per session
        on this node.
        """
        keys = self._keys.session(session_id)
        order, flat = await self._pipeline.call(("LRANGE", keys[4], 0, -1), ("HGETALL", keys[3]))
        check(order)
        check(flat)
        records = dict(zip(flat[::2], flat[1::2], strict=True))
        listed = [
            RunRecord.from_dict(loads(records[r])) for r in dict.fromkeys(order) if r in records
        ]
        if len(listed) == len(records):
            return listed
        named = {r.run_id for r in listed}
        missing = [
            RunRecord.from_dict(loads(raw))
            for run_id, raw in records.items()
            if run_id.decode() not in named
        ]
        found = _by_creation(listed, missing)
        mended = await self.mend_order(session_id, len(order), [r.run_id for r in found])
        if session_id not in self._unordered:
            if len(self._unordered) >= _WARNED:
                self._unordered.clear()
            self._unordered.add(session_id)
            log.warning(
                "Redis at %s lost the Run order of session %r: %d of its %d Run records were "
                "not in its order list (evicted under a maxmemory-policy other than "
                "noeviction, this Redis has %s; or restored in part, or deleted): listed "
                "where their creation puts them, and the list %s",
                self._where,
                session_id,
                len(missing),
                len(records),
                self.maxmemory_policy or "unknown",
                "mended" if mended else "left to mend at a later read",
            )
        return found

    async def mend_order(self, session_id: str, read: int, run_ids: list[str]) -> bool:
        """Write a session's ``order`` list anew as ``run_ids``, unless it changed since it
        was read ``read`` long (a Run made meanwhile: a later read mends it). True if it
        did. A failure (Redis refusing writes, or away) is no failure of the read."""
        keys = self._keys.session(session_id)
        try:
            (reply,) = await self._pipeline.call(evalsha("mend_order", keys[3:5], [read, *run_ids]))
            check(reply)
        except RunwireError as exc:
            log.debug("mending the Run order of session %r failed: %s", session_id, exc)
            return False
        return bool(reply)

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One Run record of a session, or None: one ``HGET``, however many Runs it has."""
        (found,) = await self._pipeline.call(("HGET", self._keys.session(session_id)[3], run_id))
        check(found)
        return None if found is None else RunRecord.from_dict(loads(found))

    async def runs_with_status(
        self, statuses: Sequence[str], *, agent: str | None = None
    ) -> list[RunRecord]:
        """Run records of any session with one of ``statuses`` (and ``agent``, if given).

        ``queued`` to ``suspended`` are read from their index sets; the terminal
        statuses have none (an index of every Run that ever ended would only grow),
        so asking for them scans every session's Runs: the relay never does.
        """
        wanted = [status for status in dict.fromkeys(statuses) if status in STATUSES]
        indexed = [status for status in wanted if status in INDEXED]
        found = await self._indexed_runs(indexed, agent) if indexed else []
        if len(indexed) < len(wanted):
            ended = set(wanted) - set(indexed)
            found += [r for r in await self._all_runs(agent) if r.status in ended]
        return found

    async def _indexed_runs(self, wanted: list[str], agent: str | None) -> list[RunRecord]:
        replies = await self._pipeline.call(*[("SMEMBERS", self._keys.status(s)) for s in wanted])
        sessions: dict[str, list[tuple[str, bytes]]] = {}
        for reply in replies:
            check(reply)
            for member in reply:
                session_id, run_id = loads(member)
                sessions.setdefault(session_id, []).append((run_id, member))
        if not sessions:
            return []
        replies = await self._pipeline.call(
            *[
                ("HMGET", self._keys.session(session_id)[3], *[run_id for run_id, _ in runs])
                for session_id, runs in sessions.items()
            ]
        )
        found: list[RunRecord] = []
        stale: list[bytes] = []
        for (_, runs), values in zip(sessions.items(), replies, strict=True):
            check(values)
            for (_, member), value in zip(runs, values, strict=True):
                if value is None:  # the session expired (history_ttl)
                    stale.append(member)
                    continue
                record = RunRecord.from_dict(loads(value))
                if record.status in wanted and (agent is None or record.agent == agent):
                    found.append(record)
        if stale:
            await self._pipeline.call(*[("SREM", self._keys.status(s), *stale) for s in wanted])
        return found

    async def _all_runs(self, agent: str | None) -> list[RunRecord]:
        """Every Run record of every session under this prefix (``SCAN`` of the runs hashes)."""
        pattern = self._keys.all_runs
        found: list[RunRecord] = []
        cursor = b"0"
        while True:
            (reply,) = await self._pipeline.call(("SCAN", cursor, "MATCH", pattern, "COUNT", 1000))
            check(reply)
            cursor, keys = reply
            if keys:
                for values in await self._pipeline.call(*[("HVALS", key) for key in keys]):
                    check(values)
                    records = [RunRecord.from_dict(loads(v)) for v in values]
                    found += [r for r in records if agent is None or r.agent == agent]
            if cursor == b"0":
                return found

    async def requeue(
        self, session_id: str, run_id: str, agent: str, entry_id: str, group: str
    ) -> None:
        """Give back a dispatch a node took: ``entry_id`` on the agent's stream, read by
        ``group``. The Run gets a new entry at the stream's end if it still waits on
        that one. The old entry is acknowledged and deleted either way."""
        keys = [self._keys.session(session_id)[0], self._keys.dispatch_stream(agent)]
        (reply,) = await self._pipeline.call(
            evalsha("requeue", keys, [run_id, entry_id, session_id, group])
        )
        check(reply)

    async def ack_dispatch(self, agent: str, group: str, entry_id: str) -> None:
        """Acknowledge (for ``group``) and delete ``entry_id`` on the agent's dispatch stream.

        On the store's one command connection, like every other call: a thousand Runs
        starting at once share its round trips rather than open a connection each.
        """
        stream = self._keys.dispatch_stream(agent)
        for reply in await self._pipeline.call(
            ("XACK", stream, group, entry_id), ("XDEL", stream, entry_id)
        ):
            check(reply)
