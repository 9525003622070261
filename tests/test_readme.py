"""The README's two set-up commands stay true: CI runs the README's exact test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = bash_blocks(readme)
    install, tests = blocks[0], blocks[1]
    assert "pip install -e '.[dev]'" in install and "runwire demo" in install
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines()


def test_the_console_script_is_declared() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'runwire = "runwire.cli:main"' in pyproject
