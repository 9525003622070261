"""How a keepalive timeout splits into WebSocket ping settings (shared by relay and SDKs).

A connection that answers no ping is dead: a peer cut off without a FIN or RST (a
blackhole) is found within ``timeout`` seconds. Pings go every 0.4 of it, each waits
0.4 of it for its pong, and the close handshake that follows waits the rest (capped).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_KEEPALIVE_TIMEOUT", "Keepalive", "keepalive"]

DEFAULT_KEEPALIVE_TIMEOUT = 10.0
"""Seconds a silent connection lives before it counts as dead."""


class Keepalive(NamedTuple):
    """websockets' settings for one keepalive timeout (seconds)."""

    ping_interval: float
    ping_timeout: float
    close_timeout: float


def keepalive(timeout: float, *, close_max: float) -> Keepalive:
    """``ping_interval``, ``ping_timeout`` and ``close_timeout`` for websockets' ``connect`` /
    ``serve``, so that a dead connection is closed at most ``timeout`` seconds after its last
    sign of life. Raises ``ValueError`` unless ``timeout`` is positive."""
    if not timeout > 0:
        raise ValueError(f"keepalive timeout must be more than 0 s, not {timeout}")
    return Keepalive(0.4 * timeout, 0.4 * timeout, min(close_max, 0.2 * timeout))
