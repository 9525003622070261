"""The HTTP API's event stream in a real browser: chromium's own ``EventSource`` gets every
entry once, in order, on one response that stays open (``relay._sse``), and resumes with
``Last-Event-ID`` when that response ends (here: the relay restarts)."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from playwright.async_api import Browser, async_playwright

import relay

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def chromium() -> str:
    """Debian's chromium (never a browser Playwright downloads)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does it)")
    return CHROMIUM


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, headless=True, timeout=30_000)
        try:
            yield browser
        finally:
            await browser.close()


def post(base: str, text: str) -> None:
    request = urllib.request.Request(
        f"{base}/v1/sessions/trip-1/messages",
        data=json.dumps({"message": text, "message_id": text}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201


async def test_event_source_resumes_across_responses_with_no_gap_and_no_duplicate(
    browser: Browser,
) -> None:
    async with relay.serve(port=0, store="memory://") as server:
        base = server.http_url
        for i in range(3):
            await anyio.to_thread.run_sync(post, base, f"before-{i}")
        page = await browser.new_page()
        await page.goto(f"{base}/healthz")  # any page of the relay's origin
        await page.evaluate(
            """(url) => {
                window.got = [];
                window.opened = 0;
                const source = new EventSource(url);
                source.onopen = () => { window.opened += 1; };
                source.addEventListener("entry", (e) => {
                    window.got.push([Number(e.lastEventId), JSON.parse(e.data).serial]);
                });
            }""",
            "/v1/sessions/trip-1/events?from=0&wait=0.3&limit=4",
        )
        for i in range(12):  # while the page's responses come and go
            await anyio.to_thread.run_sync(post, base, f"live-{i}")
            await anyio.sleep(0.05 * (i % 3))
        with anyio.fail_after(20):
            while await page.evaluate("window.got.length") < 15:
                await anyio.sleep(0.05)
        await anyio.sleep(0.8)  # idle a while: still nothing twice
        got = await page.evaluate("window.got")
        assert got == [[n, n] for n in range(1, 16)]
        # One response carried them all: the stream stayed open (it no longer ends after
        # each batch, as the long-poll form did, to be reconnected 25 ms later).
        assert await page.evaluate("window.opened") == 1


async def test_event_source_resumes_with_last_event_id_after_the_relay_restarts(
    browser: Browser, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/restart.db"
    async with relay.serve(port=0, store=store) as server:
        base, port = server.http_url, server.port
        for i in range(3):
            await anyio.to_thread.run_sync(post, base, f"first-{i}")
        page = await browser.new_page()
        await page.goto(f"{base}/healthz")
        await page.evaluate(
            """(url) => {
                window.got = [];
                window.opened = 0;
                const source = new EventSource(url);
                source.onopen = () => { window.opened += 1; };
                source.addEventListener("entry", (e) => {
                    window.got.push([e.lastEventId, JSON.parse(e.data).serial]);
                });
            }""",
            "/v1/sessions/trip-1/events?from=0",
        )
        with anyio.fail_after(20):
            while await page.evaluate("window.got.length") < 3:
                await anyio.sleep(0.05)
    # The relay stopped: the stream ended, and the page keeps trying to reconnect.
    async with relay.serve(port=port, store=store) as server:
        for i in range(3):
            await anyio.to_thread.run_sync(post, server.http_url, f"second-{i}")
        with anyio.fail_after(30):
            while await page.evaluate("window.got.length") < 6:
                await anyio.sleep(0.05)
        assert await page.evaluate("window.got") == [[str(n), n] for n in range(1, 7)]
        assert await page.evaluate("window.opened") == 2
        await page.close()
