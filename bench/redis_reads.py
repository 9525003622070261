"""CPU per pub/sub message read through redis-py against ``relay.store._redis_wire.Wire``.

A subscriber process reads ``--messages`` messages that another process
publishes one at a time (0.5 ms apart, so each read is a wake-up of its own,
as a relay at a low rate sees them) and reports its CPU time per message:

    .venv/bin/python bench/redis_reads.py [--redis-url redis://127.0.0.1:6379/0]

Both readers deliver nothing: this is the cost of getting a message off the
socket, the part ``redis_wire`` replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import secrets
import subprocess
import sys
from typing import Any

from redis.asyncio.connection import Connection

from relay.store._redis import RedisStore
from relay.store._redis_live import connect
from relay.store._redis_wire import Wire, pack


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _publish(url: str, channel: str, count: int) -> None:
    conn = RedisStore(url).new_connection()
    await connect(conn)
    wire = Wire().adopt(conn)
    await asyncio.sleep(0.3)
    for i in range(count):
        await wire.request([("PUBLISH", channel, b'1 {"serial":%d,"d":"token"}' % i)])
        await asyncio.sleep(0.0005)
    await conn.disconnect(nowait=True)


async def _through_redis_py(conn: Connection, channel: str, count: int) -> float:
    await conn.send_command("SUBSCRIBE", channel)
    await conn.read_response()
    await conn.read_response()  # the first message starts the clock
    start = _cpu()
    for _ in range(count - 1):
        await conn.read_response()
    return (_cpu() - start) / (count - 1)


async def _through_wire(conn: Connection, channel: str, count: int) -> float:
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    seen = 0
    start = 0.0

    def on_reply(wire: Wire, reply: Any) -> None:
        nonlocal seen, start
        if reply[0] != b"message":
            return
        seen += 1
        if seen == 1:
            start = _cpu()
        elif seen == count:
            done.set_result((_cpu() - start) / (count - 1))

    wire = Wire(on_reply).adopt(conn)
    wire.write(pack([("SUBSCRIBE", channel)]))
    return await done


async def _measure(url: str, reader: str, count: int) -> float:
    channel = f"bench-reads-{secrets.token_hex(4)}"
    conn = RedisStore(url).new_connection()
    await connect(conn)
    read = _through_wire if reader == "wire" else _through_redis_py
    task = asyncio.create_task(read(conn, channel, count))
    await asyncio.sleep(0.1)
    command = [sys.executable, __file__, "--publish", channel, "--redis-url", url]
    publisher = subprocess.Popen([*command, "--messages", str(count)])
    try:
        return await task
    finally:
        publisher.wait()
        await conn.disconnect(nowait=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (2)")
    parser.add_argument("--publish", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        asyncio.run(_publish(args.redis_url, args.publish, args.messages))
        return
    for _ in range(args.rounds):
        for reader in ("redis-py", "wire"):
            used = asyncio.run(_measure(args.redis_url, reader, args.messages))
            print(f"{reader:8s} {used * 1e6:6.1f} us CPU per message, each its own wake-up")


if __name__ == "__main__":
    main()
