"""runwire's benchmark: the relay against a bare websockets + orjson relay.

``python bench/run.py`` (two to four minutes on 2 cores; ``--quick`` for a
smoke run of a few seconds, ``--out FILE`` to keep the numbers as JSON)
measures three relays, each started as its own process for each measurement:
``bench/baseline_relay.py``, ``python -m relay --store memory://`` and
``python -m relay --store sqlite:///<tmp>/<name>.db``. The load comes from
other processes (``bench/loadgen.py``; two by default, ``--loadgen-procs``,
each running its share of the sessions), so at any time one relay process and
the load-generator processes share the machine. A measurement during which other
processes used more than a quarter of a core is taken again (at most twice,
within a time budget) and the least disturbed one kept. ``bench/report.py``
turns the numbers into the table. See ``bench/README.md``.

``--redis`` adds one (``redis1``) and two (``redis2``) relay processes on a
Redis store (``--redis-url``, a fresh key prefix per measurement, its keys
deleted afterwards) for the throughput and latency measurements, and a second
table that compares them with the SQLite relay of the same run; a third puts
the per-node CPU of two nodes beside what half the load costs single relays
(the baseline and the memory relay are then measured at half the sessions too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import platform
import secrets
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import IO, Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
import psutil  # type: ignore[import-untyped]
from loadgen import Phase, merge, run_phase, sdk_available
from peers import raise_nofile
from report import (
    QUICK,
    REDIS_KINDS,
    Sizes,
    _markdown,
    compute_half_load,
    compute_metrics,
    compute_redis_metrics,
    metrics_of,
    redis_metrics_of,
    render_half_table,
    render_redis_table,
    render_table,
)

__all__ = [
    "RELAYS",
    "LoadGen",
    "Policy",
    "RedisKeys",
    "RelayProcess",
    "main",
    "measure",
    "plan",
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_RELAYS = ("baseline", "memory", "sqlite")
BARE = ("baseline", "node")
"""The reference relays: no store, raw frames only (``node``: ``bench/node``, Node's ws)."""
RELAYS = (*DEFAULT_RELAYS, "node", *REDIS_KINDS)
NODES = {"redis1": 1, "redis2": 2}
"""Relay processes per measurement, for the relays on Redis (one for the others)."""
REDIS_PHASES = {
    "throughput_n": REDIS_KINDS,
    "latency": REDIS_KINDS,
    "latency_raw": REDIS_KINDS,
    "latency_half": ("redis1",),
    "steer": REDIS_KINDS,
}
"""What the relays on Redis are measured on (``latency_half`` is for them, and for the
single relays of ``HALF_REFERENCES`` in a run that measures them)."""
HALF_REFERENCES = ("baseline", "memory")
"""Single relays also measured at half the sessions in a run with relays on Redis: what
half the load costs per token on this machine without a second node or Redis."""
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PHASE_TIMEOUT = 120.0


# ------------------------------------------------------------------ relays --


class RelayProcess:
    """One relay under test, in its own process, listening on a free port."""

    extra: ClassVar[list[str]] = []
    """More command-line options of every runwire relay (``--rollup-window``)."""

    def __init__(self, kind: str, workdir: Path, name: str, store: str | None = None) -> None:
        self.kind = kind
        self.log_path = workdir / f"{name}.log"
        self.db_path: Path | None = None
        if kind == "baseline":
            cmd = [sys.executable, str(HERE / "baseline_relay.py"), "--port", "0"]
        elif kind == "node":
            cmd = ["node", str(HERE / "node" / "baseline_relay.mjs"), "--port", "0"]
        else:
            if store is None and kind != "memory":
                self.db_path = workdir / f"{name}.db"
            if store is None:
                store = "memory://" if self.db_path is None else f"sqlite:///{self.db_path}"
            cmd = [
                sys.executable,
                "-m",
                "relay",
                "--port",
                "0",
                "--store",
                store,
                "--log-level",
                "WARNING",
                *self.extra,
            ]
        self.command = shlex.join(cmd)
        self._log: IO[bytes] = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True
        )
        self.url = self._wait_url(20.0)
        self._profiler = self._start_profiler(name)

    def _start_profiler(self, name: str) -> subprocess.Popen[bytes] | None:
        """With ``$RUNWIRE_BENCH_PROFILE`` set to a folder, sample the relay with py-spy.

        Each relay process gets ``<folder>/<name>.txt`` (py-spy's raw, collapsed stacks),
        written when the relay stops. py-spy's own CPU is not the relay's, but it shares
        the cores: the figures of a profiled run are only good for relative costs.
        """
        folder = os.environ.get("RUNWIRE_BENCH_PROFILE")
        if not folder:
            return None
        out = Path(folder) / f"{name}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        spy = Path(sys.executable).with_name("py-spy")
        cmd = [str(spy), "record", "--pid", str(self.pid), "--format", "raw", "-r", "250"]
        return subprocess.Popen(
            [*cmd, "--nonblocking", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        """The relay's process id."""
        return self.proc.pid

    def _wait_url(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline().decode(errors="replace")
                for word in line.split():
                    if word.startswith("ws://"):
                        return word
            if self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"{self.kind} relay did not start: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the relay's stderr."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGINT, then SIGKILL if it does not exit within 5 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        if self._profiler is not None:
            # py-spy writes its file once the process it samples has gone.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._profiler.wait(10.0)
        if self.db_path is not None:
            # Deleted now, not with the run's directory: the kernel drops a deleted file's
            # unwritten pages, so the next measurements do not share the disk with their
            # writeback (a flat-out phase writes hundreds of megabytes).
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.db_path}{suffix}").unlink(missing_ok=True)


class RedisKeys:
    """Fresh key prefixes on one Redis for a run, and deleting their keys."""

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.run = f"bench{secrets.token_hex(4)}"
        self._client = redis.Redis.from_url(self.client_url)
        self._count = 0

    @property
    def client_url(self) -> str:
        """The URL without the store's own options (``?linger_ms=`` ...), for redis-py."""
        from relay.store._redis import URL_OPTIONS  # needs redis, as this class does

        parts = urlsplit(self.url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in URL_OPTIONS]
        return urlunsplit(parts._replace(query=urlencode(query)))

    def ping(self) -> None:
        """Raise ``SystemExit`` when Redis cannot be reached."""
        import redis

        try:
            self._client.ping()
        except redis.RedisError as exc:
            raise SystemExit(f"--redis: Redis at {self.url} is not reachable ({exc})") from None

    def store_url(self) -> str:
        """A store URL with a prefix no measurement used before (``bench<random>-<n>:``)."""
        self._count += 1
        parts = urlsplit(self.url)
        query = [*parse_qsl(parts.query), ("prefix", f"{self.run}-{self._count}:")]
        return urlunsplit(parts._replace(query=urlencode(query, safe=":")))

    def delete(self, pattern: str | None = None) -> int:
        """Delete the keys of this run (or those matching ``pattern``).

        Returns how many, or -1 when Redis failed meanwhile.
        """
        import redis

        deleted = 0
        batch: list[bytes] = []
        try:
            for key in self._client.scan_iter(match=pattern or f"{self.run}-*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    deleted += int(self._client.unlink(*batch))
                    batch.clear()
            if batch:
                deleted += int(self._client.unlink(*batch))
        except redis.RedisError:
            return -1
        return deleted

    def close(self) -> None:
        """Delete every key of the run and disconnect."""
        try:
            self.delete()
        finally:
            self._client.close()


# ---------------------------------------------------------------- loadgen --


def _loadgen_worker(conn: multiprocessing.connection.Connection) -> None:
    """One load-generator process: runs its share of each phase it is sent."""
    raise_nofile()

    async def sync() -> float | None:
        conn.send(("ready", None))
        reply = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        return float(reply[1]) if reply[0] == "go" else None

    while True:
        phase = conn.recv()
        if phase is None:
            return
        try:
            conn.send(("ok", run_phase(phase, sync if phase.name != "idle" else None)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class LoadGen:
    """The load-generator processes (``processes`` of them); restarted if a phase hangs.

    Each streaming phase is split by session: process ``k`` of ``n`` runs
    sessions ``k``, ``k + n``, ... (a session's agent and subscribers stay in
    one process, so every latency is taken on one clock). All processes set
    up, then start together at a time this one names, warm up and measure over
    the same window; ``merge`` adds up what they counted. The idle phase runs
    in the first process only.
    """

    def __init__(self, processes: int = 2) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self.processes = max(1, processes)
        self._workers: list[tuple[multiprocessing.connection.Connection, Any]] = []
        self._start()

    def _start(self) -> None:
        for _ in range(self.processes):
            conn, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_loadgen_worker, args=(child,), daemon=True)
            proc.start()
            child.close()
            self._workers.append((conn, proc))

    def _restart(self) -> None:
        for conn, proc in self._workers:
            proc.kill()
            proc.join()
            conn.close()
        self._workers = []
        self._start()

    def run(self, phase: Phase, timeout: float) -> dict[str, Any]:
        """Run one phase in the load-generator processes; raises ``RuntimeError`` on failure."""
        deadline = time.monotonic() + timeout
        workers = self._workers[:1] if phase.name == "idle" else self._workers
        try:
            for k, (conn, _) in enumerate(workers):
                conn.send(replace(phase, shard=k, shards=len(workers)))
            parts = self._collect(workers, phase, deadline)
        except (EOFError, OSError, RuntimeError) as exc:
            self._restart()
            raise RuntimeError(f"load generator failed: {exc or type(exc).__name__}") from None
        return merge(parts)

    def _collect(
        self,
        workers: list[tuple[multiprocessing.connection.Connection, Any]],
        phase: Phase,
        deadline: float,
    ) -> list[dict[str, Any]]:
        """Every worker's result, after starting them together once all are set up."""
        parts: dict[int, dict[str, Any]] = {}
        ready: set[int] = set()
        failed: str | None = None
        started = phase.name == "idle"
        while len(parts) < len(workers):
            if not started and len(ready) + len(parts) == len(workers):
                # Everyone set up (or finished failing): start together, or call it off.
                go = ("go", time.monotonic() + 0.05) if failed is None else ("abort", None)
                for k in ready:
                    workers[k][0].send(go)
                started = True
            waiting = [conn for k, (conn, _) in enumerate(workers) if k not in parts]
            left = deadline - time.monotonic()
            if left <= 0 or not multiprocessing.connection.wait(waiting, left):
                raise RuntimeError(f"phase {phase.name} timed out")
            for k, (conn, _) in enumerate(workers):
                if k in parts or not conn.poll():
                    continue
                status, value = conn.recv()
                if status == "ready":
                    ready.add(k)
                elif status == "ok":
                    parts[k] = value
                else:
                    failed = failed or str(value)
                    parts[k] = {}
                    ready.discard(k)
        if failed is not None:
            raise RuntimeError(failed)
        return [parts[k] for k in range(len(workers))]

    def close(self) -> None:
        """Stop the processes."""
        for conn, _ in self._workers:
            with contextlib.suppress(OSError):
                conn.send(None)
        for _, proc in self._workers:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()


# ----------------------------------------------------------------- phases --


def plan(sizes: Sizes, *, sdk: bool) -> list[tuple[str, dict[str, Any]]]:
    """The measurements, in order: ``(name, Phase fields)``."""
    steer_rate = sizes.rate if sizes.steer_rate is None else sizes.steer_rate
    common: dict[str, Any] = {
        "warmup": sizes.warmup,
        "duration": sizes.duration,
        "run_tokens": sizes.run_tokens,
        "window": sizes.window,
        "sdk": sdk,
        "sdk_rollup": sizes.sdk_rollup_window,
    }
    steer: dict[str, Any] = {
        **common,
        "name": "steer",
        "sessions": sizes.sessions,
        "rate": steer_rate or None,
        "steer_interval": sizes.steer_interval,
    }
    # Steering latency through the SDKs is probed on a few sessions while the rest stream
    # over raw frames: one process could not run a hundred agents and a hundred clients on
    # the SDKs without measuring its own queue (see "steer_all", which does).
    probed = {**steer, "sdk_sessions": min(sizes.probes, sizes.sessions)}
    latency: dict[str, Any] = {
        **common,
        "name": "latency",
        "sessions": sizes.sessions,
        "rate": sizes.rate,
    }
    phases: list[tuple[str, dict[str, Any]]] = [
        ("throughput_1", {**common, "name": "throughput", "sessions": 1}),
        ("throughput_n", {**common, "name": "throughput", "sessions": sizes.sessions}),
        ("latency", latency),
        ("steer", probed if sdk else steer),
    ]
    if sdk:
        # The same two with runwire driven by raw frames: the relay without the SDKs' cost;
        # and steering with every session on the SDKs.
        phases += [
            ("latency_raw", {**latency, "sdk": False}),
            ("steer_raw", {**steer, "sdk": False}),
            ("steer_all", steer),
        ]
    idle: dict[str, Any] = {
        **common,
        "name": "idle",
        "clients": sizes.clients,
        "warmup": min(1.0, sizes.warmup * 2),
    }
    # One node on Redis carrying what each of two nodes carries: the reference for
    # "per node" figures at the same load per node.
    half = ("latency_half", {**latency, "sessions": max(1, sizes.sessions // 2)})
    return [*phases, half, ("idle", idle)]


def wait_quiet(limit: float, busy_below: float = 25.0) -> float:
    """Wait up to ``limit`` seconds until other processes use under ``busy_below`` % of a core.

    Returns the last reading (percent of one core).
    """
    deadline = time.monotonic() + limit
    cores = psutil.cpu_count() or 1
    while True:
        busy = float(psutil.cpu_percent(interval=1.0)) * cores
        if busy < busy_below or time.monotonic() >= deadline:
            return busy


@dataclass(frozen=True)
class Policy:
    """How hard to try for measurements the rest of the machine did not disturb."""

    quiet_wait: float = 0.0
    """Before each measurement, wait up to this long for other load to stop (within budget)."""
    retries: int = 2
    """Measure again (keeping the least disturbed) when others used over ``noise_limit``."""
    noise_limit: float = 25.0
    """Percent of one core that other processes may use during a measurement."""
    budget: float = 270.0
    """Retry or wait only while the whole run is expected to end within this many seconds."""


def measure(
    sizes: Sizes,
    relays: Sequence[str],
    *,
    sdk: bool,
    log: Callable[[str], None],
    policy: Policy = Policy(),
    redis: RedisKeys | None = None,
    phases: Sequence[str] | None = None,
    loadgen_procs: int = 2,
) -> dict[str, dict[str, Any]]:
    """Run every phase (or those named in ``phases``) against every relay.

    Returns ``{phase: {relay: result}}``. The relays on Redis (``redis1``,
    ``redis2``) need ``redis`` and are measured on ``REDIS_PHASES`` only.
    """
    results: dict[str, dict[str, Any]] = {}
    began = time.monotonic()
    clustered = any(kind in NODES for kind in relays)
    todo = [
        (name, fields, kind)
        for name, fields in plan(sizes, sdk=sdk)
        for kind in relays
        if _measures(name, kind, clustered) and (phases is None or name in phases)
    ]
    if redis is None and any(kind in NODES for _, _, kind in todo):
        raise ValueError("relays on Redis need redis=RedisKeys(url)")
    done, measuring = 0, 0.0
    loadgen = LoadGen(loadgen_procs)
    try:
        with tempfile.TemporaryDirectory(prefix="runwire-bench-") as tmp:
            for index, (name, fields, kind) in enumerate(todo):
                best: dict[str, Any] | None = None
                for attempt in range(1 + max(0, policy.retries)):
                    # What the rest of the run (this measurement included) should take.
                    ahead = (len(todo) - index) * (measuring / done if done else 5.0)
                    slack = policy.budget - (time.monotonic() - began) - ahead
                    if policy.quiet_wait > 0 and slack > 0:
                        wait_quiet(min(policy.quiet_wait, slack), policy.noise_limit)
                    started = time.monotonic()
                    result = _measure_one(loadgen, kind, name, fields, Path(tmp), attempt, redis)
                    result["attempts"] = attempt + 1
                    done += 1
                    measuring += time.monotonic() - started
                    log(_phase_line(name, kind, result, time.monotonic() - started))
                    if best is None or _noise(result) < _noise(best):
                        best = result
                    # Measure again only if the rest of the run still fits in the budget.
                    elapsed = time.monotonic() - began
                    fits = elapsed + (len(todo) - index) * measuring / done < policy.budget
                    if "failed" in result or _noise(result) <= policy.noise_limit or not fits:
                        break
                assert best is not None
                results.setdefault(name, {})[kind] = best
    finally:
        loadgen.close()
    return results


CAPACITY_P99_MS = 50.0
"""The capacity phase's bound on publish->deliver p99."""


def capacity(
    sizes: Sizes,
    relays: Sequence[str],
    rates: Sequence[float],
    *,
    start: int,
    most: int,
    log: Callable[[str], None],
    loadgen_procs: int = 2,
    allowance: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """The largest session count (two subscribers each, raw frames) each relay carries
    at each rate with publish->deliver p99 under ``CAPACITY_P99_MS`` and no error.

    ``allowance`` (seconds): the rollup windows runwire's relays and agents hold tokens
    for; their p99 may be that much higher (a bare relay holds none).

    Steps the count up by half each time from ``start`` until a step fails (or ``most``);
    returns ``{"<rate>": {relay: {"sessions": best or 0, "steps": [...]}}}``.
    """
    out: dict[str, dict[str, Any]] = {}
    loadgen = LoadGen(loadgen_procs)
    try:
        with tempfile.TemporaryDirectory(prefix="runwire-bench-") as tmp:
            for rate in rates:
                for kind in relays:
                    best, steps, n = 0, [], start
                    while n <= most:
                        fields = {
                            "warmup": sizes.warmup,
                            "duration": sizes.duration,
                            "run_tokens": sizes.run_tokens,
                            "window": sizes.window,
                            "sdk": False,
                            "sdk_rollup": sizes.sdk_rollup_window,
                            "name": "latency",
                            "sessions": n,
                            "rate": rate,
                        }
                        bare = kind in ("baseline", "node")
                        limit = CAPACITY_P99_MS + (0 if bare else allowance * 1000)
                        started = time.monotonic()
                        name = f"capacity_{rate:g}_{n}"
                        result = _measure_one(loadgen, kind, name, fields, Path(tmp), 0)
                        log(_phase_line(name, kind, result, time.monotonic() - started))
                        p99 = (result.get("latency") or {}).get("p99_ms")
                        ok = (
                            "failed" not in result
                            and not result.get("errors")
                            and not result.get("failures")
                            and p99 is not None
                            and p99 < limit
                        )
                        seconds = result.get("seconds") or 0.0
                        steps.append(
                            {
                                "sessions": n,
                                "p99_ms": p99,
                                "ok": ok,
                                # Who ran out: the relay's and the load's CPU, % of a core.
                                "relay_busy": _share(result.get("relay_cpu_s"), seconds),
                                "loadgen_busy": _share(result.get("loadgen_cpu_s"), seconds),
                            }
                        )
                        if not ok:
                            break
                        best = n
                        n = max(n + 1, int(n * 1.5))
                    out.setdefault(f"{rate:g}", {})[kind] = {"sessions": best, "steps": steps}
    finally:
        loadgen.close()
    return out


def _share(cpu_s: float | None, seconds: float) -> float | None:
    return None if cpu_s is None or not seconds else round(100 * cpu_s / seconds, 1)


def render_capacity(
    found: dict[str, dict[str, Any]], relays: Sequence[str], allowance: float = 0.0
) -> str:
    """``capacity`` as a Markdown table: a row per rate, a column per relay."""
    bound = f"p99 < {CAPACITY_P99_MS:g} ms"
    if allowance:
        bound += f", runwire's + {allowance * 1000:g} ms of windows"
    rows = [[f"sessions carried ({bound}, no error, 2 subscribers each)", *relays]]
    for rate, by_relay in found.items():
        cells = []
        for kind in relays:
            best = by_relay.get(kind, {}).get("sessions", 0)
            steps = by_relay.get(kind, {}).get("steps", [])
            failed = next((s for s in steps if not s["ok"]), None)
            # "+": every step passed up to --capacity-most; the relay may carry more.
            cells.append(f"{best} (not {failed['sessions']})" if failed else f"{best}+")
        rows.append([f"{rate} tokens/s per session", *cells])
    return _markdown(rows)


def _ready_node() -> None:
    """Check for Node and install ``bench/node``'s pinned ``ws`` (``npm ci``) if missing."""
    import shutil

    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("--relays node: needs Node.js and npm")
    if not (HERE / "node" / "node_modules" / "ws").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE / "node", check=True)


def _measures(name: str, kind: str, clustered: bool = False) -> bool:
    """Whether relay ``kind`` is measured on phase ``name`` (``clustered``: in a run that
    measures relays on Redis too)."""
    if kind in NODES:
        return kind in REDIS_PHASES.get(name, ())
    if name == "latency_half":
        # A reference for the relays on Redis only: what half the load costs a single
        # relay with no cluster at all (the bare baseline, the memory store).
        return clustered and kind in HALF_REFERENCES
    # The baseline is always driven by raw frames: it has no SDK rows.
    return not (kind in BARE and (name.endswith("_raw") or name == "steer_all"))


def _measure_one(
    loadgen: LoadGen,
    kind: str,
    name: str,
    fields: dict[str, Any],
    tmp: Path,
    attempt: int,
    redis: RedisKeys | None = None,
) -> dict[str, Any]:
    """One measurement against fresh relay processes (one, or ``NODES[kind]`` on Redis)."""
    store = redis.store_url() if redis is not None and kind in NODES else None
    nodes: list[RelayProcess] = []
    result: dict[str, Any]
    try:
        for i in range(NODES.get(kind, 1)):
            nodes.append(RelayProcess(kind, tmp, f"{kind}-{name}-{attempt}-{i}", store))
        phase = Phase(
            relay="baseline" if kind in BARE else "runwire",
            urls=tuple(node.url for node in nodes),
            relay_pids=tuple(node.pid for node in nodes),
            tag=name,
            redis_url=None if redis is None or store is None else redis.client_url,
            **fields,
        )
        result = loadgen.run(phase, PHASE_TIMEOUT)
    except RuntimeError as exc:  # a relay did not start, or the phase failed
        result = {"failed": str(exc), "relay_log": _logs(nodes)}
    finally:
        for node in nodes:
            node.stop()
    if store is not None and redis is not None:
        result["redis_keys_deleted"] = redis.delete(_prefix(store) + "*")
    if nodes:
        result["relay_command"] = nodes[0].command
        result["relay_processes"] = len(nodes)
    if "failed" not in result and _logs(nodes).strip():
        result["relay_log"] = _logs(nodes)
    return result


def _prefix(store: str) -> str:
    return dict(parse_qsl(urlsplit(store).query))["prefix"]


def _logs(nodes: Sequence[RelayProcess]) -> str:
    """The end of each relay's stderr."""
    return "".join(node.log_tail() for node in nodes)


def _noise(result: dict[str, Any]) -> float:
    """Percent of a core other processes used during a measurement (0 if not measured)."""
    seconds = result.get("seconds")
    return 100 * result.get("other_cpu_s", 0.0) / seconds if seconds else 0.0


def _phase_line(name: str, kind: str, result: dict[str, Any], took: float) -> str:
    if "failed" in result:
        return f"  {name:<13} {kind:<8} FAILED: {result['failed']}"
    extra = ""
    if result.get("errors"):
        extra += f" errors={result['error_codes']}"
    if result.get("failures"):
        extra += f" failures={result['failures'][:2]}"
    if result.get("steer_missed"):
        extra += f" steer_missed={result['steer_missed']}"
    if result.get("relay_log"):
        extra += " (the relay logged: see relay_log in the JSON)"
    if result.get("seconds"):
        extra += f", other processes used {_noise(result):.0f}% of a core"
    attempt = f" (attempt {result['attempts']})" if result.get("attempts", 1) > 1 else ""
    return f"  {name:<13} {kind:<8} {took:4.1f} s{attempt}{extra}"


# ------------------------------------------------------------------- main --


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument(
        "--relays",
        default=",".join(DEFAULT_RELAYS),
        help=f"subset of {','.join(RELAYS)} ({','.join(DEFAULT_RELAYS)})",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help="add redis1,redis2: one and two relay processes on Redis (needs a Redis)",
    )
    parser.add_argument(
        "--redis-url",
        default=REDIS_URL,
        help=f"the Redis of --redis ($REDIS_URL or {REDIS_URL}); keys under bench<random>-",
    )
    parser.add_argument("--sessions", type=int, help="sessions streaming at once (100)")
    parser.add_argument("--rate", type=float, help="tokens/s per session at fixed load (20)")
    parser.add_argument(
        "--steer-rate", type=float, help="tokens/s per session while steering (--rate; 0: full)"
    )
    parser.add_argument(
        "--steer-interval",
        type=float,
        help="seconds between one session's steers, +-50%% (0.25)",
    )
    parser.add_argument(
        "--probes", type=int, help="sessions on the SDKs while steering; the rest raw (20)"
    )
    parser.add_argument("--duration", type=float, help="seconds measured per phase (3)")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up per phase (1)")
    parser.add_argument("--clients", type=int, help="idle clients (1000)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        help="before each measurement wait up to this many seconds for other load to stop",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=270.0,
        help="seconds the whole run should stay within: retries and waits stop before (270)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        help="measure again when other processes used over 25%% of a core meanwhile"
        " (2; 0 with --quick)",
    )
    parser.add_argument("--no-sdk", action="store_true", help="drive runwire with raw frames")
    parser.add_argument(
        "--capacity",
        help="only the capacity phase, at these tokens/s per session, e.g. 20,50",
    )
    parser.add_argument(
        "--capacity-start", type=int, default=50, help="the capacity phase's first count (50)"
    )
    parser.add_argument(
        "--capacity-most", type=int, default=3000, help="the capacity phase's last count (3000)"
    )
    parser.add_argument(
        "--relay-arg",
        action="append",
        default=[],
        help="one more option of every runwire relay, e.g. --relay-arg=--max-connections=20000",
    )
    parser.add_argument(
        "--rollup-window",
        type=float,
        default=0.0,
        help="the runwire relays' --rollup-window, seconds (0: none)",
    )
    parser.add_argument(
        "--sdk-rollup-window",
        type=float,
        help="the agent SDK's rollup_window, seconds, where the SDK runs the agent (0: none)",
    )
    parser.add_argument(
        "--loadgen-procs",
        type=int,
        default=2,
        help="load-generator processes, each running its share of the sessions (2)",
    )
    parser.add_argument(
        "--phases",
        help="only these measurements, e.g. throughput_n,latency (names as printed)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write JSON if asked; returns the report."""
    args = build_parser().parse_args(argv)
    RelayProcess.extra = ["--rollup-window", str(args.rollup_window)] if args.rollup_window else []
    RelayProcess.extra += args.relay_arg
    sizes_clients = args.clients or 1000
    if sizes_clients + 100 > 10_000 and not any("--max-connections" in a for a in args.relay_arg):
        # The relay answers 503 past --max-connections (10,000 by default): the idle phase
        # at 10,000 clients (plus its 10 warm ones) needs room, as a deployment would.
        RelayProcess.extra += [f"--max-connections={sizes_clients + 100}"]
    relays = [r for r in args.relays.split(",") if r]
    if args.redis:
        relays += [k for k in REDIS_KINDS if k not in relays]
    unknown = set(relays) - set(RELAYS)
    if unknown:
        raise SystemExit(f"unknown relays: {', '.join(sorted(unknown))}")
    if "node" in relays:
        _ready_node()
    redis: RedisKeys | None = None
    if any(k in NODES for k in relays):
        redis = RedisKeys(args.redis_url)
        redis.ping()
    sizes = QUICK if args.quick else Sizes()
    # Every size with a command-line flag of the same name (the others have none: None).
    overrides = {f.name: getattr(args, f.name, None) for f in fields(Sizes)}
    sizes = replace(sizes, **{k: v for k, v in overrides.items() if v is not None})
    sdk = not args.no_sdk and sdk_available()
    raise_nofile()
    command = shlex.join(["python", "bench/run.py", *(sys.argv[1:] if argv is None else argv)])
    print(f"runwire bench: {command}", flush=True)
    print(
        f"  {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"runwire agent {'agent_side SDK' if sdk else 'raw frames'}, "
        f"{args.loadgen_procs} load-generator processes",
        flush=True,
    )
    started = time.monotonic()
    if args.capacity:
        rates = [float(r) for r in args.capacity.split(",") if r]
        allowance = args.rollup_window + (args.sdk_rollup_window or 0.0)
        found = capacity(
            sizes,
            relays,
            rates,
            start=args.capacity_start,
            most=args.capacity_most,
            log=lambda line: print(line, flush=True),
            loadgen_procs=args.loadgen_procs,
            allowance=allowance,
        )
        table = render_capacity(found, relays, allowance)
        print(f"\n{table}\n\n({time.monotonic() - started:.0f} s)", flush=True)
        report = {"command": command, "sizes": asdict(sizes), "capacity": found, "table": table}
        if args.out:
            args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        return report
    try:
        results = measure(
            sizes,
            relays,
            sdk=sdk,
            log=lambda line: print(line, flush=True),
            policy=Policy(
                quiet_wait=args.quiet_wait,
                budget=args.budget,
                retries=(0 if args.quick else 2) if args.retries is None else args.retries,
            ),
            redis=redis,
            phases=args.phases.split(",") if args.phases else None,
            loadgen_procs=args.loadgen_procs,
        )
    finally:
        if redis is not None:
            redis.close()
    single = [k for k in relays if k not in NODES]
    metrics = compute_metrics(results, single)
    table = render_table(metrics, sizes, single) if single else ""
    compared = [k for k in ("sqlite", *REDIS_KINDS) if k in relays and (k != "sqlite" or redis)]
    redis_metrics = compute_redis_metrics(results, compared) if redis else {}
    redis_table = render_redis_table(redis_metrics, sizes, compared) if redis else ""
    half_load = compute_half_load(results, relays) if redis else {}
    half_table = render_half_table(half_load, sizes)
    print()
    print("\n\n".join(t for t in (table, redis_table, half_table) if t))
    print(f"\n({time.monotonic() - started:.0f} s)", flush=True)
    report = {
        "command": command,
        "sizes": asdict(sizes),
        "sdk": sdk,
        "loadgen_processes": args.loadgen_procs,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "metrics": metrics,
        "targets": {m.key: m.target for m in metrics_of(sizes) if m.target},
        "table": table,
        "phases": results,
    }
    if redis is not None:
        report["redis"] = {
            "url": redis.url,
            "key_prefix": f"{redis.run}-<n>:",
            "metrics": redis_metrics,
            "targets": {m.key: m.target for m in redis_metrics_of(sizes) if m.target},
            "table": redis_table,
            "half_load": half_load,
            "half_table": half_table,
        }
    if args.out is not None:
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return report


if __name__ == "__main__":
    main()
