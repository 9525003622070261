"""What the relay's input checks cost: delivered tokens/s with the PII check on and off.

Starts two relays as separate processes (``python -m relay --store memory://``,
one of them with ``--check pii``), then, in this process, an agent SDK worker
whose "model" streams tokens as fast as it can, and two client SDK
subscribers on the same session. A round sends one prompt and times it until
both subscribers hold the whole reply; rounds alternate between the two
relays. It reports delivered tokens per second (tokens that reached a
subscriber, both subscribers counted) and, as second figures, how many
checked user messages per second one client can publish (each steering
message is checked by the relay when the check is on, one at a time) and what
one ``checks.pii()`` call costs. Only user messages are checked, never the
agent's output, so streaming should not slow down.

    python bench/checks_bench.py --tokens 20000 --rounds 5 --messages 2000
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.lowlevel

import agent_side
import client_side
from agent_side import AbortSignal, Run
from transport import UIMessage, checks, message_text, user_message

STEER_TEXT = (
    "Make it five days instead of three, keep the hotels near the old town, "
    "and plan one slow morning; we would like a day trip to Sintra too."
)


def start_relay(*checks: str) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, "-m", "relay", "--port", "0", "--store", "memory://"]
    args += [a for check in checks for a in ("--check", check)]
    args += ["--log-level", "WARNING"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(ws://\S+)", line)
    if match is None:
        proc.kill()
        raise RuntimeError(f"relay did not start: {line!r}")
    return proc, match.group(1)


class Bench:
    """One relay: a worker and two subscribers on one session."""

    def __init__(self, url: str, tokens: int) -> None:
        self.url = url
        self.tokens = tokens
        self.expected = "".join(f"t{i % 1000} " for i in range(tokens))

    async def handle(self, run: Run) -> None:
        if message_text(run.messages[0]).startswith("hold"):
            await run.start()  # a Run that only takes steering (the publish round)
            await run.abort_signal.wait()
            await run.end("cancelled")
            return
        await agent_side.steering_loop(run, self.model)

    async def model(self, messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        for i in range(self.tokens):
            yield f"t{i % 1000} "
            if i % 256 == 0:
                await anyio.lowlevel.checkpoint()  # let the publisher run, like a real model

    async def stream_round(self, session: str, subs: list[client_side.ClientSession]) -> float:
        first = subs[0]
        start = time.perf_counter()
        run = await first.send(f"round {session}")
        for sub in subs:
            with anyio.fail_after(120):
                while True:
                    info = sub.view.run(run.run_id)
                    if info is not None and info.status == "complete":
                        break
                    await sub._wait_change()
        elapsed = time.perf_counter() - start
        for sub in subs:
            replies = [
                message_text(vm.message)
                for vm in sub.view.messages()
                if vm.run_id == run.run_id and vm.message.role == "assistant"
            ]
            assert replies == [self.expected], "a subscriber did not get the whole reply"
        return elapsed

    async def hold_run(self, sub: client_side.ClientSession) -> client_side.ClientRun:
        """A Run that stays active and only takes steering (for the publish rounds)."""
        run = await sub.send("hold this run open")
        while (info := sub.view.run(run.run_id)) is None or info.status != "active":
            await sub._wait_change()
        return run

    @staticmethod
    async def publish_round(run: client_side.ClientRun, messages: int) -> float:
        start = time.perf_counter()
        for _ in range(messages):
            await run.steer(STEER_TEXT).published
        return time.perf_counter() - start


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    procs = {"off": start_relay(), "on": start_relay("pii")}
    results: dict[str, dict[str, list[float]]] = {k: {"stream": [], "publish": []} for k in procs}
    try:
        async with AsyncExitStack() as stack:
            benches: dict[str, tuple[Bench, list[client_side.ClientSession]]] = {}
            for name, (_, url) in procs.items():
                bench = Bench(url, args.tokens)
                worker = agent_side.Agent(url, max_in_flight=args.max_in_flight)
                worker.on_run(bench.handle)
                await stack.enter_async_context(worker)
                subs = [
                    await stack.enter_async_context(
                        client_side.connect(url, "bench", history_limit=1)
                    )
                    for _ in range(2)
                ]
                benches[name] = (bench, subs)
            for r in range(args.rounds + 1):  # round 0 warms up
                for name in ("off", "on") if r % 2 else ("on", "off"):
                    bench, subs = benches[name]
                    elapsed = await bench.stream_round(f"{name}-{r}", subs)
                    if r:
                        results[name]["stream"].append(elapsed)
            held = {name: await bench.hold_run(subs[0]) for name, (bench, subs) in benches.items()}
            for r in range(args.rounds):
                for name in ("off", "on") if r % 2 else ("on", "off"):
                    elapsed = await Bench.publish_round(held[name], args.messages // args.rounds)
                    results[name]["publish"].append(elapsed)
            for run in held.values():
                await run.cancel()
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(timeout=10)
    return results


def check_cost(n: int = 20_000) -> float:
    """Microseconds one ``checks.pii()`` call takes on a typical steering message."""
    check = checks.pii()
    message = user_message(STEER_TEXT)
    start = time.perf_counter()
    for _ in range(n):
        check(message)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens per streamed reply")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per relay")
    parser.add_argument("--messages", type=int, default=2_000, help="checked messages to publish")
    parser.add_argument("--max-in-flight", type=int, default=1, help="pipe() appends in flight")
    args = parser.parse_args()
    results = anyio.run(measure, args)
    print(
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{args.tokens} tokens x {args.rounds} rounds, 2 subscribers, store memory://"
    )
    print()
    print("| relay | delivered tokens/s (median) | min .. max | checked messages/s |")
    print("| --- | --- | --- | --- |")
    for name, label in (("off", "no checks"), ("on", "--check pii")):
        rates = [2 * args.tokens / t for t in results[name]["stream"]]
        publish = (args.messages // args.rounds) * args.rounds / sum(results[name]["publish"])
        print(
            f"| {label} | {statistics.median(rates):,.0f} | {min(rates):,.0f} .. "
            f"{max(rates):,.0f} | {publish:,.0f} |"
        )
    print()
    print(f"checks.pii() on a {len(STEER_TEXT)}-character message: {check_cost():.1f} µs")


if __name__ == "__main__":
    main()
