"""What this machine charges a process for half the load: the same work at two rates.

No relay here. A ticker process sends one byte over a socket pair ``rate`` times
a second, evenly spaced; the worker (another process) wakes on each in an
asyncio event loop, as a relay does, and does one unit of fixed Python work
(orjson round trips of an entry-sized dict, about 25 us). Its CPU time per
unit at the full rate and at half of it, alternating round by round, is what
a process on the machine pays per unit of work for being woken half as often.
``--companions N`` wakes N more processes on every tick, each doing
``--companion-units`` units (3) a wake: they share the cores with the worker
the way the load-generator processes share them with a relay, their work
growing and shrinking with the rate as a load generator's does.
The rates to try are the appends one node takes at the bench's fixed load
(sessions x tok/s: 2,000 a second) and half of it, because the per-node CPU
target compares a node of two, at half the load, with one node at the whole
load (``bench/README.md`` has what it gave).

    .venv/bin/python bench/fixed_work.py [--rates 2000,1000] [--seconds 3] [--rounds 2]
        [--companions 2] [--companion-units 3]

prints one line per measurement (``--json``: one JSON object for them all).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["compare", "measure", "unit"]

_ENTRY: dict[str, Any] = {
    "serial": 1,
    "id": "e" * 21,
    "kind": "response_append",
    "run_id": "r" * 21,
    "text": "1733331234567890",
    "meta": {"n": list(range(16))},
}
_QUIT = b"q"


def unit() -> None:
    """One unit of the fixed work: what a relay does to a small entry, a dozen times."""
    entry = _ENTRY
    for _ in range(12):
        entry = orjson.loads(orjson.dumps(entry))
        entry["serial"] += 1


def _tick(outs: Sequence[socket.socket], rate: float, seconds: float) -> None:
    """Send one byte to each of ``outs`` ``rate`` times a second for ``seconds``, on an
    absolute schedule."""
    period = 1.0 / rate
    at = time.monotonic()
    end = at + seconds
    while at < end:
        at += period
        wait = at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        for out in outs:
            out.send(b"x")
    for out in outs:
        out.send(_QUIT)
        out.close()


async def _work(sock: socket.socket) -> tuple[int, float]:
    """Do one unit per byte read until the ticker quits; (units, CPU seconds)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    units = 0

    def readable() -> None:
        nonlocal units
        data = sock.recv(65536)
        for byte in data or _QUIT:  # an empty read: the ticker's end closed the socket
            if byte == _QUIT[0]:
                if not done.done():
                    done.set_result(None)
                return
            unit()
            units += 1

    began = time.process_time()
    loop.add_reader(sock.fileno(), readable)
    try:
        await done
    finally:
        loop.remove_reader(sock.fileno())
    return units, time.process_time() - began


def _companion(sock: socket.socket, units: int) -> None:
    """Do ``units`` units per byte read until the ticker quits (no accounting)."""
    sock.setblocking(True)
    while True:
        data = sock.recv(65536)
        if not data or _QUIT in data:
            return
        for _ in range(len(data) * units):
            unit()


def _worker(sock: socket.socket, answer: Any) -> None:
    sock.setblocking(False)
    units, cpu = asyncio.run(_work(sock))
    answer.send((units, cpu))


def measure(
    rate: float, seconds: float, companions: int = 0, companion_units: int = 3
) -> dict[str, float]:
    """CPU microseconds per unit of a worker process woken ``rate`` times a second
    (beside ``companions`` processes woken alike, ``companion_units`` units a wake each)."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = socket.socketpair()
    receive, answer = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_worker, args=(ours, answer))
    pairs = [socket.socketpair() for _ in range(companions)]
    others = [ctx.Process(target=_companion, args=(a, companion_units)) for a, _ in pairs]
    for process in (worker, *others):
        process.start()
    for sock in (ours, *(a for a, _ in pairs)):
        sock.close()
    time.sleep(0.5)  # all are up and waiting (a spawned interpreter starts in ~0.1 s)
    _tick([theirs, *(b for _, b in pairs)], rate, seconds)
    for process in others:
        process.join(30)
        if process.is_alive():
            process.kill()
    if not receive.poll(seconds + 30):
        worker.kill()
        raise RuntimeError("the fixed-work worker did not answer")
    units, cpu = receive.recv()
    worker.join()
    if units == 0:
        raise RuntimeError("the fixed-work worker did no work")
    return {"rate": rate, "units": float(units), "cpu_s": cpu, "us_per_unit": 1e6 * cpu / units}


def compare(
    rates: Sequence[float],
    seconds: float,
    rounds: int,
    companions: int = 0,
    companion_units: int = 3,
) -> dict[str, Any]:
    """Each rate measured ``rounds`` times, alternating; the mean CPU per unit of each
    (``us_per_unit``, keyed by rate as text) and every measurement (``runs``)."""
    runs = [
        measure(rate, seconds, companions, companion_units) for _ in range(rounds) for rate in rates
    ]
    means = {}
    for rate in rates:
        mine = [r for r in runs if r["rate"] == rate]
        means[f"{rate:g}"] = sum(r["cpu_s"] for r in mine) * 1e6 / sum(r["units"] for r in mine)
    return {
        "seconds": seconds,
        "rounds": rounds,
        "companions": companions,
        "companion_units": companion_units,
        "us_per_unit": means,
        "runs": runs,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="2000,1000", help="wake-ups per second (2000,1000)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="measurements per rate")
    parser.add_argument(
        "--companions", type=int, default=0, help="processes woken alike beside the worker (0)"
    )
    parser.add_argument(
        "--companion-units", type=int, default=3, help="units each companion does a wake (3)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r]
    if not rates or min(rates) <= 0 or args.seconds <= 0 or args.rounds < 1:
        parser.error("rates and seconds must be positive, rounds at least 1")
    if args.companions < 0 or args.companion_units < 1:
        parser.error("companions must be 0 or more, companion units at least 1")
    result = compare(rates, args.seconds, args.rounds, args.companions, args.companion_units)
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    for run in result["runs"]:
        print(f"{run['rate']:8g}/s {run['us_per_unit']:7.1f} us CPU per unit", flush=True)
    first = result["us_per_unit"][f"{rates[0]:g}"]
    for rate in rates[1:]:
        here = result["us_per_unit"][f"{rate:g}"]
        print(f"{rate:g}/s over {rates[0]:g}/s: {here / first:.2f}x", flush=True)


if __name__ == "__main__":
    main()
