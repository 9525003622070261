"""The text of the event stream: stored entries written as Server-Sent Events.

Each function returns the bytes of one or more events, as
``GET /v1/sessions/{id}/events`` writes them (``relay._event_stream`` decides
which, and when). An entry is ``id: <serial>`` / ``event: entry`` / ``data:
<entry JSON>``. An entry that pauses a Run on questions is followed by
``event: interrupt-required``. A position that cannot be continued from gets
``event: reset``. A batch ends with ``id: <serial>@<epoch>``, which sets the
last event id and fires no event. With ``format=ag-ui`` an entry is the AG-UI
events it stands for (``transport.agui``). The reference page is
``docs/reference/protocol/http.md``.
"""

from __future__ import annotations

from typing import Any

from transport import _codec as codec
from transport import agui

__all__ = ["RETRY_MS", "ag_ui_block", "entry_block", "opening", "reset_block", "resume_id"]

RETRY_MS = 25
"""The ``retry:`` an event stream announces: browsers reconnect this soon after a response."""


def opening(position: int) -> bytes:
    """What a response starts with: the reconnection delay and the position it starts at."""
    return b"retry: %d\nid: %d\n\n" % (RETRY_MS, position)


def entry_block(serial: int, data: bytes) -> bytes:
    """One stored entry, and its ``interrupt-required`` event when it pauses a Run."""
    block = b"id: %d\nevent: entry\ndata: %s\n\n" % (serial, data)
    questions = _interrupt_required(data)
    if questions is not None:
        block += b"id: %d\nevent: interrupt-required\ndata: %s\n\n" % (serial, questions)
    return block


def ag_ui_block(serial: int, data: bytes, session_id: str) -> bytes:
    """One stored entry as AG-UI events: unnamed ``data:`` events, the entry's id on the last."""
    events = agui.entry_events(codec.loads(data), session_id)
    lines = [b"data: %s\n\n" % codec.dumps(event) for event in events]
    if lines:
        lines[-1] = b"id: %d\n" % serial + lines[-1]
        return b"".join(lines)
    return b"id: %d\n\n" % serial


def reset_block(position: int, reset: dict[str, Any]) -> bytes:
    """``event: reset``: the stream starts over from ``position`` (data: epoch, head, first)."""
    return b"id: %d\nevent: reset\ndata: %s\n\n" % (position, codec.dumps(reset))


def resume_id(serial: int, epoch: str) -> bytes:
    """The id to resume from, with its epoch, in a block without data (no event fires)."""
    return b"id: %d@%s\n\n" % (serial, epoch.encode())


def _interrupt_required(data: bytes) -> bytes | None:
    """The ``interrupt-required`` event's data for a stored entry that pauses a Run on
    questions (its run id, serial and questions), else None."""
    if b'"paused"' not in data or b'"interrupt"' not in data:
        return None  # most entries: not decoded
    entry = codec.loads(data)
    if entry.get("kind") != "interrupt" or entry.get("status") != "paused":
        return None
    return codec.dumps(
        {
            "run_id": entry.get("run_id"),
            "serial": entry.get("serial"),
            "interrupts": entry.get("interrupts") or [],
        }
    )
