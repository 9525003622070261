"""An AGENT_LOST end that keeps failing (``Hub.agent_lost``) is logged at a bounded rate:
the sweep on Redis tries it again every heartbeat for as long as it fails."""

from __future__ import annotations

import pytest

import relay._liveness
from relay._hub import Hub
from relay._metrics import Metrics
from relay._options import RelayOptions
from relay.store._base import ChannelInfo
from relay.store._memory import MemoryStore
from transport.errors import STORE_UNAVAILABLE, RunwireError

pytestmark = pytest.mark.anyio


class Unreadable(MemoryStore):
    """A store that cannot load one session, every time (as a session whose stored data
    this version cannot read)."""

    async def open_channel(self, session_id: str) -> ChannelInfo:
        if session_id == "bad":
            raise RunwireError(STORE_UNAVAILABLE, "cannot read session bad")
        return await super().open_channel(session_id)


async def test_an_end_that_keeps_failing_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = Hub(Unreadable(), RelayOptions(), Metrics())
    with caplog.at_level("WARNING", logger="runwire.relay"):
        for _ in range(5):
            await hub.agent_lost("bad", "r1")
        await hub.agent_lost("bad", "r2")
    warned = [r.getMessage() for r in caplog.records if "could not end run" in r.getMessage()]
    assert len(warned) == 2  # once for r1, once for r2
    assert "bad/r1" in warned[0] and "bad/r2" in warned[1]
    caplog.clear()
    monkeypatch.setattr(relay._liveness, "LOST_LOG_EVERY", 0.0)  # the interval has passed
    with caplog.at_level("WARNING", logger="runwire.relay"):
        await hub.agent_lost("bad", "r1")
    warned = [r.getMessage() for r in caplog.records if "could not end run" in r.getMessage()]
    assert len(warned) == 1 and "4 more failures" in warned[0]
