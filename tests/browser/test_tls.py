"""A relay with TLS in a real browser: the page over https://, a WebSocket over wss:// and an
``EventSource`` over https://, all on the relay's one port (chromium trusts the test's
throwaway certificate through Playwright's ``ignore_https_errors``)."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path

import anyio
import pytest
import trustme
from playwright.async_api import Browser

import relay

from .test_event_source import browser, chromium  # noqa: F401 (fixtures)

pytestmark = pytest.mark.anyio


async def test_page_websocket_and_event_stream_over_tls(browser: Browser, tmp_path: Path) -> None:  # noqa: F811
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    async with relay.serve(
        port=0, store="memory://", ssl_certfile=str(cert), ssl_keyfile=str(key)
    ) as server:

        def post(text: str) -> None:
            request = urllib.request.Request(
                f"{server.http_url}/v1/sessions/tls-page/messages",
                data=json.dumps({"message": text, "message_id": text}).encode(),
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10, context=trusted) as response:
                assert response.status == 201

        context = await browser.new_context(ignore_https_errors=True)
        try:
            page = await context.new_page()
            await page.goto(f"{server.http_url}/healthz")
            assert page.url.startswith("https://")
            welcome = await page.evaluate(
                """(url) => new Promise((resolve, reject) => {
                    const ws = new WebSocket(url);
                    ws.onopen = () => ws.send(JSON.stringify({type: "hello", v: 1, req: "r1"}));
                    ws.onmessage = (e) => { resolve(JSON.parse(e.data)); ws.close(); };
                    ws.onerror = () => reject(new Error("the wss:// connection failed"));
                })""",
                server.url,
            )
            assert welcome["type"] == "welcome" and welcome["req"] == "r1"
            await page.evaluate(
                """(url) => {
                    window.got = [];
                    const source = new EventSource(url);
                    source.addEventListener("entry", (e) => {
                        window.got.push(JSON.parse(e.data).serial);
                    });
                }""",
                "/v1/sessions/tls-page/events?from=0&wait=0.3",
            )
            for i in range(3):
                await anyio.to_thread.run_sync(post, f"m-{i}")
            with anyio.fail_after(20):
                while await page.evaluate("window.got.length") < 3:
                    await anyio.sleep(0.05)
            assert await page.evaluate("window.got") == [1, 2, 3]
        finally:
            await context.close()
