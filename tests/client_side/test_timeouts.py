"""Closing a client session inside the caller's timeout (``fail_after`` /
``move_on_after``) behaves like a timeout: the scope catches its own cancellation,
nothing escapes it, and the session is closed. Its task groups are entered and left
by the ``async with`` block, so a close from inside another scope does not unwind the
caller's cancel scopes out of order ("Attempted to exit a cancel scope that isn't the
current task's current cancel scope", a stray CancelledError)."""

from __future__ import annotations

import anyio
import pytest

import client_side

pytestmark = pytest.mark.anyio

DEADLINES = [0, 0.0001, 5]  # already due, due during the close, not due


async def settle() -> None:
    """A few checkpoints: a stray cancellation left pending would surface here."""
    for _ in range(3):
        await anyio.sleep(0.01)


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_aclose_inside_move_on_after_closes_the_session(
    relay_url: str, session_id: str, deadline: float
) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            await session.send("hi")
            with anyio.move_on_after(deadline):
                await session.aclose()
            await settle()
            assert session.closed and not session.connected
        await settle()


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_aclose_inside_fail_after_closes_the_session(
    relay_url: str, session_id: str, deadline: float
) -> None:
    with anyio.fail_after(10):
        async with client_side.connect(relay_url, session_id) as session:
            try:
                with anyio.fail_after(deadline):
                    await session.aclose()
            except TimeoutError:
                pass
            await settle()
            assert session.closed and not session.connected
        await settle()


@pytest.mark.parametrize("deadline", DEADLINES)
async def test_the_connect_block_exits_inside_a_timeout(
    relay_url: str, session_id: str, deadline: float
) -> None:
    with anyio.fail_after(10):
        with anyio.move_on_after(deadline):
            async with client_side.connect(relay_url, session_id) as session:
                await session.send("hi")
        await settle()
        with anyio.move_on_after(0.2) as scope:
            async with client_side.connect(relay_url, session_id) as session:
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        await settle()
