"""Append to a SQLite store until killed, printing ``serial entry_id`` as each append returns.

Used by the SIGKILL test in ``test_store_sqlite.py``: ``python sqlite_writer.py PATH``.
"""

from __future__ import annotations

import sys

import anyio

from relay.store._sqlite import SQLiteStore

WRITERS = 8


def body(entry_id: str) -> bytes:
    """The entry the writer stores under ``entry_id``."""
    return b'{"type":"message","id":"%s"}' % entry_id.encode()


async def main(path: str) -> None:
    store = SQLiteStore(path)
    await store.start()
    await store.open_channel("s")

    async def write(k: int) -> None:
        n = 0
        while True:
            entry_id = f"w{k}-{n}"
            appended = await store.append("s", entry_id, body(entry_id))
            sys.stdout.write(f"{appended.serial} {entry_id}\n")
            sys.stdout.flush()
            n += 1

    async with anyio.create_task_group() as tg:
        for k in range(WRITERS):
            tg.start_soon(write, k)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
