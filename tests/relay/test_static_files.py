"""The chat page's files at /static/...: a fixed list, each with its content type, no other path."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

import relay
from relay._static_files import STATIC_DIR, STATIC_FILES, VENDOR_FILES
from tests.relay.test_static import http_get

pytestmark = pytest.mark.anyio

VENDOR = STATIC_DIR / "vendor"


def test_the_list_names_exactly_the_vendored_scripts_and_styles() -> None:
    here = {p.name for p in VENDOR.iterdir() if p.suffix in (".js", ".css") and p.is_file()}
    here.discard("copy.mjs")
    assert here == set(VENDOR_FILES)
    for path, (file, _) in STATIC_FILES.items():
        assert file.is_file(), path
    # Each library ships with its licence and the README that says how it was made.
    for name in ("LICENSE.marked", "LICENSE.dompurify", "LICENSE.highlightjs", "README.md"):
        assert (VENDOR / name).is_file(), name


async def test_listed_files_are_served_with_their_content_type() -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        base = f"http://127.0.0.1:{server.port}"
        with anyio.fail_after(20):
            for path, want in [
                ("/static/chat-render.js", "text/javascript; charset=utf-8"),
                ("/static/vendor/marked.esm.js", "text/javascript; charset=utf-8"),
                ("/static/vendor/purify.min.js", "text/javascript; charset=utf-8"),
                ("/static/vendor/hljs-python.min.js", "text/javascript; charset=utf-8"),
                ("/static/vendor/hljs-github.min.css", "text/css; charset=utf-8"),
            ]:
                status, kind, body = await http_get(base + path)
                assert (status, kind) == (200, want), path
                assert body == STATIC_FILES[path][0].read_bytes()
            # A page of another allowed origin may import it as a module: CORS names it.
            _, cors, _ = await http_get(
                base + "/static/chat-render.js",
                "Access-Control-Allow-Origin",
                origin="http://localhost:5173",
            )
            assert cors == "http://localhost:5173"
            # A page of an origin not allowed may not.
            status, _, _ = await http_get(
                base + "/static/chat-render.js", origin="https://evil.example"
            )
            assert status == 403


@pytest.mark.parametrize(
    "path",
    [
        "/static/vendor/README.md",
        "/static/vendor/package.json",
        "/static/vendor/copy.mjs",
        "/static/vendor/LICENSE.marked",
        "/static/index.html",
        "/static/vendor/../index.html",
        "/static/vendor/%2e%2e/chat-render.js",
        "/static/../../pyproject.toml",
        "/static/vendor/node_modules/marked/package.json",
        "/static/",
        "/static",
    ],
)
async def test_any_other_path_is_not_found(path: str) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        with anyio.fail_after(20):
            status, kind, body = await http_get(f"http://127.0.0.1:{server.port}{path}")
            assert (status, body) == (404, b"not found\n"), path
            assert kind == "text/plain"


def test_the_page_imports_only_what_the_relay_serves() -> None:
    """Every module and stylesheet the page and chat-render.js name is on the list."""
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    render = (STATIC_DIR / "chat-render.js").read_text(encoding="utf-8")
    named = set(re.findall(r'(?:href|from)="(/static/[^"]+)"', page))
    named |= {
        "/static/" + m.removeprefix("./")
        for m in re.findall(r'(?:from |import )"(\./vendor/[^"]+)"', render)
    }
    assert named, "the page names no static file"
    assert named <= set(STATIC_FILES), named - set(STATIC_FILES)
    assert Path(STATIC_FILES["/static/chat-render.js"][0]).name == "chat-render.js"
