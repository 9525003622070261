"""Fixtures for client tests: an in-process relay on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import relay
from transport.messages import new_id


@pytest.fixture
async def relay_url() -> AsyncIterator[str]:
    """The ws:// URL of a fresh in-memory relay on 127.0.0.1, port chosen by the OS."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        yield server.url


@pytest.fixture
def session_id() -> str:
    """A session id no other test uses."""
    return f"test-{new_id()[:12]}"
