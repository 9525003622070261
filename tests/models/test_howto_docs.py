"""Every Python block of the provider how-to pages is code of the example it names (one level
of indentation less)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "openai.md": "openai_agent.py",
    "anthropic.md": "anthropic_agent.py",
    "pydantic-ai.md": "pydantic_ai_agent.py",
}


def _solid(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.strip())


@pytest.mark.parametrize(("page", "example"), PAGES.items())
def test_the_pages_python_blocks_are_in_the_example(page: str, example: str) -> None:
    text = (ROOT / "docs" / "howto" / page).read_text()
    code = (ROOT / "examples" / example).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks
    for block in blocks:  # shown dedented, blank lines as ruff formats them
        assert _solid(textwrap.indent(block, "    ")) in _solid(code)
    assert f"examples/{example}" in text
