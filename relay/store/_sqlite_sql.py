"""The SQL of ``SQLiteStore``: its statements, and the reads it runs on its background thread.

Every function takes the connection to use and runs on the caller's thread.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence

from transport._codec import loads
from transport._runs import RunRecord

from ._base import Appended, ChannelInfo, StoredEntry

__all__ = [
    "DEDUP_WINDOW",
    "INSERT_ENTRY",
    "SELECT_HEAD",
    "UPSERT_RUN",
    "load_channel",
    "select_entries",
    "select_id",
    "select_runs",
    "select_serial",
]

DEDUP_WINDOW = 10_000
"""How many of a channel's newest entry ids ``find`` answers from memory."""

INSERT_ENTRY = (
    "INSERT INTO entries (session_id, serial, entry_id, data) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (session_id, entry_id) DO NOTHING"
)
SELECT_HEAD = "SELECT COALESCE(MAX(serial), 0) FROM entries WHERE session_id = ?"
UPSERT_RUN = (
    "INSERT INTO runs (session_id, run_id, record, status, agent) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, run_id) DO UPDATE SET"
    " record = excluded.record, status = excluded.status, agent = excluded.agent"
)


def load_channel(
    conn: sqlite3.Connection, session_id: str
) -> tuple[ChannelInfo, list[tuple[str, int]], bool]:
    """A channel (its row inserted if new), its newest ``DEDUP_WINDOW`` ids, oldest first,
    and whether it was new."""
    select_epoch = "SELECT epoch FROM channels WHERE session_id = ?"
    conn.execute("BEGIN")
    try:
        found = conn.execute(select_epoch, (session_id,)).fetchone()
        first, last = conn.execute(
            "SELECT COALESCE(MIN(serial), 0), COALESCE(MAX(serial), 0)"
            " FROM entries WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        rows = conn.execute(
            "SELECT entry_id, serial FROM entries WHERE session_id = ?"
            " ORDER BY serial DESC LIMIT ?",
            (session_id, DEDUP_WINDOW),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    created = found is None
    if created:  # a new channel (unless another store just made it: keep its epoch)
        conn.execute(
            "INSERT INTO channels (session_id, epoch) VALUES (?, ?)"
            " ON CONFLICT (session_id) DO NOTHING",
            (session_id, secrets.token_hex(8)),
        )
        found = conn.execute(select_epoch, (session_id,)).fetchone()
    ids = [(str(entry_id), int(serial)) for entry_id, serial in reversed(rows)]
    return ChannelInfo(session_id, str(found[0]), int(first), int(last)), ids, created


def select_id(conn: sqlite3.Connection, session_id: str, entry_id: str) -> Appended | None:
    row = conn.execute(
        "SELECT serial, data FROM entries WHERE session_id = ? AND entry_id = ?",
        (session_id, entry_id),
    ).fetchone()
    return None if row is None else Appended(int(row[0]), bytes(row[1]), duplicate=True)


def select_serial(conn: sqlite3.Connection, session_id: str, serial: int) -> Appended | None:
    row = conn.execute(
        "SELECT data FROM entries WHERE session_id = ? AND serial = ?", (session_id, serial)
    ).fetchone()
    return None if row is None else Appended(serial, bytes(row[0]), duplicate=True)


def select_entries(
    conn: sqlite3.Connection, session_id: str, after: int | None, before: int | None, limit: int
) -> list[StoredEntry]:
    where = "session_id = ?"
    params: list[object] = [session_id]
    if after is not None:
        where += " AND serial > ?"
        params.append(after)
    if before is not None:
        where += " AND serial < ?"
        params.append(before)
    order = "ASC" if after is not None else "DESC"
    rows = conn.execute(
        f"SELECT serial, data FROM entries WHERE {where} ORDER BY serial {order} LIMIT ?",
        (*params, limit),
    )
    entries = [StoredEntry(int(serial), bytes(data)) for serial, data in rows]
    return entries if after is not None else entries[::-1]


def select_runs(conn: sqlite3.Connection, where: str, params: Sequence[str]) -> list[RunRecord]:
    rows = conn.execute(f"SELECT record FROM runs WHERE {where} ORDER BY rowid", params)
    return [RunRecord.from_dict(loads(record)) for (record,) in rows]
