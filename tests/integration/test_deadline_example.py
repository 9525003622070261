"""docs/howto/run-deadlines-and-liveness.md: its code is examples/deadline_agent.py, which
runs and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys

from .harness import ROOT

DOC = ROOT / "docs" / "howto" / "run-deadlines-and-liveness.md"
EXAMPLE = ROOT / "examples" / "deadline_agent.py"


def test_the_pages_code_is_the_example() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks
    source = EXAMPLE.read_text()
    for block in blocks:
        assert block in source


def test_the_example_runs_and_the_run_ends_run_timeout() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.splitlines()
    assert "client: cancelled RUN_TIMEOUT" in lines
    assert any(line.startswith("agent: RUN_TIMEOUT: ") for line in lines)
