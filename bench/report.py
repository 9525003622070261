"""What the benchmark reports: its sizes, the metrics, the tables.

``compute_metrics`` turns the raw numbers of each measurement into one value
per metric and relay; ``render_table`` prints them as a Markdown table with
the ratio to the baseline and the issue's targets. ``compute_redis_metrics``
and ``render_redis_table`` do the same for the SQLite relay against one and
two relay nodes on Redis (``--redis``); ``compute_half_load`` and
``render_half_table`` put the per-node CPU of two nodes next to what half the
load costs single relays (the baseline, the memory store, one node on Redis).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "METRICS",
    "QUICK",
    "REDIS_METRICS",
    "Metric",
    "RedisMetric",
    "Sizes",
    "compute_half_load",
    "compute_metrics",
    "compute_redis_metrics",
    "metrics_of",
    "redis_metrics_of",
    "render_half_table",
    "render_redis_table",
    "render_table",
]


@dataclass(frozen=True)
class Sizes:
    """How big and how long each measurement is."""

    sessions: int = 100
    rate: float = 20.0
    """Tokens per second per session for the fixed-load measurements."""
    warmup: float = 1.0
    duration: float = 3.0
    steer_interval: float = 0.25
    steer_rate: float | None = None
    """Tokens per second per session while steering (None: ``rate``; 0: as fast as taken)."""
    clients: int = 1000
    run_tokens: int = 5000
    window: int = 16
    probes: int = 20
    """Sessions on the SDKs in the steering measurement; the other sessions speak raw frames."""
    sdk_rollup_window: float = 0.0
    """The agent SDK's ``rollup_window`` (seconds) where the SDK runs the agent (0: none)."""


QUICK = Sizes(
    sessions=3,
    probes=2,
    rate=20.0,
    warmup=0.1,
    duration=0.4,
    steer_interval=0.05,
    clients=30,
    run_tokens=500,
)


@dataclass(frozen=True)
class Metric:
    """A row of the table."""

    key: str
    label: str
    unit: str
    target: str
    check: Callable[[float, float], bool] | None = None
    """``check(value, baseline)``: whether a runwire value meets the target."""


def _steering(sizes: Sizes) -> tuple[str, str]:
    """Labels of the steering measurement: who is on the SDKs, and the load meanwhile."""
    n = sizes.sessions
    steer_rate = sizes.rate if sizes.steer_rate is None else sizes.steer_rate
    steering = f"{n} x {steer_rate:g} tok/s" if steer_rate else f"{n} streaming flat out"
    return f"{min(sizes.probes, n)} on the SDKs", steering


def metrics_of(sizes: Sizes) -> list[Metric]:
    """The rows of the table, in order, labelled for these sizes."""
    n = sizes.sessions
    at_rate = f"{n} x {sizes.rate:g} tok/s"
    probes, steering = _steering(sizes)
    return [
        Metric(
            "delivered_per_s_1",
            "delivered tokens/s, 1 session",
            "/s",
            ">= baseline",
            lambda v, b: v >= b,
        ),
        Metric(
            "delivered_per_s_n",
            f"delivered tokens/s, {n} sessions",
            "/s",
            ">= baseline",
            lambda v, b: v >= b,
        ),
        Metric("tokens_per_frame_n", f"tokens per deliver frame, {n} sessions", "", ""),
        Metric(
            "cpu_s_per_10k",
            f"relay CPU s / 10k delivered, {n} sessions",
            "s",
            "< baseline",
            lambda v, b: v < b,
        ),
        Metric("relay_busy_n", f"relay CPU busy, {n} sessions", "%", ""),
        Metric("loadgen_busy_n", f"loadgen CPU busy, {n} sessions", "%", ""),
        Metric("latency_p50_ms", f"publish->deliver p50, {at_rate}", "ms", ""),
        Metric("latency_p99_ms", f"publish->deliver p99, {at_rate}", "ms", ""),
        Metric("cpu_s_per_10k_fixed", f"relay CPU s / 10k delivered, {at_rate}", "s", ""),
        Metric("steer_p50_ms", f"steer->on_steer p50, {probes}, {steering}", "ms", ""),
        Metric(
            "steer_p99_ms",
            f"steer->on_steer p99, {probes}, {steering}",
            "ms",
            "< 10 ms",
            lambda v, b: v < 10.0,
        ),
        Metric("steer_rest_p99_ms", "  same run, the raw sessions: steer->agent p99", "ms", ""),
        Metric("relay_busy_steer", f"relay CPU busy, {steering}", "%", ""),
        Metric("loadgen_busy_steer", f"loadgen CPU busy, {steering}", "%", ""),
        Metric("steer_all_p50_ms", "every session on the SDKs: steer->on_steer p50", "ms", ""),
        Metric("steer_all_p99_ms", "every session on the SDKs: steer->on_steer p99", "ms", ""),
        Metric("loadgen_busy_steer_all", "every session on the SDKs: loadgen CPU busy", "%", ""),
        Metric("latency_raw_p50_ms", f"raw frames: publish->deliver p50, {at_rate}", "ms", ""),
        Metric("latency_raw_p99_ms", f"raw frames: publish->deliver p99, {at_rate}", "ms", ""),
        Metric("steer_raw_p50_ms", f"raw frames: steer->agent p50, {steering}", "ms", ""),
        Metric("steer_raw_p99_ms", f"raw frames: steer->agent p99, {steering}", "ms", ""),
        Metric(
            "idle_kib_per_client",
            f"relay KiB per idle client, {sizes.clients}",
            "KiB",
            "<= 20 KiB",
            lambda v, b: v <= 20.0,
        ),
        Metric("other_busy_max", "other processes' CPU, worst phase", "%", ""),
    ]


METRICS: tuple[str, ...] = tuple(m.key for m in metrics_of(Sizes()))


# ---------------------------------------------------------------- metrics --


def _div(a: float, b: float) -> float:
    return a / b if b else math.nan


def _measured(results: dict[str, dict[str, Any]], phase: str, kind: str) -> dict[str, Any]:
    """The result of relay ``kind`` on ``phase``: empty when it was not measured or failed."""
    value = results.get(phase, {}).get(kind, {})
    return value if "failed" not in value else {}


def compute_metrics(results: dict[str, dict[str, Any]], relays: Sequence[str]) -> dict[str, Any]:
    """``{relay: {metric: value}}`` (NaN where a phase failed)."""
    out: dict[str, dict[str, float]] = {}
    for kind in relays:

        def get(phase: str, k: str = kind) -> dict[str, Any]:
            return _measured(results, phase, k)

        one, many, lat, steer, steer_all, idle = (
            get(p)
            for p in ("throughput_1", "throughput_n", "latency", "steer", "steer_all", "idle")
        )
        # Without the SDK (and for the baseline) the main phases are the raw ones.
        bare = kind in ("baseline", "node")
        lat_raw = get("latency_raw") if "latency_raw" in results and not bare else lat
        steer_raw = get("steer_raw") if "steer_raw" in results and not bare else steer
        if bare or "steer_all" not in results:
            steer_all = steer
        nan = math.nan
        streaming = [one, many, lat, steer, steer_all, lat_raw, steer_raw]
        out[kind] = {
            "delivered_per_s_1": _div(one.get("tokens", nan), one.get("seconds", nan)),
            "delivered_per_s_n": _div(many.get("tokens", nan), many.get("seconds", nan)),
            "tokens_per_frame_n": _div(many.get("tokens", nan), many.get("frames", nan)),
            "cpu_s_per_10k": 1e4 * _div(many.get("relay_cpu_s", nan), many.get("tokens", nan)),
            "relay_busy_n": _busy(many, "relay_cpu_s"),
            "loadgen_busy_n": _busy(many, "loadgen_cpu_s"),
            "latency_p50_ms": _pct(lat, "latency", "p50_ms"),
            "latency_p99_ms": _pct(lat, "latency", "p99_ms"),
            "cpu_s_per_10k_fixed": 1e4 * _div(lat.get("relay_cpu_s", nan), lat.get("tokens", nan)),
            "steer_p50_ms": _pct(steer, "steer", "p50_ms"),
            "steer_p99_ms": _pct(steer, "steer", "p99_ms"),
            # No probes (the baseline, --no-sdk): every session is a raw one.
            "steer_rest_p99_ms": _pct(
                steer, "steer_rest" if "steer_rest" in steer else "steer", "p99_ms"
            ),
            "relay_busy_steer": _busy(steer, "relay_cpu_s"),
            "loadgen_busy_steer": _busy(steer, "loadgen_cpu_s"),
            "steer_all_p50_ms": _pct(steer_all, "steer", "p50_ms"),
            "steer_all_p99_ms": _pct(steer_all, "steer", "p99_ms"),
            "loadgen_busy_steer_all": _busy(steer_all, "loadgen_cpu_s"),
            "latency_raw_p50_ms": _pct(lat_raw, "latency", "p50_ms"),
            "latency_raw_p99_ms": _pct(lat_raw, "latency", "p99_ms"),
            "steer_raw_p50_ms": _pct(steer_raw, "steer", "p50_ms"),
            "steer_raw_p99_ms": _pct(steer_raw, "steer", "p99_ms"),
            "idle_kib_per_client": idle.get("bytes_per_client", nan) / 1024,
            "other_busy_max": _worst(_busy(r, "other_cpu_s") for r in streaming),
        }
    return out


def _worst(values: Iterable[float]) -> float:
    """The largest of the measured values (NaN if none was)."""
    return max((v for v in values if not math.isnan(v)), default=math.nan)


def _busy(result: dict[str, Any], key: str) -> float:
    return 100 * _div(result.get(key, math.nan), result.get("seconds", math.nan))


def _pct(result: dict[str, Any], kind: str, key: str) -> float:
    return float(result.get(kind, {}).get(key, math.nan))


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render_table(metrics: dict[str, Any], sizes: Sizes, relays: Sequence[str]) -> str:
    """The results as a Markdown table: one row per metric, a column per relay."""
    runwire = [k for k in relays if k not in ("baseline", "node")]
    head = ["metric", *relays]
    if "baseline" in relays:
        head += [f"{k} / baseline" for k in runwire]
    if "node" in relays:
        head += [f"{k} / node" for k in runwire]
    head += ["target", "met"]
    rows = [head]
    for m in metrics_of(sizes):
        row = [m.label + (f" ({m.unit})" if m.unit and m.unit not in ("/s", "") else "")]
        row += [_fmt(metrics[k][m.key]) for k in relays]
        base = metrics.get("baseline", {}).get(m.key, math.nan)
        if "baseline" in relays:
            # A ratio of CPU-busy percentages says nothing; leave those cells empty.
            comparable = m.unit != "%"
            row += [
                _fmt(_div(metrics[k][m.key], base)) + "x" if comparable else "" for k in runwire
            ]
        if "node" in relays:
            node = metrics["node"][m.key]
            row += [
                _fmt(_div(metrics[k][m.key], node)) + "x" if m.unit != "%" else "" for k in runwire
            ]
        met = ""
        if m.check is not None:
            marks = []
            for k in runwire:
                value = metrics[k][m.key]
                if math.isnan(value) or ("baseline" in m.target and math.isnan(base)):
                    marks.append(f"{k} n/a")
                    continue
                marks.append(f"{k} {'yes' if m.check(value, base) else 'NO'}")
            met = ", ".join(marks)
        rows.append([*row, m.target, met])
    return _markdown(rows)


# ------------------------------------------------------------------ Redis --

REDIS_KINDS = ("redis1", "redis2")
"""One and two relay nodes on Redis (the columns of the Redis table besides ``sqlite``)."""


@dataclass(frozen=True)
class RedisMetric:
    """A row of the Redis table; ``check(value, redis1's value)`` judges ``judged`` columns."""

    key: str
    label: str
    unit: str
    target: str = ""
    check: Callable[[float, float], bool] | None = None
    judged: tuple[str, ...] = REDIS_KINDS


def redis_metrics_of(sizes: Sizes) -> list[RedisMetric]:
    """The rows of the Redis table, in order, labelled for these sizes."""
    n = sizes.sessions
    at_rate = f"{n} x {sizes.rate:g} tok/s"
    half = max(1, n // 2)
    probes, steering = _steering(sizes)
    within = "<= 1.2x redis1"
    rt = "< 0.2"

    def scales(value: float, one: float) -> bool:
        return value <= 1.2 * one

    def under_rt(value: float, _: float) -> bool:
        return value < 0.2

    def under_25(value: float, _: float) -> bool:
        return value < 25.0

    return [
        RedisMetric("delivered_per_s_n", f"delivered tokens/s, {n} sessions", "/s"),
        RedisMetric("tokens_per_frame_n", f"tokens per deliver frame, {n} sessions", ""),
        RedisMetric(
            "cpu_s_per_10k",
            f"relay CPU s / 10k delivered, {n} sessions, per node",
            "s",
            within,
            scales,
            ("redis2",),
        ),
        RedisMetric(
            "cluster_cpu_s_per_10k", f"all nodes' CPU s / 10k delivered, {n} sessions", "s"
        ),
        RedisMetric("relay_busy_n", f"relay CPU busy, {n} sessions, busiest node", "%"),
        RedisMetric("loadgen_busy_n", f"loadgen CPU busy, {n} sessions", "%"),
        RedisMetric(
            "round_trips_per_token_n",
            f"Redis round trips / delivered token, {n} sessions",
            "",
            rt,
            under_rt,
        ),
        RedisMetric(
            "redis_reads_per_token_n", f"Redis read events / delivered token, {n} sessions", ""
        ),
        RedisMetric("redis_cpu_s_per_10k", f"Redis CPU s / 10k delivered, {n} sessions", "s"),
        RedisMetric("redis_us_per_append", f"Redis CPU us / append, {n} sessions", "us"),
        RedisMetric("redis_busy_n", f"Redis CPU busy, {n} sessions", "%"),
        RedisMetric("latency_p50_ms", f"publish->deliver p50, {at_rate}", "ms", "", None, ()),
        RedisMetric(
            "latency_p99_ms", f"publish->deliver p99, {at_rate}", "ms", "< 25 ms", under_25
        ),
        RedisMetric(
            "latency_far_p99_ms",
            f"publish->deliver p99 on the other node, {at_rate}",
            "ms",
            "< 25 ms",
            under_25,
            ("redis2",),
        ),
        RedisMetric("steer_p50_ms", f"steer->on_steer p50, {probes}, {steering}", "ms"),
        RedisMetric("steer_p99_ms", f"steer->on_steer p99, {probes}, {steering}", "ms"),
        RedisMetric(
            "cpu_s_per_10k_fixed",
            f"relay CPU s / 10k delivered, {at_rate}, per node",
            "s",
            within,
            scales,
            ("redis2",),
        ),
        RedisMetric(
            "cpu_s_per_10k_half",
            f"relay CPU s / 10k delivered, {half} x {sizes.rate:g} tok/s, one node",
            "s",
        ),
        RedisMetric(
            "cpu_vs_same_load",
            f"per-node CPU above / one node's at {half} x {sizes.rate:g} tok/s",
            "x",
        ),
        RedisMetric(
            "wakes_per_1k_fixed",
            f"relay wake-ups / 1k delivered, {at_rate}, per node",
            "",
        ),
        RedisMetric(
            "wakes_per_1k_half",
            f"relay wake-ups / 1k delivered, {half} x {sizes.rate:g} tok/s, one node",
            "",
        ),
        RedisMetric("sys_share_fixed", f"relay CPU in the kernel, {at_rate}", "%"),
        RedisMetric(
            "round_trips_per_token_fixed",
            f"Redis round trips / delivered token, {at_rate}",
            "",
            rt,
            under_rt,
        ),
        RedisMetric(
            "redis_reads_per_token_fixed", f"Redis read events / delivered token, {at_rate}", ""
        ),
        RedisMetric("redis_cpu_s_per_10k_fixed", f"Redis CPU s / 10k delivered, {at_rate}", "s"),
        RedisMetric("loadgen_busy_fixed", f"loadgen CPU busy, {at_rate}", "%"),
        RedisMetric("latency_raw_p50_ms", f"raw frames: publish->deliver p50, {at_rate}", "ms"),
        RedisMetric(
            "latency_raw_p99_ms",
            f"raw frames: publish->deliver p99, {at_rate}",
            "ms",
            "< 25 ms",
            under_25,
        ),
        RedisMetric(
            "round_trips_per_token_raw",
            f"raw frames: Redis round trips / delivered token, {at_rate}",
            "",
        ),
        RedisMetric("other_busy_max", "other processes' CPU, worst phase", "%"),
    ]


REDIS_METRICS: tuple[str, ...] = tuple(m.key for m in redis_metrics_of(Sizes()))


def _node_cpu_per_10k(result: dict[str, Any]) -> float:
    """The busiest node's CPU seconds per 10k tokens delivered to its own subscribers."""
    cpus, tokens = result.get("node_cpu_s"), result.get("node_tokens")
    if cpus and tokens:
        return max(1e4 * _div(c, t) for c, t in zip(cpus, tokens, strict=True))
    return 1e4 * _div(result.get("relay_cpu_s", math.nan), result.get("tokens", math.nan))


def _node_wakes_per_1k(result: dict[str, Any]) -> float:
    """The most wake-ups (voluntary context switches) a node made per 1,000 tokens
    delivered to its own subscribers (all tokens on one node)."""
    wakes = result.get("node_wakes")
    if not wakes:
        return math.nan
    tokens = result.get("node_tokens") or [result.get("tokens", math.nan)]
    return max(1e3 * _div(w, t) for w, t in zip(wakes, tokens, strict=True))


def _sys_share(result: dict[str, Any]) -> float:
    """The share of the relay nodes' CPU spent in the kernel, %."""
    system = result.get("node_sys_s")
    if not system:
        return math.nan
    # At most 100: the total is the same seconds summed in another order (a quick run whose
    # CPU was all in the kernel gave 100.00000000000044).
    share = 100 * _div(sum(system), result.get("relay_cpu_s", math.nan))
    return 100.0 if share > 100 else share  # (NaN stays NaN)


def _node_busy(result: dict[str, Any]) -> float:
    cpus = result.get("node_cpu_s") or [result.get("relay_cpu_s", math.nan)]
    return 100 * _div(max(cpus), result.get("seconds", math.nan))


def _round_trips(result: dict[str, Any]) -> float:
    """The store's round trips to Redis, all nodes (``runwire_store_round_trips_total``)."""
    nodes = result.get("node_metrics") or [{}]
    return float(sum(m.get("runwire_store_round_trips_total", math.nan) for m in nodes))


def _redis(result: dict[str, Any], key: str) -> float:
    return float(result.get("redis", {}).get(key, math.nan))


def _appends(result: dict[str, Any]) -> float:
    """Entries the append script stored: it publishes each once (``SPUBLISH`` / ``PUBLISH``)."""
    commands = result.get("redis", {}).get("commands")
    if commands is None:
        return math.nan
    return float(sum(commands.get(c, {}).get("calls", 0) for c in ("spublish", "publish")))


def compute_redis_metrics(
    results: dict[str, dict[str, Any]], kinds: Sequence[str]
) -> dict[str, dict[str, float]]:
    """``{kind: {metric: value}}`` for the Redis table (NaN where a phase is missing)."""
    out: dict[str, dict[str, float]] = {}
    nan = math.nan
    for kind in kinds:

        def get(phase: str, k: str = kind) -> dict[str, Any]:
            return _measured(results, phase, k)

        many, lat, half = get("throughput_n"), get("latency"), get("latency_half", "redis1")
        steer = get("steer")
        raw = get("latency_raw") if "latency_raw" in results else lat
        toks_n, toks_l = many.get("tokens", nan), lat.get("tokens", nan)
        out[kind] = {
            "delivered_per_s_n": _div(toks_n, many.get("seconds", nan)),
            "tokens_per_frame_n": _div(toks_n, many.get("frames", nan)),
            "cpu_s_per_10k": _node_cpu_per_10k(many),
            "cluster_cpu_s_per_10k": 1e4 * _div(many.get("relay_cpu_s", nan), toks_n),
            "relay_busy_n": _node_busy(many),
            "loadgen_busy_n": _busy(many, "loadgen_cpu_s"),
            "round_trips_per_token_n": _div(_round_trips(many), toks_n),
            "redis_reads_per_token_n": _div(_redis(many, "total_reads_processed"), toks_n),
            "redis_cpu_s_per_10k": 1e4 * _div(_redis(many, "cpu_s"), toks_n),
            "redis_us_per_append": 1e6 * _div(_redis(many, "cpu_s"), _appends(many)),
            "redis_busy_n": 100 * _div(_redis(many, "cpu_s"), many.get("seconds", nan)),
            "latency_p50_ms": _pct(lat, "latency", "p50_ms"),
            "latency_p99_ms": _pct(lat, "latency", "p99_ms"),
            "latency_far_p99_ms": _pct(lat, "latency_far", "p99_ms"),
            "steer_p50_ms": _pct(steer, "steer", "p50_ms"),
            "steer_p99_ms": _pct(steer, "steer", "p99_ms"),
            "cpu_s_per_10k_fixed": _node_cpu_per_10k(lat),
            "cpu_s_per_10k_half": _node_cpu_per_10k(half) if kind == "redis1" else nan,
            "cpu_vs_same_load": (
                _div(_node_cpu_per_10k(lat), _node_cpu_per_10k(half)) if kind == "redis2" else nan
            ),
            "wakes_per_1k_fixed": _node_wakes_per_1k(lat),
            "wakes_per_1k_half": _node_wakes_per_1k(half) if kind == "redis1" else nan,
            "sys_share_fixed": _sys_share(lat),
            "round_trips_per_token_fixed": _div(_round_trips(lat), toks_l),
            "redis_reads_per_token_fixed": _div(_redis(lat, "total_reads_processed"), toks_l),
            "redis_cpu_s_per_10k_fixed": 1e4 * _div(_redis(lat, "cpu_s"), toks_l),
            "loadgen_busy_fixed": _busy(lat, "loadgen_cpu_s"),
            "latency_raw_p50_ms": _pct(raw, "latency", "p50_ms"),
            "latency_raw_p99_ms": _pct(raw, "latency", "p99_ms"),
            "round_trips_per_token_raw": _div(_round_trips(raw), raw.get("tokens", nan)),
            "other_busy_max": _worst(_busy(r, "other_cpu_s") for r in (many, lat, raw)),
        }
    return out


def render_redis_table(
    metrics: dict[str, dict[str, float]], sizes: Sizes, kinds: Sequence[str]
) -> str:
    """The SQLite relay against relay nodes on Redis, as a Markdown table."""
    head = ["metric", *kinds]
    ratio = all(k in kinds for k in REDIS_KINDS)
    if ratio:
        head.append("redis2 / redis1")
    head += ["target", "met"]
    rows = [head]
    for m in redis_metrics_of(sizes):
        unit = m.unit not in ("/s", "", "x")
        row = [m.label + (f" ({m.unit})" if unit else "")]
        row += [_fmt(metrics[k][m.key]) for k in kinds]
        one = metrics.get("redis1", {}).get(m.key, math.nan)
        if ratio:
            both = _div(metrics["redis2"][m.key], one)
            ratio_ok = m.unit not in ("%", "x") and not math.isnan(both)
            row.append(_fmt(both) + "x" if ratio_ok else "")
        marks = []
        if m.check is not None:
            for k in kinds:
                if k not in m.judged:
                    continue
                value = metrics[k][m.key]
                if math.isnan(value) or ("redis1" in m.target and math.isnan(one)):
                    marks.append(f"{k} n/a")
                else:
                    marks.append(f"{k} {'yes' if m.check(value, one) else 'NO'}")
        rows.append([*row, m.target, ", ".join(marks)])
    return _markdown(rows)


HALF_KINDS = ("baseline", "memory", "redis1")
"""The single relays ``compute_half_load`` compares at the whole and at half the load."""


def compute_half_load(
    results: dict[str, dict[str, Any]], kinds: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Relay CPU per 10k delivered tokens at the fixed load (``latency``) and at half its
    sessions (``latency_half``), and their ratio, for each single relay of ``HALF_KINDS``
    in ``kinds``; and ``redis2``: one node's figure at the whole load against the busier
    node of two, each of which carries half of it (the per-node target's ratio).

    A relay that was not measured at both loads is left out.
    """
    out: dict[str, dict[str, float]] = {}

    def cpu(phase: str, kind: str) -> float:
        return _node_cpu_per_10k(_measured(results, phase, kind))  # NaN when not measured

    pairs = {k: (cpu("latency", k), cpu("latency_half", k)) for k in HALF_KINDS if k in kinds}
    if "redis2" in kinds and "redis1" in kinds:
        pairs["redis2"] = (cpu("latency", "redis1"), cpu("latency", "redis2"))
    for kind, (full, half) in pairs.items():
        if math.isnan(full) and math.isnan(half):
            continue
        out[kind] = {"cpu_s_per_10k_full": full, "cpu_s_per_10k_half": half}
        out[kind]["half_over_full"] = _div(half, full)
    return out


def render_half_table(half_load: dict[str, dict[str, float]], sizes: Sizes) -> str:
    """``compute_half_load`` as a Markdown table (empty when nothing was measured)."""
    if not half_load:
        return ""
    n, half = sizes.sessions, max(1, sizes.sessions // 2)
    labels = {
        "baseline": "baseline (one process, no store)",
        "memory": "memory (one relay, no Redis)",
        "redis1": "redis1 (one node on Redis)",
        "redis2": "redis2, per node (two nodes share the whole; whole: redis1)",
    }
    head = [
        "relay CPU s / 10k delivered",
        f"whole: {n} x {sizes.rate:g} tok/s (s)",
        f"half: {half} x {sizes.rate:g} tok/s (s)",
        "half / whole",
    ]
    rows = [head]
    for kind, values in half_load.items():
        ratio = values["half_over_full"]
        rows.append(
            [
                labels.get(kind, kind),
                _fmt(values["cpu_s_per_10k_full"]),
                _fmt(values["cpu_s_per_10k_half"]),
                "n/a" if math.isnan(ratio) else _fmt(ratio) + "x",
            ]
        )
    return _markdown(rows)


def _markdown(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, r in enumerate(rows):
        cells = [
            c.ljust(w) if j == 0 else c.rjust(w)
            for j, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
