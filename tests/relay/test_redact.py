"""Tokens never reach a log: at DEBUG, websockets logs request lines and headers in full,
and the relay and the SDK connection redact the ``token=`` value and ``Authorization``."""

from __future__ import annotations

import ast
import io
import logging
import sys
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

import client_side
import relay
from relay.auth import mint_token
from transport import redact

from .test_http_api import call

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SECRET = "redaction-test-secret-" + "0123456789abcdef" * 2


def test_redact_covers_query_headers_bearer_and_jwts() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl"
    cases = {
        f"< GET /?token={jwt}&x=1 HTTP/1.1": "< GET /?token=[REDACTED]&x=1 HTTP/1.1",
        "> GET /v1/sessions/a/events?token=opaque-secret HTTP/1.1": (
            "> GET /v1/sessions/a/events?token=[REDACTED] HTTP/1.1"
        ),
        "< Authorization: Basic dXNlcjpwYXNz": "< Authorization: [REDACTED]",
        f"headers [('Authorization', 'Bearer {jwt}')]": (
            "headers [('Authorization', '[REDACTED]')]"
        ),
        f"sent Bearer {jwt}": "sent Bearer [REDACTED]",
        f"claims in {jwt}!": "claims in [REDACTED]!",
        "nothing to see": "nothing to see",
    }
    for text, wanted in cases.items():
        assert redact.redact(text) == wanted


def test_the_filter_redacts_arguments_tracebacks_and_keeps_every_record() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("runwire.relay")
    redact.install()
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("< %s: %s", "Authorization", "Bearer abc.def.ghi")
        try:
            raise ValueError("bad token=abcdef in the request")
        except ValueError:
            logger.exception("failed on %s", "/x?token=hunter2")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    text = stream.getvalue()
    assert "abc.def.ghi" not in text and "abcdef" not in text and "hunter2" not in text
    assert text.count("[REDACTED]") == 4  # the source line in the traceback too
    assert "ValueError" in text  # the traceback is still there


def test_every_logger_of_the_code_base_is_filtered() -> None:
    """A new logger must be added to ``redact.LOGGERS``: a filter sees its own logger only."""
    names: set[str] = set()
    for package in ("transport", "relay", "client_side", "agent_side", "runwire"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", None) == "getLogger"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names.add(str(node.args[0].value))
    assert names, "no loggers found"
    assert names <= set(redact.LOGGERS), names - set(redact.LOGGERS)


@pytest.fixture
def unfiltered() -> None:
    """No logger has the filter yet: the relay and the SDK must put it on themselves."""
    for name in redact.LOGGERS:
        logger = logging.getLogger(name)
        for found in [f for f in logger.filters if isinstance(f, redact.RedactTokens)]:
            logger.removeFilter(found)


@pytest.mark.usefixtures("unfiltered")
async def test_no_token_reaches_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with relay.serve(port=0, store="memory://", secret=SECRET) as server:
        token = mint_token(user="alice", sessions={"s-*": ["subscribe", "publish"]}, secret=SECRET)
        # A browser's way: ?token= on the handshake.
        async with connect(f"{server.url}/?token={token}") as ws:
            await ws.send('{"type":"hello","v":1}')
            assert b"welcome" in (await ws.recv()).encode()
        # The SDK's way: Authorization: Bearer.
        with anyio.fail_after(10):
            async with client_side.connect(server.url, "s-1", token=token) as session:
                await session.send("hello")
        # An HTTP request with the token in its query and in its header.
        reply = await call(server, "GET", f"/v1/sessions/s-1/history?token={token}")
        assert reply.status == 200
        reply = await call(server, "GET", "/v1/sessions/s-1/history", token=token)
        assert reply.status == 200
    text = "\n".join(record.getMessage() + (record.exc_text or "") for record in caplog.records)
    assert token not in text
    assert token.split(".")[2] not in text  # not even the signature
    assert "token=[REDACTED]" in text  # the lines were logged, redacted
    assert "Authorization: [REDACTED]" in text


def test_the_relay_cli_filters_the_root_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay import _cli as cli

    root = logging.getLogger()
    saved = list(root.handlers)
    monkeypatch.setattr(cli.anyio, "run", lambda *a: None)
    for handler in saved:
        root.removeHandler(handler)
    try:
        cli.main(["--log-level", "DEBUG"])
        added = [h for h in root.handlers if h not in saved]
        assert added and all(
            any(isinstance(f, redact.RedactTokens) for f in h.filters) for h in added
        )
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(logging.WARNING)
    assert sys.modules["relay._cli"] is cli
