"""The JavaScript client's tests (tests/js/*.test.mjs) under Node's test runner.

They run the shared tree and publish lane vectors against ``client_side/js/runwire.js``
and its session against an in-memory relay; this test fails when any of them fails.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_node_runs_the_js_tests() -> None:
    node = shutil.which("node")
    assert node is not None, (
        "node is not installed: the JavaScript client's tests need Node.js 20+ "
        "(apt-get install -y nodejs; .ci/run does it)"
    )
    proc = subprocess.run(
        [node, "--test", "--test-reporter=tap", "tests/js/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"node --test failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    assert "# fail 0" in proc.stdout
    # The vectors really ran: one test per vector file, and none was skipped.
    vectors = len(list((ROOT / "tests" / "vectors" / "tree").glob("*.json")))
    assert proc.stdout.count("ok ") >= vectors
    # Every publish lane vector passed as its own test (tests/js/lane.test.mjs).
    lanes = sorted(p.name for p in (ROOT / "tests" / "vectors" / "lane").glob("*.json"))
    assert lanes
    for name in lanes:
        assert any(
            line.startswith("ok ") and line.endswith(f"lane vector {name}")
            for line in proc.stdout.splitlines()
        ), name
    assert "# skipped 0" in proc.stdout
