"""`runwire demo` serves the chat page and the JavaScript client, and prints the page's URL."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from runwire.demo import PAGE, page_url


def test_page_url_names_the_session() -> None:
    assert page_url(8787, "trip-42") == "http://127.0.0.1:8787/?session=trip-42"


def test_the_page_is_packaged_and_loads_the_client_module() -> None:
    html = PAGE.read_text(encoding="utf-8")
    assert '<script type="module">' in html
    assert 'from "/client.js"' in html


def test_demo_no_chat_prints_the_url_and_serves_the_page(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runwire",
            "demo",
            "--no-chat",
            "--port",
            "0",
            "--store",
            f"sqlite:///{tmp_path / 'demo.db'}",
            "--session",
            "page-1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        url = None
        lines = []
        for _ in range(5):
            line = proc.stdout.readline()
            lines.append(line)
            match = re.search(r"(http://127\.0\.0\.1:\d+/\?session=page-1)$", line.strip())
            if match:
                url = match.group(1)
                break
        assert url is not None, f"no page URL printed: {lines}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/html")
            assert resp.read() == PAGE.read_bytes()
        base = url.split("/?", 1)[0]
        with urllib.request.urlopen(base + "/client.js", timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("application/javascript")
        # The demo agent is up (a stop while it is still connecting is another matter).
        deadline = time.monotonic() + 20
        while (
            json.loads(urllib.request.urlopen(base + "/healthz", timeout=10).read())["workers"] < 1
        ):
            assert time.monotonic() < deadline, "the demo agent never registered"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, proc.stdout.read()[-3000:]
    finally:
        proc.kill()
        proc.wait(timeout=10)
