"""The README's two set-up commands stay true: CI runs the README's exact test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def section(text: str, heading: str) -> str:
    """The text under ``## heading``, up to the next heading of that level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = bash_blocks(readme)
    install, tests = blocks[0], blocks[1]
    assert "pip install -e '.[dev]'" in install and "runwire demo" in install
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines()


def test_the_set_up_section_has_exactly_the_two_commands() -> None:
    setup = section((ROOT / "README.md").read_text(), "Set up")
    assert len(bash_blocks(setup)) == 2
    assert bash_blocks(setup) == bash_blocks((ROOT / "README.md").read_text())[:2]


def test_the_set_up_section_names_what_ci_provisions() -> None:
    """Every Debian package .ci/run installs is in the README's one provisioning command."""
    setup = section((ROOT / "README.md").read_text(), "Set up")
    command = re.search(r"`(sudo apt-get install -y [^`]+)`", setup)
    assert command is not None, "the set-up section gives the provisioning command"
    ci = (ROOT / ".ci" / "run").read_text()
    wanted = set(re.findall(r"need\+=\((\S+)\)", ci)) | set(
        re.findall(r"apt-get install -y -qq (redis-server)", ci)
    )
    assert wanted == {"nodejs", "npm", "chromium", "redis-server", "nginx-light"}
    assert wanted <= set(command.group(1).split())
    assert "/usr/bin/chromium" in setup and "/usr/bin/chromium" in ci


def test_the_readme_is_a_front_door_of_at_most_12_kb() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024


def test_the_console_script_is_declared() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'runwire = "runwire.cli:main"' in pyproject


def test_every_relative_link_of_the_readme_finds_its_file() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?:)([^)#]+)", readme)
    assert targets
    for target in targets:
        assert (ROOT / target).exists(), f"README links to a missing {target}"
