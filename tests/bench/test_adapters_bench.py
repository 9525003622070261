"""Smoke test of ``bench/adapters.py``: both modes run end to end and report their figures.

It checks that the script works (relay, fake provider and agent processes,
subscribers, the table, the JSON), never how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_adapter_bench_runs_both_modes(tmp_path: Path) -> None:
    out = tmp_path / "adapters.json"
    command = [
        sys.executable,
        str(ROOT / "bench" / "adapters.py"),
        "--sessions",
        "3",
        "--rate",
        "20",
        "--warmup",
        "1",
        "--duration",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "agent_us_per_token" in proc.stdout
    results = json.loads(out.read_text())
    for mode in ("plain", "adapter"):
        assert results[mode]["tokens"] > 0 and results[mode]["errors"] == 0
        assert results[mode]["agent_us_per_token"] > 0
    assert set(results["ratio"]) == {"relay_us_per_token", "agent_us_per_token"}
    assert set(results["split_us_per_event"]) == {"sdk_construct", "convert", "checkpoint"}
