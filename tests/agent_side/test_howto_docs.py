"""The how-to pages' code blocks run: each page's Python blocks, in order, form one program."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

pytestmark = pytest.mark.anyio

DOCS = Path(__file__).resolve().parents[2] / "docs" / "howto"


def program(page: str) -> dict[str, Any]:
    """Run the page's Python blocks, in order, in one namespace; returns it."""
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, f"{page} has no Python block"
    namespace: dict[str, Any] = {"__name__": f"howto_{page.removesuffix('.md')}"}
    exec(compile("\n".join(blocks), str(DOCS / page), "exec"), namespace)
    return namespace


async def test_the_agent_loop_safety_page_runs(relay_url: str) -> None:
    main = program("agent-loop-safety.md")["main"]
    with anyio.fail_after(20):
        await main(relay_url)


async def test_the_guardrails_page_runs() -> None:
    main = program("guardrails.md")["main"]
    with anyio.fail_after(20):
        await main()
