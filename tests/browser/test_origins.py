"""Browser origins in a real browser: a page of another origin cannot reach the relay, over
WebSocket or ``fetch``, while the relay's own page and an allowed origin's can."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest
from playwright.async_api import Browser, Page, async_playwright

import relay

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
PAGE = b"<!doctype html><title>another origin</title><p>hello"

TRY_RELAY = """async ([ws_url, http_url]) => {
    const ws = await new Promise((resolve) => {
        const socket = new WebSocket(ws_url);
        socket.onerror = () => resolve("refused");
        socket.onopen = () => socket.send(JSON.stringify({type: "hello", v: 1}));
        socket.onmessage = (event) => { resolve(JSON.parse(event.data).type); socket.close(); };
    });
    let fetched;
    try {
        const response = await fetch(http_url + "/v1/sessions/s-1/history");
        fetched = String(response.status);
    } catch (error) {
        fetched = "refused";
    }
    return [ws, fetched];
}"""


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


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def other_site(host: str) -> Iterator[str]:
    """A tiny web site on ``host`` and a port of its own: its origin."""
    site = ThreadingHTTPServer((host, 0), _Page)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()


async def try_relay(browser: Browser, page_url: str, server: relay.Server) -> list[str]:
    page: Page = await browser.new_page()
    try:
        await page.goto(page_url)
        with anyio.fail_after(20):
            result = await page.evaluate(TRY_RELAY, [server.url, server.http_url])
        return list(result)
    finally:
        await page.close()


async def test_an_anonymous_loopback_relay_refuses_pages_of_other_origins(
    browser: Browser,
) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        # 127.0.0.2 is loopback too, but not an origin the default allows.
        with other_site("127.0.0.2") as evil:
            assert await try_relay(browser, evil, server) == ["refused", "refused"]
        # A page of localhost (a developer's own front end) is allowed by default.
        with other_site("localhost") as dev:
            assert await try_relay(browser, dev, server) == ["welcome", "200"]
        # The relay's own page works.
        assert await try_relay(browser, f"{server.http_url}/healthz", server) == [
            "welcome",
            "200",
        ]


async def test_a_relay_with_tokens_allows_only_the_origins_it_is_given(browser: Browser) -> None:
    secret = "browser-origins-secret-" + "0123456789abcdef" * 2
    with other_site("localhost") as dev, other_site("127.0.0.2") as app:
        async with relay.serve(
            host="127.0.0.1", port=0, store="memory://", secret=secret, allowed_origins=[app]
        ) as server:
            # localhost is not allowed on a relay with tokens unless configured.
            assert await try_relay(browser, dev, server) == ["refused", "refused"]
            # The configured origin reaches the relay (and is refused only for want of a token).
            assert await try_relay(browser, app, server) == ["error", "401"]
