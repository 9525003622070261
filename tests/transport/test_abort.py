"""``AbortController`` / ``AbortSignal``: fire once, callbacks in order, ``any``, ``scope``."""

from __future__ import annotations

import logging

import anyio
import pytest

from transport.asyncio._abort import AbortController, AbortSignal


def test_a_callback_that_raises_neither_escapes_abort_nor_stops_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = AbortController()
    heard: list[str] = []

    def bad(_reason: object) -> None:
        raise RuntimeError("listener bug")

    controller.signal.add_callback(lambda reason: heard.append(f"first {reason}"))
    controller.signal.add_callback(bad)
    controller.signal.add_callback(lambda reason: heard.append(f"last {reason}"))
    combined = AbortSignal.any(controller.signal)
    with caplog.at_level(logging.ERROR, logger="runwire.abort"):
        controller.abort("stop")  # the firing side (a frame being delivered) must not raise
    assert heard == ["first stop", "last stop"]
    assert combined.aborted and combined.reason == "stop"
    assert "an abort listener failed" in caplog.text


@pytest.mark.anyio
async def test_a_scope_is_cancelled_even_after_a_callback_that_raises() -> None:
    controller = AbortController()
    controller.signal.add_callback(lambda _reason: 1 / 0)
    with anyio.fail_after(2):
        async with controller.signal.scope() as scope:
            controller.abort()
            await anyio.sleep(5)
    assert scope.cancel_called
