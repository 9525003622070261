"""The client SDK's public names (API.md) are exported and importable."""

from __future__ import annotations

import client_side

API_NAMES = {
    "connect",
    "ClientSession",
    "ClientRun",
    "Delivery",
    "Published",
    "Outcome",
    "RunResult",
    "View",
}


def test_all_lists_the_api_and_every_name_exists() -> None:
    assert API_NAMES <= set(client_side.__all__)
    for name in client_side.__all__:
        assert hasattr(client_side, name), name
