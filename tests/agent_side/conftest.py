"""A relay on a loopback port for every agent test that asks for ``relay_url``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import relay


@pytest.fixture
async def relay_url() -> AsyncIterator[str]:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        yield server.url
