"""``examples/hello_page.html``, the tutorial's browser step, in Debian's chromium.

A relay and the tutorial's agent run in process; a small static server serves
``examples/`` as ``python3 -m http.server`` would. The page sends a message,
then steers the reply while it streams.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from playwright.async_api import async_playwright, expect

import agent_side
import relay

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CHROMIUM = "/usr/bin/chromium"
WAIT = 20_000  # ms, for any one thing to show up in the page


def load_hello_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hello_agent", EXAMPLES / "hello_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # makes its Agent at module level, with no loop running
    return module


@pytest.fixture
def static_site() -> Iterator[str]:
    """``examples/`` over HTTP on a loopback port."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def chromium() -> str:
    """Debian's chromium (never a browser Playwright downloads)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does it)")
    return CHROMIUM


async def test_the_page_sends_and_steers(static_site: str, chromium: str) -> None:
    hello = load_hello_agent()
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        agent = agent_side.Agent(server.url, name="default")

        @agent.on_run
        async def handle(run: agent_side.Run) -> None:
            await agent_side.steering_loop(run, hello.model)

        async with agent, async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, headless=True)
            try:
                page = await browser.new_page()
                await page.goto(f"{static_site}/hello_page.html?relay={server.url}&session=page-1")
                text = page.locator("#text")
                await text.fill("Plan a 3-day trip to Lisbon.")
                await text.press("Enter")
                replies = page.locator("li", has_text="assistant: You said: Plan")
                await expect(replies).to_have_count(1, timeout=WAIT)
                await text.fill("Make it 5 days.")
                await text.press("Enter")
                answer = "assistant: You said: Make it 5 days. Here is my answer,"
                await expect(page.locator("li", has_text=answer)).to_have_count(1, timeout=WAIT)
                await expect(page.locator("li").last).to_have_text(
                    answer + " one word at a time, so you can steer me. ", timeout=WAIT
                )
                items = await page.locator("li").all_inner_texts()
                # The tutorial's step 4 shows this screenshot (docs/img/, committed).
                await page.set_viewport_size({"width": 720, "height": 140})
                await page.screenshot(
                    path=str(ROOT / "docs" / "img" / "tutorial-page.png"), animations="disabled"
                )
            finally:
                await browser.close()
    assert items[0] == "user: Plan a 3-day trip to Lisbon."
    assert items[2] == "user: Make it 5 days."
    full = "assistant: You said: Plan a 3-day trip to Lisbon. Here is my answer,"
    assert items[1].startswith("assistant: You said:") and not items[1].startswith(full + " one")
    assert len(items) == 4
