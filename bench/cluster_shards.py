"""How ``?shards=N`` spreads a Redis store's writes over the masters of a Cluster.

``python bench/cluster_shards.py`` starts a throwaway Redis Cluster (three masters,
three replicas, as the tests do: ``tests/redis_cluster.py``; needs ``redis-server``
and ``redis-cli``), or uses ``--url redis+cluster://...``. ``--sessions`` sessions
each append ``--tokens`` one-token entries, as fast as the acks come back, once per
shard count of ``--shards`` (default 1 and 3), alternating ``--rounds`` times.

It prints, per run: appends per second; this process's CPU per append (the relay's
side: the store runs in this process); the store's round trips per append; and each
master's share of the Redis CPU and commands the run cost (``INFO``, read before and
after). The busiest master bounds what a Cluster can write, so the figure to read is
``busiest_master_cpu_us_per_append``. Compare the rows of one run: the machine's load
moves absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relay.store import open_store
from relay.store._redis import RedisStore
from relay.store._redis_shards import ShardedRedisStore


def _masters(url: str) -> list[tuple[str, int]]:
    host, _, port = url.split("://", 1)[1].split("?")[0].split("/")[0].rpartition(":")
    with Redis(host=host or "127.0.0.1", port=int(port)) as client:
        slots = client.execute_command("CLUSTER", "SLOTS")
    found = set()
    for slot_range in slots:
        master = slot_range[2]
        name = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
        found.add((name or host, int(master[1])))
    return sorted(found)


def _usage(node: tuple[str, int]) -> tuple[float, int]:
    """A master's CPU seconds (user + system) and commands processed, so far."""
    with Redis(host=node[0], port=node[1]) as client:
        cpu: Any = client.info("cpu")
        stats: Any = client.info("stats")
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"], int(stats["total_commands_processed"])


async def measure(url: str, shards: int, sessions: int, tokens: int) -> dict[str, Any]:
    sep = "&" if "?" in url else "?"
    prefix = f"bs{secrets.token_hex(4)}:"
    store = open_store(f"{url}{sep}shards={shards}&prefix={prefix}&linger_ms=0")
    assert isinstance(store, RedisStore | ShardedRedisStore)
    await store.start()
    masters = _masters(url)

    async def one(session_id: str) -> None:
        await store.open_channel(session_id)
        for n in range(tokens):
            await store.append(session_id, f"e{n}", b'{"type":"delta","text":"tok "}')

    before = [_usage(m) for m in masters]
    trips = store.round_trips
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*[one(f"s{i}") for i in range(sessions)])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    trips = store.round_trips - trips
    after = [_usage(m) for m in masters]
    await store.aclose()
    for node in masters:  # leave no keys behind
        with Redis(host=node[0], port=node[1]) as client:
            for key in list(client.scan_iter(match="{" + prefix + "*", count=1000)):
                client.delete(key)
    count = sessions * tokens
    redis_cpu = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
    commands = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
    return {
        "shards": shards,
        "appends": count,
        "appends_per_s": round(count / wall),
        "relay_cpu_us_per_append": round(cpu / count * 1e6, 1),
        "round_trips_per_append": round(trips / count, 3),
        "busiest_master_cpu_us_per_append": round(max(redis_cpu) / count * 1e6, 1),
        "all_masters_cpu_us_per_append": round(sum(redis_cpu) / count * 1e6, 1),
        "master_cpu_shares": [round(c / max(sum(redis_cpu), 1e-9), 2) for c in redis_cpu],
        "master_command_shares": [round(c / max(sum(commands), 1), 2) for c in commands],
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a redis+cluster:// URL; default: start a Cluster")
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--shards", default="1,3", help="shard counts to compare")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from tests.redis_cluster import cluster_url

    with cluster_url(args.url) as url:
        for _ in range(args.rounds):
            for shards in [int(n) for n in args.shards.split(",")]:
                result = await measure(url, shards, args.sessions, args.tokens)
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
