"""The example app of examples/web (Vite + React: useChat with RunwireChatTransport, and the
@runwire/client React hooks) in Debian's chromium, against a live relay and the demo agent:
send, steer while the reply streams, stop, and a second tab that sees it all.

It needs the app built: ``npm ci && npm run build`` in examples/web (``.ci/run`` does it)."""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.async_api import Browser, Page, expect

import agent_side
import relay
from runwire.demo import DEMO_TOOLS, demo_model

from .test_chat_page import WAIT, browser, chromium

__all__ = ["browser", "chromium"]  # the fixtures this module uses

pytestmark = pytest.mark.anyio

DIST = Path(__file__).resolve().parents[2] / "examples" / "web" / "dist"


@contextmanager
def static_site(root: Path) -> Iterator[int]:
    """``root`` served over HTTP on a loopback port (the built app's files)."""

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@asynccontextmanager
async def live_app(session_id: str) -> AsyncIterator[str]:
    """The app's URL, served on its own origin, talking to a fresh relay with a demo agent."""
    assert (DIST / "index.html").is_file(), (
        "examples/web is not built: run `npm ci && npm run build` in examples/web (.ci/run does it)"
    )
    model = functools.partial(demo_model, delay=0.05)
    with static_site(DIST) as site:
        origin = f"http://127.0.0.1:{site}"
        async with relay.serve(
            host="127.0.0.1", port=0, store="memory://", allowed_origins=[origin]
        ) as server:
            agent = agent_side.Agent(server.url, name="default")

            @agent.on_run
            async def handle(run: agent_side.Run) -> None:
                await agent_side.steering_loop(run, model, tools=DEMO_TOOLS)

            async with agent:
                yield f"{origin}/?relay=ws://127.0.0.1:{server.port}&session={session_id}"


async def open_app(browser: Browser, url: str) -> Page:
    page = await browser.new_page(viewport={"width": 1000, "height": 700})
    page.set_default_timeout(WAIT)
    await page.goto(url)
    await expect(page.get_by_test_id("state")).to_have_text("connected")
    return page


def assistant(page: Page) -> Any:
    return page.locator('[data-testid="messages"] li[data-role="assistant"]')


async def say(page: Page, text: str) -> None:
    await page.get_by_label("message").fill(text)
    await page.get_by_label("message").press("Enter")


async def test_send_steer_stop_and_a_second_tab(browser: Browser) -> None:
    with anyio.fail_after(120):
        async with live_app("web-1") as url:
            one = await open_app(browser, url)
            two = await open_app(browser, url)

            # Send: useChat streams the reply through the transport; the other tab sees it too.
            await say(one, "Plan a 7-day trip to Lisbon.")
            await expect(assistant(one).first).to_contain_text("7-day plan for Lisbon")
            await expect(one.get_by_role("button", name="Steer")).to_be_visible()
            await expect(two.locator("li[data-role=user]").first).to_contain_text(
                "Plan a 7-day trip to Lisbon."
            )
            await expect(assistant(two).first).to_contain_text("7-day plan for Lisbon")

            # Steer while it streams: the agent takes it in at its next step, and the AI SDK's
            # steering-message part shows in the streaming reply.
            await expect(assistant(one).first).to_contain_text("Day 1:")
            await say(one, "Make it 2 days.")
            await expect(one.get_by_test_id("steering")).to_contain_text("Make it 2 days.")
            await expect(assistant(one).last).to_contain_text("2-day plan for Lisbon")
            await expect(one.get_by_test_id("runs")).to_have_text("complete")
            await expect(one.get_by_role("button", name="Send")).to_be_visible()

            # Stop: useChat's stop cancels the Run, in both tabs.
            await say(one, "Plan a 14-day trip to Porto.")
            await expect(assistant(one).last).to_contain_text("14-day plan for Porto")
            await one.get_by_role("button", name="Stop").click()
            await expect(one.get_by_test_id("runs")).to_have_text("complete, cancelled")
            await expect(two.get_by_test_id("runs")).to_have_text("complete, cancelled")
            await expect(assistant(two).last).to_contain_text("14-day plan for Porto")
            await one.close()
            await two.close()
