"""docs/howto/chat-page.md shows the example page as it is, and only screenshots that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOWTO = ROOT / "docs" / "howto" / "chat-page.md"


def test_the_how_tos_page_is_the_example_file() -> None:
    text = HOWTO.read_text(encoding="utf-8")
    [block] = re.findall(r"```html\n(.*?)```", text, re.S)
    assert block == (ROOT / "examples" / "browser" / "my-chat.html").read_text(encoding="utf-8")


def test_every_screenshot_it_shows_is_committed_and_taken_by_a_test() -> None:
    text = HOWTO.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]+\]\(\.\./img/([\w-]+\.png)\)", text)
    assert len(images) >= 5
    tests = "".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "tests" / "browser").glob("*.py")
    )
    for name in images:
        assert (ROOT / "docs" / "img" / name).is_file(), name
        assert f'"{name}"' in tests, f"no browser test takes {name}"
