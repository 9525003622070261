"""Browser origins: a request or WebSocket handshake from a page whose ``Origin`` is not
allowed is refused 403; one without ``Origin`` is not checked; CORS names the origin."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

import relay
from relay import _cli as cli
from relay._origins import OriginPolicy
from transport.errors import RunwireError

from .test_http_api import SECRET, call

pytestmark = pytest.mark.anyio

HELLO = json.dumps({"type": "hello", "v": 1})


def test_the_default_on_an_anonymous_loopback_relay() -> None:
    policy = OriginPolicy.default(anonymous=True, loopback=True)
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", "http://localhost"):
        assert policy.allows(origin, "127.0.0.1:8787"), origin
    assert policy.allows("http://[::1]:8080", None)
    assert policy.allows("http://127.0.0.1:8787", "127.0.0.1:8787")  # its own
    for origin in ("https://evil.example", "http://localhost.evil.example:80", "null"):
        assert not policy.allows(origin, "127.0.0.1:8787"), origin
    # A page whose own name was pointed at 127.0.0.1 is not the relay's own origin.
    assert not policy.allows("http://rebind.example:8787", "rebind.example:8787")


def test_the_default_with_tokens_is_the_relays_own_origin_only() -> None:
    policy = OriginPolicy.default(anonymous=False, loopback=True)
    assert policy.allows("https://relay.example", "relay.example")
    assert policy.allows("http://relay.example:8787", "relay.example:8787")
    assert not policy.allows("http://relay.example:8788", "relay.example:8787")
    assert not policy.allows("http://localhost:5173", "relay.example")
    assert not policy.allows("http://localhost:5173", None)


def test_configured_patterns() -> None:
    policy = OriginPolicy(["https://app.example", "http://dev.example:*", "null"])
    assert policy.allows("https://app.example", None)
    assert policy.allows("https://APP.example:443", None)
    assert not policy.allows("https://app.example:8443", None)
    assert not policy.allows("http://app.example", None)
    assert policy.allows("http://dev.example:9000", None)
    assert policy.allows("null", None)
    assert not policy.allows("https://app.example.evil", None)
    assert OriginPolicy(["*"]).allows("https://anything.example", None)
    with pytest.raises(ValueError, match="not scheme://host"):
        OriginPolicy(["app.example/path"])


def test_the_cli_takes_a_comma_separated_and_repeated_list() -> None:
    args = cli.build_parser().parse_args(
        ["--allowed-origins", "https://a.example, https://b.example", "--allowed-origins", "null"]
    )
    wanted = ["https://a.example", "https://b.example", "null"]
    assert cli.options(args)["allowed_origins"] == wanted
    assert cli.options(cli.build_parser().parse_args([]))["allowed_origins"] is None


async def test_a_bad_pattern_stops_serve() -> None:
    with pytest.raises(ValueError, match="allowed origin"):
        async with relay.serve(port=0, store="memory://", allowed_origins=["ftp://x"]):
            pass


async def handshake(url: str, origin: str | None) -> dict[str, Any]:
    """Connect with ``origin`` and say hello: the first frame back."""
    headers = {"Origin": origin} if origin else None
    with anyio.fail_after(10):
        async with connect(url, additional_headers=headers) as ws:
            await ws.send(HELLO)
            reply = json.loads(await ws.recv())
            assert isinstance(reply, dict)
            return reply


async def test_websocket_handshakes_by_origin_on_an_anonymous_relay() -> None:
    async with relay.serve(port=0, store="memory://") as server:
        assert (await handshake(server.url, None))["type"] == "welcome"
        assert (await handshake(server.url, "http://localhost:5173"))["type"] == "welcome"
        assert (await handshake(server.url, server.http_url))["type"] == "welcome"
        with pytest.raises(InvalidStatus) as refused:
            await handshake(server.url, "https://evil.example")
        assert refused.value.response.status_code == 403
        body = json.loads(refused.value.response.body)
        assert body["error"]["code"] == "UNAUTHORIZED"
        assert body["error"]["details"]["reason"] == "origin"


async def test_http_requests_by_origin_with_tokens() -> None:
    async with relay.serve(
        port=0, store="memory://", secret=SECRET, allowed_origins=["https://app.example"]
    ) as server:
        path = "/v1/sessions/trip-1/history"
        # No Origin: checked as before (the token), no CORS header.
        plain = await call(server, "GET", path)
        assert plain.status == 401
        assert "Access-Control-Allow-Origin" not in plain.headers
        # An allowed origin: named back, never *.
        for method in ("OPTIONS", "GET"):
            reply = await call(server, method, path, headers={"Origin": "https://app.example"})
            assert reply.status == (204 if method == "OPTIONS" else 401), reply.body
            assert reply.headers["Access-Control-Allow-Origin"] == "https://app.example"
            assert reply.headers["Vary"] == "Origin"
        # Another origin, even localhost on a relay with tokens: 403, no CORS header.
        for origin in ("https://evil.example", "http://localhost:5173"):
            for method, route in (("OPTIONS", path), ("GET", path), ("GET", "/healthz")):
                reply = await call(server, method, route, headers={"Origin": origin})
                assert reply.status == 403, (origin, method, route)
                assert reply.code == "UNAUTHORIZED"
                assert "Access-Control-Allow-Origin" not in reply.headers
        # The relay's own origin is always allowed.
        own = await call(server, "GET", "/healthz", headers={"Origin": server.http_url})
        assert own.status == 200
        assert own.headers["Access-Control-Allow-Origin"] == server.http_url


def test_origin_refused_is_unauthorized() -> None:
    from relay._origins import origin_refused

    error = origin_refused("https://evil.example")
    assert isinstance(error, RunwireError) and error.details["reason"] == "origin"


async def test_refused_origins_are_logged_once_per_burst(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runwire.relay")
    async with relay.serve(port=0, store="memory://") as server:
        for _ in range(3):
            reply = await call(server, "GET", "/healthz", headers={"Origin": "https://x.example"})
            assert reply.status == 403
    logged = [r for r in caplog.records if "origin 'https://x.example'" in r.getMessage()]
    assert len(logged) == 1
