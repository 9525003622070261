"""The client's ``View``: the one ``transport.asyncio._view.View`` both SDKs share.

``session.view`` is a ``View``. This module keeps the names the client SDK has
always exported (``client_side.View``, ``EventStream``, ``EVENT_KINDS``).
"""

from transport.asyncio._view import EVENT_KINDS, Event, EventStream, View

__all__ = ["EVENT_KINDS", "Event", "EventStream", "View"]
