"""The benchmark's load generator: asyncio processes driving one relay (or several nodes).

``run_phase(phase)`` runs one measurement against a relay that is already
listening (in another process) and returns plain numbers. Several processes
can share a phase (``phase.shards``): process ``k`` runs sessions ``k``,
``k + shards``, ... (all of a session's connections, so every latency is
taken on one process's clock), all start together (``sync``) and measure
over the same window, and ``merge`` pools what they counted; only the first
samples the relays, Redis and the machine. One code path drives
both the baseline relay and runwire's, frame for frame the same protocol v1:

* Every session has two *subscribers* (client connections attached to it) and
  one *agent* connection (attached too, as publishing needs). The subscribers
  are the measuring instruments: raw WebSockets that count the tokens in the
  ``response_append`` entries they are delivered (and, at a fixed load, the
  age of each token: its text is ``<microseconds>`` stamped when offered).
* The agent of the baseline publishes one frame per token, with up to
  ``window`` publishes unacknowledged: the baseline does no coalescing.
* The agent of runwire is ``agent_side`` (``connect``, ``create_run``,
  ``run.pipe``, ``on_steer``) when the SDK is importable and ``sdk`` is on;
  otherwise raw frames with pipe()'s coalescing rule: at most one append in
  flight per session, tokens arriving meanwhile merge into the next append.
  Runs are chained: a client prompt, ``run_tokens`` tokens, close, complete,
  the next prompt.
* Steering: subscriber 1 publishes a steer every ``steer_interval`` seconds
  (jittered, one outstanding per session); its latency ends when the agent
  sees it (``on_steer`` with the SDK, the ``deliver`` frame otherwise). With
  the SDK, subscriber 1 is a ``client_side`` session (``send``, ``run.steer``).

Several relay nodes (``urls``, one per node, all on one Redis): session ``i``
has its agent on node ``i % n``, subscriber 1 (which prompts and steers) on
the next node, ``(i + 1) % n``, and subscriber 2 on the agent's node. So every
entry reaches one subscriber through another node (Redis pub/sub), every
prompt and steer crosses to the agent's node, and each node has half the
agents and half the subscribers.

Relay CPU time and RSS come from ``psutil`` on the relays' pids, sampled at the
edges of the measuring window (after a warm-up), and so do the relays'
``/metrics`` counters (``runwire_store_round_trips_total``: the store's round
trips to Redis) and, with ``redis_url``, the Redis server's ``INFO``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import psutil  # type: ignore[import-untyped]
from peers import (
    Prompter,
    RawConn,
    RawPrompter,
    SdkPrompter,
    Tally,
    entry,
    now_us,
    publish_coalesced,
    raise_nofile,
    tokens,
)
from websockets.exceptions import ConnectionClosed

__all__ = ["Phase", "Sync", "merge", "run_phase", "sdk_available", "summary"]

PhaseName = Literal["throughput", "latency", "steer", "idle"]
RelayKind = Literal["baseline", "runwire"]

log = logging.getLogger("runwire.bench")

_STEER_WAIT = 2.0
_STOP_WAIT = 15.0


def sdk_available() -> bool:
    """True when both SDKs import with the names the load generator uses."""
    try:
        import agent_side
        import client_side
    except ImportError:
        return False
    return hasattr(agent_side, "connect") and hasattr(client_side, "connect")


@dataclass(frozen=True)
class Phase:
    """One measurement: what to run against which relay."""

    name: PhaseName
    relay: RelayKind
    urls: tuple[str, ...]
    """Every relay node's ws:// URL (one node but for the Redis store)."""
    relay_pids: tuple[int, ...]
    tag: str = "s"
    sessions: int = 1
    rate: float | None = None
    """Tokens per second offered per session; None offers them as fast as taken."""
    warmup: float = 1.0
    duration: float = 3.0
    steer_interval: float = 0.25
    clients: int = 1000
    warm_clients: int = 10
    run_tokens: int = 5000
    window: int = 16
    sdk: bool = True
    sdk_rollup: float = 0.0
    """The agent SDK's ``rollup_window`` (seconds): ``pipe()`` holds tokens that long."""
    setup_concurrency: int = 25
    redis_url: str | None = None
    """The Redis the relays use: its ``INFO`` is sampled at the edges of the window."""
    sdk_sessions: int | None = None
    """With ``sdk``: only sessions ``0 .. sdk_sessions - 1`` run the SDKs (the *probes*);
    the rest speak raw frames. None: every session runs the SDKs."""
    shard: int = 0
    """This load-generator process's share: sessions ``shard``, ``shard + shards``, ..."""
    shards: int = 1
    """Load-generator processes running this phase together (see ``merge``)."""

    @property
    def url(self) -> str:
        """The first relay node's URL."""
        return self.urls[0]


class Session:
    """One session's connections and its current Run."""

    def __init__(self, ctx: PhaseCtx, index: int) -> None:
        self.ctx = ctx
        self.session_id = f"{ctx.phase.tag}-{index}"
        nodes = len(ctx.phase.urls)
        self.agent_node = index % nodes
        self.sub_nodes = ((index + 1) % nodes, self.agent_node)
        """Subscriber 1 (it prompts and steers) on the next node, subscriber 2 on the agent's."""
        self.run_id: str | None = None
        self.run_live = asyncio.Event()
        self.steer_sent: int | None = None
        self.steer_seen = asyncio.Event()
        self._entries = itertools.count(1)
        phase = ctx.phase
        self.sdk = (
            phase.relay == "runwire"
            and phase.sdk
            and (phase.sdk_sessions is None or index < phase.sdk_sessions)
        )
        """This session's agent (and its prompting client, when steering) use the SDKs."""
        mixed = phase.relay == "runwire" and phase.sdk and phase.sdk_sessions is not None
        self.tally = ctx.rest if mixed and not self.sdk else ctx.tally
        """Where this session counts: the raw sessions of a mixed phase count apart."""

    def entry_id(self) -> str:
        """A fresh entry id within this session."""
        return f"e{next(self._entries)}"

    def steered(self) -> None:
        """The agent saw a steering message (``on_steer``)."""
        sent, self.steer_sent = self.steer_sent, None
        if sent is not None:
            if self.tally.measuring:
                self.tally.steer_us.append(now_us() - sent)
            self.steer_seen.set()

    def agent_deliver(self, frame: dict[str, Any]) -> None:
        """A raw agent's deliveries: spot steering (what ``on_steer`` does in the SDK)."""
        for item in frame["entries"]:
            if item.get("kind") == "message" and item.get("intent") == "steer":
                self.steered()

    async def run(self, ready: asyncio.Event) -> None:
        """Open everything, report ready, stream (and steer) until the phase stops."""
        ctx = self.ctx
        phase = ctx.phase
        use_sdk = self.sdk
        async with contextlib.AsyncExitStack() as stack:
            async with ctx.setup_limit:
                prompter = await self._subscribers(stack, use_sdk and phase.name == "steer")
                agent_conn: RawConn | None = None
                agent_session: Any = None
                if use_sdk:
                    import agent_side

                    agent_session = await stack.enter_async_context(
                        agent_side.connect(
                            phase.urls[self.agent_node],
                            self.session_id,
                            rollup_window=phase.sdk_rollup,
                        )
                    )
                else:
                    agent_conn = await RawConn.open(
                        phase.urls[self.agent_node],
                        self.tally,
                        role="agent",
                        on_deliver=self.agent_deliver,
                    )
                    stack.push_async_callback(agent_conn.close)
                    await agent_conn.attach(self.session_id)
            ready.set()
            await ctx.go.wait()
            steering = None
            if phase.name == "steer":
                steering = asyncio.get_running_loop().create_task(self._steer(prompter))
            try:
                if phase.relay == "baseline":
                    assert agent_conn is not None
                    await self._baseline_agent(agent_conn)
                elif agent_session is not None:
                    await self._sdk_agent(agent_session, prompter)
                else:
                    assert agent_conn is not None
                    await self._raw_agent(agent_conn, prompter)
            finally:
                if steering is not None:
                    steering.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await steering

    async def _subscribers(self, stack: contextlib.AsyncExitStack, sdk_client: bool) -> Prompter:
        ctx = self.ctx
        prompter: Prompter | None = None
        for i in range(2):
            node = self.sub_nodes[i]
            url = ctx.phase.urls[node]
            if i == 0 and sdk_client:
                import client_side

                client = await stack.enter_async_context(
                    client_side.connect(url, self.session_id, agent="bench")
                )
                prompter = SdkPrompter(client)
                continue
            on_deliver: Callable[[dict[str, Any]], None] = self.tally.on_deliver
            if len(ctx.phase.urls) > 1:
                far = node != self.agent_node
                on_deliver = functools.partial(self.tally.on_deliver, node=node, far=far)
            conn = await RawConn.open(url, self.tally, on_deliver=on_deliver)
            stack.push_async_callback(conn.close)
            await conn.attach(self.session_id)
            if prompter is None:
                prompter = RawPrompter(conn, self.session_id)
        assert prompter is not None
        return prompter

    async def _baseline_agent(self, conn: RawConn) -> None:
        """One frame per token, up to ``window`` unacknowledged."""
        phase = self.ctx.phase
        self.run_id = "run-1"
        self.run_live.set()
        slots = asyncio.Semaphore(phase.window)
        async for token in tokens(10**12, phase.rate, self.ctx.stop):
            await slots.acquire()
            chunks = [{"type": "text-delta", "id": "text-1", "delta": token}]
            append = entry(
                "response_append", self.entry_id(), "run-1", message_id="m1", chunks=chunks
            )
            try:
                future = await conn.send(
                    {"type": "publish", "session_id": self.session_id, "entry": append}
                )
            except ConnectionClosed:
                return
            future.add_done_callback(lambda _: slots.release())

    async def _raw_agent(self, conn: RawConn, prompter: Prompter) -> None:
        """Chained Runs over raw frames, coalescing as ``run.pipe()`` does."""
        phase = self.ctx.phase
        sid = self.session_id
        while not self.ctx.stop.is_set():
            run_id = await prompter.prompt()
            await conn.publish(sid, entry("run", self.entry_id(), run_id, status="active"))
            self.run_id = run_id
            self.run_live.set()
            message_id = f"m-{run_id}"
            opened = entry("response_open", self.entry_id(), run_id, message_id=message_id)
            await conn.publish(sid, opened)
            stream = tokens(phase.run_tokens, phase.rate, self.ctx.stop)
            text = await publish_coalesced(
                conn, sid, run_id, message_id, stream, self.entry_id, window=phase.sdk_rollup
            )
            self.run_live.clear()
            message = {
                "id": message_id,
                "role": "assistant",
                "parts": [{"type": "text", "text": text}],
            }
            closed = entry(
                "response_close", self.entry_id(), run_id, message_id=message_id, message=message
            )
            await conn.publish(sid, closed)
            await conn.publish(sid, entry("run", self.entry_id(), run_id, status="complete"))

    async def _sdk_agent(self, session: Any, prompter: Prompter) -> None:
        """Chained Runs through ``agent_side``: ``create_run``, ``start``, ``pipe``, ``end``."""
        phase = self.ctx.phase
        while not self.ctx.stop.is_set():
            run_id = await prompter.prompt()
            run = session.create_run(run_id, on_steer=self.steered)
            await run.start()
            self.run_id = run_id
            self.run_live.set()
            result = await run.pipe(tokens(phase.run_tokens, phase.rate, self.ctx.stop))
            self.run_live.clear()
            if result.reason == "error":
                self.tally.error(f"pipe: {result.error!r}"[:80])
            await run.end()

    async def _steer(self, prompter: Prompter) -> None:
        """One steer at a time, every ``steer_interval`` seconds (jittered)."""
        interval = self.ctx.phase.steer_interval
        while not self.ctx.stop.is_set():
            await asyncio.sleep(interval * (0.5 + random.random()))
            await self.run_live.wait()
            run_id = self.run_id
            if run_id is None:
                continue
            self.steer_seen.clear()
            self.steer_sent = now_us()
            counted = self.tally.measuring
            await prompter.steer(run_id)
            try:
                # Not wait_for: on 3.11 it can swallow the cancel that stops this task.
                async with asyncio.timeout(_STEER_WAIT):
                    await self.steer_seen.wait()
            except TimeoutError:
                self.steer_sent = None
                if counted:
                    self.tally.steer_missed += 1


@dataclass
class PhaseCtx:
    """What the sessions of one phase share."""

    phase: Phase
    tally: Tally
    rest: Tally
    """The raw sessions of a phase that mixes SDK probes and raw sessions (``sdk_sessions``)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)
    setup_limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(25))


# ------------------------------------------------------------------ phases --


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _node_sample(proc: psutil.Process) -> tuple[float, float, int]:
    """A relay process's CPU seconds, its system (kernel) part, and how many times it
    blocked and woke (voluntary context switches: its event loop sleeping in the selector)."""
    times = proc.cpu_times()
    return float(times.user + times.system), float(times.system), proc.num_ctx_switches().voluntary


def _machine_busy() -> float:
    """CPU seconds every process on the machine has used (all CPUs, not idle)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def summary(values: list[int]) -> dict[str, float]:
    """p50 / p99 / max (milliseconds) and the sample count of microsecond values."""
    if not values:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    ordered = sorted(values)

    def pct(q: float) -> float:
        index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))
        return ordered[index] / 1000.0

    return {
        "n": len(ordered),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": ordered[-1] / 1000,
    }


async def _scrape(ws_url: str) -> dict[str, float]:
    """The unlabelled ``runwire_*`` samples of a relay's ``GET /metrics``."""
    parts = urlsplit(ws_url)
    async with asyncio.timeout(5.0):
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            raw = await reader.read()
        finally:
            writer.close()
    body = raw.partition(b"\r\n\r\n")[2].decode(errors="replace")
    samples: dict[str, float] = {}
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("runwire_") and "{" not in name and not name.endswith("_created"):
            with contextlib.suppress(ValueError):
                samples[name] = float(value)
    return samples


_REDIS_STATS = (
    "total_commands_processed",
    "total_reads_processed",
    "total_writes_processed",
    "total_net_input_bytes",
    "total_net_output_bytes",
)


async def _redis_info(client: Any) -> dict[str, Any]:
    """The Redis server's CPU seconds, counters and per-command calls / microseconds."""
    info = await client.info("all")
    sample: dict[str, Any] = {
        "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        **{key: int(info.get(key, 0)) for key in _REDIS_STATS},
    }
    sample["commands"] = {
        key.removeprefix("cmdstat_"): {"calls": int(v["calls"]), "usec": int(v["usec"])}
        for key, v in info.items()
        if key.startswith("cmdstat_") and isinstance(v, dict)
    }
    return sample


def _redis_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = {key: after[key] - before[key] for key in ("cpu_s", *_REDIS_STATS)}
    commands: dict[str, dict[str, int]] = {}
    for name, now in after["commands"].items():
        was = before["commands"].get(name, {"calls": 0, "usec": 0})
        if now["calls"] != was["calls"]:
            commands[name] = {k: now[k] - was[k] for k in ("calls", "usec")}
    delta["commands"] = commands
    return delta


async def _sample(phase: Phase, redis_client: Any) -> tuple[list[dict[str, float]], Any]:
    """The relays' /metrics (runwire only) and Redis's INFO (if a Redis is named)."""
    scrapes: list[dict[str, float]] = []
    if phase.relay == "runwire":
        scrapes = list(await asyncio.gather(*(_scrape(url) for url in phase.urls)))
    info = await _redis_info(redis_client) if redis_client is not None else None
    return scrapes, info


def _open_redis(phase: Phase) -> Any:
    if phase.redis_url is None:
        return None
    from redis.asyncio import Redis

    return Redis.from_url(phase.redis_url)


Sync = Callable[[], Awaitable[float | None]]
"""Told "this process is set up"; returns when to start (``time.monotonic()``), None to abort."""


async def _streaming(phase: Phase, sync: Sync | None) -> dict[str, Any]:
    redis_client = _open_redis(phase) if phase.shard == 0 else None
    try:
        return await _stream(phase, redis_client, sync)
    finally:
        if redis_client is not None:
            await redis_client.aclose()


async def _sleep_until(when: float) -> None:
    await asyncio.sleep(max(0.0, when - time.monotonic()))


async def _stream(phase: Phase, redis_client: Any, sync: Sync | None) -> dict[str, Any]:
    nodes = len(phase.urls)
    sampler = phase.shard == 0  # one process samples the relays, Redis and the machine
    tally, rest = (Tally(latencies_us=[] if phase.name == "latency" else None) for _ in "ab")
    if phase.name == "latency" and nodes > 1:
        tally.far_latencies_us, rest.far_latencies_us = [], []
    limit = asyncio.Semaphore(phase.setup_concurrency)
    ctx = PhaseCtx(phase, tally, rest, setup_limit=limit)
    mine = range(phase.shard, phase.sessions, max(1, phase.shards))
    sessions = [Session(ctx, i) for i in mine]
    readies = [asyncio.Event() for _ in sessions]
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(s.run(r)) for s, r in zip(sessions, readies, strict=True)]
    setup = loop.create_task(_all_set(readies))
    await asyncio.wait([setup, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if not setup.done():  # a session failed while setting up
        setup.cancel()
        failures = await _finish(tasks, 0)
        raise RuntimeError(f"a session failed to set up: {'; '.join(failures)}")
    # Like the relay: what setting up allocated lives to the end; keep it out of the
    # collector's full passes (they would pause every session of this process).
    gc.collect()
    gc.freeze()
    start = time.monotonic() if sync is None else await sync()
    if start is None:
        await _finish(tasks, 0)
        raise RuntimeError("another load-generator process failed to set up")
    # Every process starts, warms up and measures over the same monotonic window.
    await _sleep_until(start)
    ctx.go.set()
    await _sleep_until(start + phase.warmup)
    relays, me = [psutil.Process(pid) for pid in phase.relay_pids], psutil.Process()
    scrape0, info0 = await _sample(phase, redis_client) if sampler else ([], None)
    nodes0 = [_node_sample(relay) for relay in relays] if sampler else []
    own0, all0, t0 = _cpu(me), _machine_busy(), time.perf_counter()
    tally.measuring = rest.measuring = True
    await _sleep_until(start + phase.warmup + phase.duration)
    tally.measuring = rest.measuring = False
    nodes1 = [_node_sample(relay) for relay in relays] if sampler else []
    own1, all1, t1 = _cpu(me), _machine_busy(), time.perf_counter()
    scrape1, info1 = await _sample(phase, redis_client) if sampler else ([], None)
    ctx.stop.set()
    failures = await _finish(tasks, _STOP_WAIT)
    stopping = time.perf_counter() - t1
    seconds = t1 - t0
    node_cpu = [c1[0] - c0[0] for c0, c1 in zip(nodes0, nodes1, strict=True)]
    node_sys = [c1[1] - c0[1] for c0, c1 in zip(nodes0, nodes1, strict=True)]
    node_wakes = [c1[2] - c0[2] for c0, c1 in zip(nodes0, nodes1, strict=True)]
    redis = None if info0 is None or info1 is None else _redis_delta(info0, info1)
    result: dict[str, Any] = {
        "stop_s": stopping,
        "phase": asdict(phase),
        "seconds": seconds,
        "tokens": tally.tokens + rest.tokens,
        "frames": tally.frames + rest.frames,
        "relay_cpu_s": sum(node_cpu),
        "loadgen_cpu_s": own1 - own0,
        "machine_cpu_s": all1 - all0 if sampler else 0.0,
        "errors": tally.errors + rest.errors,
        "error_codes": _sum_codes(tally.error_codes, rest.error_codes),
        "failures": failures,
        "node_tokens": [
            tally.node_tokens.get(i, 0) + rest.node_tokens.get(i, 0) for i in range(nodes)
        ],
        "latencies_us": tally.latencies_us,
        "far_latencies_us": tally.far_latencies_us,
        "steer_us": tally.steer_us if phase.name == "steer" else None,
        "steer_missed": tally.steer_missed + rest.steer_missed,
    }
    if phase.sdk and phase.sdk_sessions is not None and phase.relay == "runwire":
        # The raw sessions' figures, under the same load (the probes' are the main ones).
        result["rest_latencies_us"] = rest.latencies_us
        result["rest_steer_us"] = rest.steer_us if phase.name == "steer" else None
    if sampler:
        result["node_cpu_s"] = node_cpu
        result["node_sys_s"] = node_sys
        result["node_wakes"] = node_wakes
    if scrape0 and scrape1:
        result["node_metrics"] = [
            {k: after[k] - before.get(k, 0.0) for k in after}
            for before, after in zip(scrape0, scrape1, strict=True)
        ]
    if redis is not None:
        result["redis"] = redis
    return result


def _sum_codes(*counts: dict[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for count in counts:
        for code, n in count.items():
            total[code] = total.get(code, 0) + n
    return total


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One phase's numbers from the results of every load-generator process.

    The first part is the sampling process's (shard 0): its window, relay CPU,
    ``/metrics`` and Redis figures stand; counts and CPU of the load generator
    add up; latencies are pooled before their percentiles are taken.
    """
    first = parts[0]
    if first.get("phase", {}).get("name") == "idle":
        return first
    result: dict[str, Any] = {
        k: v for k, v in first.items() if k not in _POOLED and k != "machine_cpu_s"
    }
    result["stop_s"] = max(p["stop_s"] for p in parts)
    for key in ("tokens", "frames", "loadgen_cpu_s", "errors", "steer_missed"):
        result[key] = sum(p[key] for p in parts)
    result["loadgen_processes"] = len(parts)
    result["error_codes"] = _sum_codes(*(p["error_codes"] for p in parts))
    result["failures"] = [f for p in parts for f in p["failures"]][:10]
    redis_cpu = 0.0 if "redis" not in first else first["redis"]["cpu_s"]
    result["other_cpu_s"] = max(
        0.0, first["machine_cpu_s"] - first["relay_cpu_s"] - result["loadgen_cpu_s"] - redis_cpu
    )
    nodes = len(first["phase"]["urls"])
    if nodes > 1:
        result["node_tokens"] = [sum(p["node_tokens"][i] for p in parts) for i in range(nodes)]
    else:
        result.pop("node_cpu_s", None)  # per-node figures only where there are nodes
    for key, name in _SUMMARIES.items():
        pooled = [v for p in parts if p.get(key) is not None for v in p[key]]
        if first.get(key) is not None:
            result[name] = summary(pooled)
    if first["phase"]["name"] != "steer":
        result.pop("steer_missed", None)
    return result


_SUMMARIES = {
    "latencies_us": "latency",
    "far_latencies_us": "latency_far",
    "steer_us": "steer",
    "rest_latencies_us": "latency_rest",
    "rest_steer_us": "steer_rest",
}
_POOLED = (*_SUMMARIES, "node_tokens")


async def _all_set(events: list[asyncio.Event]) -> None:
    for event in events:
        await event.wait()


async def _finish(tasks: list[asyncio.Task[None]], wait: float) -> list[str]:
    """Let session tasks end (cancelling stragglers); returns their failures."""
    if not tasks:
        return []
    if wait > 0:
        _, late = await asyncio.wait(tasks, timeout=wait)
        if late:
            log.warning("%d sessions did not stop within %.0f s", len(late), wait)
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [repr(r) for r in results if isinstance(r, BaseException) and not _cancelled(r)]
    return failures[:10]


def _cancelled(exc: BaseException) -> bool:
    return isinstance(exc, asyncio.CancelledError)


async def _idle(phase: Phase) -> dict[str, Any]:
    tally = Tally()
    relay = psutil.Process(phase.relay_pids[0])
    limit = asyncio.Semaphore(phase.setup_concurrency * 2)
    conns: list[RawConn] = []

    async def one(i: int) -> None:
        async with limit:
            conn = await RawConn.open(phase.url, tally)
            conns.append(conn)
            await conn.attach(f"{phase.tag}-{i}")

    try:
        await asyncio.gather(*(one(i) for i in range(phase.warm_clients)))
        await asyncio.sleep(phase.warmup)
        rss0 = relay.memory_info().rss
        await asyncio.gather(
            *(one(i) for i in range(phase.warm_clients, phase.warm_clients + phase.clients))
        )
        await asyncio.sleep(phase.warmup)
        rss1 = relay.memory_info().rss
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
    return {
        "phase": asdict(phase),
        "clients": phase.clients,
        "rss_before": rss0,
        "rss_after": rss1,
        "bytes_per_client": (rss1 - rss0) / max(1, phase.clients),
        "errors": tally.errors,
        "error_codes": tally.error_codes,
        "failures": [],
    }


def run_phase(phase: Phase, sync: Sync | None = None) -> dict[str, Any]:
    """Run this process's share of one phase to the end and return its numbers.

    With several load-generator processes (``phase.shards``), ``sync`` reports
    this one set up and waits for the common start; pass every process's
    result to ``merge``. On its own (``shards=1``, no ``sync``) the result is
    already merged.
    """
    raise_nofile()
    if phase.name == "idle":
        return asyncio.run(_idle(phase))
    result = asyncio.run(_streaming(phase, sync))
    return merge([result]) if sync is None else result
