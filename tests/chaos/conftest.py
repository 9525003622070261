"""The soak's timeout (``RUNWIRE_CHAOS_SOAK=1``), and no SDK error logged in a scenario."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from .rig import SOAK

SOAK_TIMEOUT = 1800
"""Seconds one soaked scenario may take (CI's per-test timeout is 120 s)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not SOAK:
        return
    for item in items:
        if item.nodeid.startswith("tests/chaos/"):
            item.add_marker(pytest.mark.timeout(SOAK_TIMEOUT))


@pytest.fixture(autouse=True)
def no_sdk_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A scenario fails if an SDK in the test process logged an error (a handler's
    traceback, say): a fault the SDKs ride out must not look like a failure."""
    yield
    errors = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("runwire") and r.levelno >= logging.ERROR
    ]
    assert not errors, "\n".join(errors)
