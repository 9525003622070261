"""Smoke test of the benchmark: ``bench/run.py --quick`` runs and reports every metric.

It checks that the script works end to end (three relays as processes, a
load-generator process, the table, the JSON), never how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELAYS = ("baseline", "memory", "sqlite")
METRICS = {
    "delivered_per_s_1",
    "delivered_per_s_n",
    "tokens_per_frame_n",
    "cpu_s_per_10k",
    "relay_busy_n",
    "loadgen_busy_n",
    "latency_p50_ms",
    "latency_p99_ms",
    "cpu_s_per_10k_fixed",
    "steer_p50_ms",
    "steer_p99_ms",
    "loadgen_busy_steer",
    "latency_raw_p50_ms",
    "latency_raw_p99_ms",
    "steer_raw_p50_ms",
    "steer_raw_p99_ms",
    "idle_kib_per_client",
    "other_busy_max",
}


def test_quick_run_reports_every_metric_for_every_relay(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=28,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for relay in RELAYS:
        assert set(report["metrics"][relay]) == METRICS
        for metric in METRICS:
            assert isinstance(report["metrics"][relay][metric], float), (relay, metric)
    for phase, by_relay in report["phases"].items():
        for relay, result in by_relay.items():
            assert "failed" not in result, (phase, relay, result)
    assert report["command"].startswith("python bench/run.py --quick")
    assert "| metric" in proc.stdout
    for label in ("delivered tokens/s", "steer->on_steer p99", "KiB per idle client"):
        assert label in proc.stdout
