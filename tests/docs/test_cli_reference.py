"""docs/reference/cli.md names every option of every ``runwire`` subcommand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runwire.cli import main

ROOT = Path(__file__).resolve().parents[2]


def options_of(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", capsys.readouterr().out)) - {"--help"}


@pytest.mark.parametrize("command", ["relay", "worker", "demo", "token"])
def test_every_option_is_documented(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    section = page.split(f"## `runwire {command}`", 1)[1].split("\n## ", 1)[0]
    options = options_of(command, capsys)
    assert options, f"runwire {command} --help lists no option"
    missing = sorted(o for o in options if f"`{o}" not in section)
    assert not missing, f"docs/reference/cli.md does not document runwire {command} {missing}"
