"""The relay's tunables, with their defaults (durations in seconds, sizes in bytes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transport.checks import Check

__all__ = ["RelayOptions"]


@dataclass(frozen=True)
class RelayOptions:
    """Everything ``relay.serve(**options)`` takes besides host, port and store."""

    max_frame_bytes: int = 1024 * 1024
    """Frames larger than this get a ``PAYLOAD_TOO_LARGE`` error; the connection stays."""
    hard_frame_bytes: int = 4 * 1024 * 1024
    """Frames larger than this close the connection (WebSocket 1009)."""
    send_queue_bytes: int = 8 * 1024 * 1024
    """A connection whose unsent frames exceed this is closed ``SLOW_CONSUMER`` (4008)."""
    max_inflight: int = 1000
    """Publishes one connection may have waiting for the store before ``RATE_LIMITED``."""
    agent_grace: float = 30.0
    """How long an agent may be gone before its active Runs end ``AGENT_LOST``."""
    history_page_max: int = 1000
    """The most entries one attach or history page returns."""
    backlog_max: int = 100_000
    """The most entries a resume replays; beyond it the client gets a ``reset``."""
    input_checks: Sequence[Check] = ()
    """Checks every message entry passes before it is stored (see ``transport.checks``)."""
