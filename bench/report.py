"""What the benchmark reports: its sizes, the metrics, the table.

``compute_metrics`` turns the raw numbers of each measurement into one value
per metric and relay; ``render_table`` prints them as a Markdown table with
the ratio to the baseline and the issue's targets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["METRICS", "QUICK", "Metric", "Sizes", "compute_metrics", "metrics_of", "render_table"]


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


QUICK = Sizes(
    sessions=3,
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


def metrics_of(sizes: Sizes) -> list[Metric]:
    """The rows of the table, in order, labelled for these sizes."""
    n = sizes.sessions
    at_rate = f"{n} x {sizes.rate:g} tok/s"
    steer_rate = sizes.rate if sizes.steer_rate is None else sizes.steer_rate
    steering = f"{n} x {steer_rate:g} tok/s" if steer_rate else f"{n} streaming flat out"
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
        Metric("steer_p50_ms", f"steer->on_steer p50, {steering}", "ms", ""),
        Metric(
            "steer_p99_ms",
            f"steer->on_steer p99, {steering}",
            "ms",
            "< 10 ms",
            lambda v, b: v < 10.0,
        ),
        Metric("loadgen_busy_steer", f"loadgen CPU busy, {steering}", "%", ""),
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


def compute_metrics(results: dict[str, dict[str, Any]], relays: Sequence[str]) -> dict[str, Any]:
    """``{relay: {metric: value}}`` (NaN where a phase failed)."""
    out: dict[str, dict[str, float]] = {}
    for kind in relays:

        def get(phase: str, k: str = kind) -> dict[str, Any]:
            value = results.get(phase, {}).get(k, {})
            return value if "failed" not in value else {}

        one, many, lat, steer, idle = (
            get(p) for p in ("throughput_1", "throughput_n", "latency", "steer", "idle")
        )
        # Without the SDK (and for the baseline) the main phases are the raw ones.
        lat_raw = get("latency_raw") if "latency_raw" in results and kind != "baseline" else lat
        steer_raw = get("steer_raw") if "steer_raw" in results and kind != "baseline" else steer
        nan = math.nan
        streaming = [one, many, lat, steer, lat_raw, steer_raw]
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
            "loadgen_busy_steer": _busy(steer, "loadgen_cpu_s"),
            "latency_raw_p50_ms": _pct(lat_raw, "latency", "p50_ms"),
            "latency_raw_p99_ms": _pct(lat_raw, "latency", "p99_ms"),
            "steer_raw_p50_ms": _pct(steer_raw, "steer", "p50_ms"),
            "steer_raw_p99_ms": _pct(steer_raw, "steer", "p99_ms"),
            "idle_kib_per_client": idle.get("bytes_per_client", nan) / 1024,
            "other_busy_max": max((_busy(r, "other_cpu_s") for r in streaming), default=nan),
        }
    return out


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
    runwire = [k for k in relays if k != "baseline"]
    head = ["metric", *relays]
    if "baseline" in relays:
        head += [f"{k} / baseline" for k in runwire]
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
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
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
