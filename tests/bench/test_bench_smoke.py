"""Smoke test of the benchmark: ``bench/run.py --quick`` runs and reports every metric.

It checks that the script works end to end (three relays as processes, a
load-generator process, the table, the JSON; with ``--redis`` one and two relay
processes on Redis and their table), never how fast anything is.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from tests.redis_cluster import RedisCluster as RedisClusterNodes

ROOT = Path(__file__).resolve().parents[2]
RELAYS = ("baseline", "memory", "sqlite")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REDIS_METRICS = {
    "delivered_per_s_n",
    "tokens_per_frame_n",
    "cpu_s_per_10k",
    "cluster_cpu_s_per_10k",
    "relay_busy_n",
    "loadgen_busy_n",
    "round_trips_per_token_n",
    "redis_reads_per_token_n",
    "redis_cpu_s_per_10k",
    "redis_us_per_append",
    "redis_busy_n",
    "latency_p50_ms",
    "latency_p99_ms",
    "latency_far_p99_ms",
    "steer_p50_ms",
    "steer_p99_ms",
    "cpu_s_per_10k_fixed",
    "wakes_per_1k_fixed",
    "wakes_per_1k_half",
    "sys_share_fixed",
    "cpu_s_per_10k_half",
    "cpu_vs_same_load",
    "round_trips_per_token_fixed",
    "redis_reads_per_token_fixed",
    "redis_cpu_s_per_10k_fixed",
    "loadgen_busy_fixed",
    "latency_raw_p50_ms",
    "latency_raw_p99_ms",
    "round_trips_per_token_raw",
    "other_busy_max",
}
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
    "steer_rest_p99_ms",
    "relay_busy_steer",
    "loadgen_busy_steer",
    "steer_all_p50_ms",
    "steer_all_p99_ms",
    "loadgen_busy_steer_all",
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
        timeout=90,
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
    # The load came from two processes, each with its share of the sessions, pooled.
    assert report["loadgen_processes"] == 2
    steer = report["phases"]["steer"]["sqlite"]
    assert steer["loadgen_processes"] == 2 and steer["steer"]["n"] > 0
    assert steer["tokens"] > 0 and steer["loadgen_cpu_s"] > 0
    # Steering is probed through the SDKs on some sessions; the others, raw, count apart.
    assert steer["phase"]["sdk_sessions"] == 2 and steer["steer_rest"]["n"] > 0
    assert report["phases"]["steer_all"]["sqlite"]["phase"]["sdk_sessions"] is None
    assert "baseline" not in report["phases"]["steer_all"]
    assert report["command"].startswith("python bench/run.py --quick")
    assert "latency_half" not in report["phases"]  # a reference for runs with Redis only
    assert "| metric" in proc.stdout
    for label in ("delivered tokens/s", "steer->on_steer p99", "KiB per idle client"):
        assert label in proc.stdout


def test_quick_redis_run_reports_one_and_two_nodes_and_leaves_no_keys(tmp_path: Path) -> None:
    if os.environ.get("RUNWIRE_SKIP_REDIS") == "1":
        pytest.skip("RUNWIRE_SKIP_REDIS=1")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:  # never skip silently: CI starts a Redis
        pytest.fail(f"Redis at {REDIS_URL} is not reachable ({exc}); set RUNWIRE_SKIP_REDIS=1")
    out = tmp_path / "bench.json"
    argv = ["--quick", "--relays", "sqlite", "--redis", "--redis-url", REDIS_URL]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), *argv, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    table = report["redis"]["metrics"]
    assert set(table) == {"sqlite", "redis1", "redis2"}
    for kind, values in table.items():
        assert set(values) == REDIS_METRICS, kind
    for kind in ("redis1", "redis2"):
        for metric in ("delivered_per_s_n", "cpu_s_per_10k", "round_trips_per_token_n"):
            assert table[kind][metric] > 0, (kind, metric)
        assert table[kind]["latency_p99_ms"] > 0, kind
        assert table[kind]["steer_p99_ms"] > 0, kind  # a steer across nodes reached the agent
        assert table[kind]["wakes_per_1k_fixed"] > 0, kind
        assert 0 <= table[kind]["sys_share_fixed"] <= 100, (
            kind
        )  # (ticks of 10 ms: a quick run may see none)
    assert table["redis2"]["latency_far_p99_ms"] > 0
    # The half-load phase ran and delivered; at --quick sizes its CPU time can round to
    # zero (psutil's clock ticks every 10 ms), so its figures are checked as numbers only.
    half = report["phases"]["latency_half"]["redis1"]
    assert "failed" not in half and not half["errors"] and half["tokens"] > 0, half
    half_cpu, ratio = table["redis1"]["cpu_s_per_10k_half"], table["redis2"]["cpu_vs_same_load"]
    ratio = math.nan if ratio is None else ratio  # NaN is written as null in the JSON
    assert half_cpu >= 0
    assert math.isnan(ratio) if half_cpu == 0 else ratio > 0  # no ratio over a zero reading
    # The per-node ratio beside what half the load costs one node (SQLite has no half).
    half_load = report["redis"]["half_load"]
    assert set(half_load) == {"redis1", "redis2"}
    assert half_load["redis2"]["cpu_s_per_10k_full"] == table["redis1"]["cpu_s_per_10k_fixed"]
    assert half_load["redis2"]["cpu_s_per_10k_half"] == table["redis2"]["cpu_s_per_10k_fixed"]
    assert "half / whole" in proc.stdout
    for phase in ("throughput_n", "latency", "steer"):
        for kind in ("redis1", "redis2"):
            result = report["phases"][phase][kind]
            assert "failed" not in result, (phase, kind, result)
            assert not result["errors"], (phase, kind, result["error_codes"])
            assert result["relay_processes"] == (2 if kind == "redis2" else 1)
    assert report["phases"]["throughput_n"]["redis2"]["node_tokens"][1] > 0
    assert "| metric" in proc.stdout and "redis2 / redis1" in proc.stdout
    prefix = report["redis"]["key_prefix"].removesuffix("<n>:")
    assert prefix.startswith("bench")
    assert not list(client.scan_iter(match=f"{prefix}*", count=1000))
    client.close()


def test_redis_reads_reports_both_readers() -> None:
    done = subprocess.run(
        [sys.executable, "bench/redis_reads.py", "--messages", "50", "--rounds", "1",
         "--redis-url", REDIS_URL],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["redis-py", "wire"]
    for line in lines:
        assert float(line.split()[1]) > 0  # CPU per message, never how much


def test_the_kernel_share_is_a_share_whatever_the_float_sums() -> None:
    """The nodes' kernel seconds and their total CPU are the same readings summed apart:
    a quick run whose CPU was all in the kernel once reported 100.00000000000044 %."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from report import _sys_share
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert _sys_share({"node_sys_s": [0.1, 0.2], "relay_cpu_s": 0.3}) == 100.0
    assert _sys_share({"node_sys_s": [0.1], "relay_cpu_s": 0.4}) == 25.0
    assert math.isnan(_sys_share({"node_sys_s": [0.1], "relay_cpu_s": 0.0}))
    assert math.isnan(_sys_share({}))


def test_half_load_pairs_each_relay_with_itself_and_two_nodes_with_one() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from report import QUICK, compute_half_load, render_half_table
        from run import _measures
    finally:
        sys.path.remove(str(ROOT / "bench"))

    def phase(cpu: float, tokens: int, nodes: int = 1) -> dict[str, object]:
        if nodes == 1:
            return {"relay_cpu_s": cpu, "tokens": tokens}
        # Each node's CPU over the tokens its own subscribers got; the busier one counts.
        return {"relay_cpu_s": cpu * nodes, "node_cpu_s": [cpu, cpu * 0.9],
                "node_tokens": [tokens // 2, tokens // 2]}  # fmt: skip

    results = {
        "latency": {
            "baseline": phase(1.0, 20_000),
            "memory": phase(2.0, 20_000),
            "redis1": phase(2.0, 20_000),
            "redis2": phase(1.5, 20_000, nodes=2),
        },
        "latency_half": {
            "baseline": phase(0.6, 10_000),
            "memory": {"failed": "the relay did not start"},
            "redis1": phase(1.3, 10_000),
        },
    }
    half = compute_half_load(results, ["baseline", "memory", "redis1", "redis2"])
    assert half["baseline"] == {
        "cpu_s_per_10k_full": 0.5, "cpu_s_per_10k_half": 0.6, "half_over_full": 1.2,
    }  # fmt: skip
    assert math.isnan(half["memory"]["cpu_s_per_10k_half"])
    assert math.isnan(half["memory"]["half_over_full"])
    assert half["redis1"]["half_over_full"] == pytest.approx(1.3)
    # A node of two against one node at the whole load: 1.5 s over 10k tokens -> 1.5x 1.0.
    assert half["redis2"]["cpu_s_per_10k_full"] == 1.0
    assert half["redis2"]["cpu_s_per_10k_half"] == pytest.approx(1.5)
    assert compute_half_load(results, ["sqlite"]) == {}
    table = render_half_table(half, QUICK)
    assert "1.20x" in table and "1.50x" in table and "n/a" in table
    assert render_half_table({}, QUICK) == ""
    # Single relays run at half the load only beside relays on Redis.
    assert _measures("latency_half", "baseline", clustered=True)
    assert not _measures("latency_half", "baseline", clustered=False)
    assert not _measures("latency_half", "sqlite", clustered=True)
    assert _measures("latency_half", "redis1") and not _measures("latency_half", "redis2")


def test_fixed_work_reports_cpu_per_unit_at_each_rate() -> None:
    done = subprocess.run(
        [sys.executable, "bench/fixed_work.py", "--rates", "200,100", "--seconds", "0.3",
         "--rounds", "1", "--companions", "1", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert [run["rate"] for run in result["runs"]] == [200.0, 100.0]
    for run in result["runs"]:
        # The ticker's schedule: about rate x seconds units, each done (never how fast).
        assert 0.5 * run["rate"] * 0.3 <= run["units"] <= run["rate"] * 0.3 + 1, run
        assert run["cpu_s"] > 0 and run["us_per_unit"] > 0
    assert set(result["us_per_unit"]) == {"200", "100"} and result["companions"] == 1
    refused = subprocess.run(
        [sys.executable, "bench/fixed_work.py", "--rates", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "must be positive" in refused.stderr
    refused = subprocess.run(
        [sys.executable, "bench/fixed_work.py", "--companions", "-1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "companions must be 0 or more" in refused.stderr


def test_the_capacity_phase_steps_the_session_count_for_each_relay_and_rate(
    tmp_path: Path,
) -> None:
    out = tmp_path / "capacity.json"
    command = [
        sys.executable,
        str(ROOT / "bench" / "run.py"),
        "--quick",
        "--relays",
        "baseline,memory",
        "--capacity",
        "20,50",
        "--capacity-start",
        "2",
        "--capacity-most",
        "3",
        "--out",
        str(out),
    ]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(out.read_text())["capacity"]
    assert set(found) == {"20", "50"}
    for by_relay in found.values():
        assert set(by_relay) == {"baseline", "memory"}
        for result in by_relay.values():
            # Two, then three sessions (2 * 1.5): each step measured, the best one passed.
            assert [s["sessions"] for s in result["steps"]] in ([2], [2, 3])
            passed = [s["sessions"] for s in result["steps"] if s["ok"]]
            assert result["sessions"] == (max(passed) if passed else 0)
            for step in result["steps"]:
                assert step["ok"] == (step["p99_ms"] is not None and step["p99_ms"] < 50)
    assert "sessions carried (p99 < 50 ms" in proc.stdout


def test_cluster_shards_reports_each_masters_share_for_each_shard_count(
    redis_cluster: RedisClusterNodes,
) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "bench/cluster_shards.py",
            "--url",
            redis_cluster.url,
            "--sessions",
            "12",
            "--tokens",
            "5",
            "--rounds",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["shards"] for row in rows] == [1, 3]
    for row in rows:
        assert row["appends"] == 60
        assert len(row["master_cpu_shares"]) == len(row["master_command_shares"]) == 3
        assert row["busiest_master_cpu_us_per_append"] > 0
    # One shard: one master takes (nearly) every command of the run; three: each its part.
    assert max(rows[0]["master_command_shares"]) > 0.9
    assert max(rows[1]["master_command_shares"]) < 0.8
    leftover = []
    for port in redis_cluster.masters():
        leftover += redis_cluster.keys_on(port, "{bs*")
    assert leftover == []


def test_the_raw_agent_holds_tokens_for_the_sdk_window_as_pipe_does() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from peers import publish_coalesced
    finally:
        sys.path.remove(str(ROOT / "bench"))
    import asyncio

    class Conn:
        def __init__(self) -> None:
            self.appends: list[str] = []

        async def publish(self, session_id: str, entry: dict[str, object]) -> None:
            chunks = entry["chunks"]
            assert isinstance(chunks, list)
            self.appends.append("".join(c.get("delta", "") for c in chunks))

    async def tokens(n: int) -> AsyncIterator[str]:
        for i in range(n):
            await asyncio.sleep(0.01)
            yield f"t{i} "

    async def run(window: float) -> tuple[str, list[str]]:
        conn = Conn()
        ids = iter(range(1000))
        text = await publish_coalesced(
            conn,  # type: ignore[arg-type]
            "s",
            "r",
            "m",
            tokens(20),
            lambda: f"e{next(ids)}",
            window=window,
        )
        return text, conn.appends

    whole = "".join(f"t{i} " for i in range(20))
    text, appends = asyncio.run(run(0.0))
    assert text == whole and "".join(appends) == whole
    held_text, held = asyncio.run(run(0.05))
    assert held_text == whole and "".join(held) == whole
    # Tokens 10 ms apart, held 50 ms: about five to an append, and never one each.
    assert len(held) <= 8 < len(appends)
