"""The soak (``RUNWIRE_CHAOS_SOAK=1``) outlasts the suite's usual per-test timeout."""

from __future__ import annotations

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
