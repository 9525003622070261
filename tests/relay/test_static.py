"""The relay's static files: the JavaScript client at /client.js, an optional page at /."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

import relay

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def http_get(
    url: str, header: str = "Content-Type", origin: str | None = None
) -> tuple[int, str, bytes]:
    def get() -> tuple[int, str, bytes]:
        request = urllib.request.Request(url, headers={"Origin": origin} if origin else {})
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status, resp.headers.get(header, ""), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get(header, ""), exc.read()

    return await anyio.to_thread.run_sync(get)


async def test_client_js_is_served_as_javascript() -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        with anyio.fail_after(10):
            status, kind, body = await http_get(f"http://127.0.0.1:{server.port}/client.js")
            assert status == 200
            assert kind.startswith("application/javascript")
            assert body == (ROOT / "client_side" / "js" / "dist" / "runwire.js").read_bytes()
            # The bundle (client_side/js/build.mjs) defines connect and exports it by name.
            assert b"function connect(" in body
            assert re.search(rb"^export \{[^}]*\bconnect,", body, re.M)
            # A page of another allowed origin may import it as a module: CORS names it.
            _, cors, _ = await http_get(
                f"http://127.0.0.1:{server.port}/client.js",
                "Access-Control-Allow-Origin",
                origin="http://localhost:5173",
            )
            assert cors == "http://localhost:5173"
            # Without index_html there is no page at /.
            status, _, _ = await http_get(f"http://127.0.0.1:{server.port}/")
            assert status == 404


async def test_index_html_is_served_at_root_and_websockets_still_connect(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<!doctype html><title>chat</title>", encoding="utf-8")
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", index_html=str(page)
    ) as server:
        with anyio.fail_after(10):
            status, kind, body = await http_get(f"http://127.0.0.1:{server.port}/?session=abc")
            assert (status, kind, body) == (200, "text/html; charset=utf-8", page.read_bytes())
            async with connect(server.url + "/") as ws:
                await ws.send(json.dumps({"type": "hello"}))
                assert json.loads(await ws.recv())["type"] == "welcome"
            page.unlink()
            status, _, _ = await http_get(f"http://127.0.0.1:{server.port}/")
            assert status == 404
