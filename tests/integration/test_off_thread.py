"""A Run on a branch that leaves the active leaf (``send(..., activate=False)``) counts for no
multitask strategy, end to end (client SDK, relay, no worker)."""

from __future__ import annotations

import pytest

import client_side
import relay

pytestmark = pytest.mark.anyio


async def test_an_off_thread_run_neither_blocks_nor_is_blocked() -> None:
    async with (
        relay.serve(port=0, store="memory://") as server,
        client_side.connect(server.url, "s") as session,
    ):
        first = await session.send("the main turn")
        assert first.prompt is not None
        side = await session.send(
            "try another wording", parent_id=first.prompt.id, activate=False, multitask="reject"
        )
        assert side.status == "pending"  # not THREAD_BUSY: it goes alongside
        await first.cancel()
        again = await session.send("next turn", multitask="reject")
        assert again.status == "pending"  # the side Run does not make the session busy
