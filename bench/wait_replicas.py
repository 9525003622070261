"""What ``?wait_replicas=1`` costs an append on a Redis Cluster (and without it).

``python bench/wait_replicas.py`` starts a throwaway Redis Cluster (three
masters, three replicas, as the tests do: ``tests/redis_cluster.py``; needs
``redis-server`` and ``redis-cli``), or uses ``--url redis+cluster://...``, and
has ``--sessions`` sessions append ``--tokens`` one-token entries each, every
session paced at ``--rate`` appends a second (0: as fast as the acks come
back), once with ``wait_replicas=0`` and once with ``=1``, alternating
``--rounds`` times. It prints, per setting, the process's CPU time per append
(the relay's side: the store runs in this process), appends per second, and
append latency (call to acknowledgement) p50 and p99. ``--linger-ms`` sets
the store's linger (0 by default here, see its help). Compare the two in one
run: the machine's load moves absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relay.store._redis import RedisStore


async def measure(
    url: str, wait: int, sessions: int, tokens: int, rate: float, linger_ms: float
) -> dict[str, float]:
    sep = "&" if "?" in url else "?"
    options = f"wait_replicas={wait}&linger_ms={linger_ms}"
    store = RedisStore(f"{url}{sep}{options}", prefix=f"wb{secrets.token_hex(4)}:")
    await store.start()
    latencies: list[float] = []

    async def one(session_id: str) -> None:
        await store.open_channel(session_id)
        start = time.perf_counter()
        for n in range(tokens):
            if rate:
                due = start + n / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            t = time.perf_counter()
            await store.append(session_id, f"e{n}", b'{"type":"delta","text":"tok "}')
            latencies.append(time.perf_counter() - t)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*[one(f"s{i}") for i in range(sessions)])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await store.aclose()
    latencies.sort()
    count = len(latencies)
    return {
        "wait_replicas": wait,
        "appends": count,
        "cpu_us_per_append": cpu / count * 1e6,
        "appends_per_s": count / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(count * 0.99) - 1] * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a redis+cluster:// (or redis://) URL; default: start one")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument(
        "--rate", type=float, default=20.0, help="appends/s per session; 0: flat out"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=0.0,
        help="the store's linger_ms (default 0 here: a WAIT doubles the commands queued, "
        "which ends the default 2 ms linger sooner and would flatter wait_replicas=1)",
    )
    args = parser.parse_args()
    from tests.redis_cluster import cluster_url

    with cluster_url(args.url) as url:
        for _ in range(args.rounds):
            for wait in (0, 1):
                result = await measure(
                    url, wait, args.sessions, args.tokens, args.rate, args.linger_ms
                )
                print(json.dumps({k: round(v, 2) for k, v in result.items()}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
