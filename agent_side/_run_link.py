"""The small interfaces between a ``Run`` and its session (internal to ``agent_side``).

A ``Run`` talks to its session only through ``RunLink``: publish an entry,
start a task, read the tree. The session builds one with ``run_link()`` and
talks back through the Run's public methods. So neither reaches into the
other's private members, and ``agent_side._run`` does not import the session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from transport._tree import ConversationTree, RunInfo, ViewMessage
from transport.frames import EntryBody

from ._options import CancelRequest

__all__ = ["RunLink", "RunSession", "RunView"]


class RunView(Protocol):
    """What a ``Run``'s view offers: its conversation, and older pages to load."""

    def messages(self) -> list[ViewMessage]: ...

    def runs(self) -> list[RunInfo]: ...

    def has_older(self) -> bool: ...

    async def load_older(self, limit: int = 50) -> int: ...


class RunSession(Protocol):
    """What a ``Run`` knows of the session it belongs to (``run.session``)."""

    session_id: str

    @property
    def tree(self) -> ConversationTree: ...

    def run_link(self) -> RunLink: ...


@dataclass(frozen=True, slots=True)
class RunLink:
    """What a ``Run`` needs of its session, as plain callables the session hands over."""

    tree: Callable[[], ConversationTree]
    """The session's tree now (a reset replaces it)."""
    owns_link: bool
    """True in explicit mode: the session is the caller's, open until their block exits."""
    frame_bytes: Callable[[], int]
    """The relay's ``max_frame_bytes``."""
    publish: Callable[[EntryBody, int | None], Awaitable[None]]
    """Publish one entry, in the place ``reserve()`` took (None: now)."""
    spawn: Callable[..., bool]
    """Start a task in the session's task group; False once it is closing."""
    reserve: Callable[[], int]
    """Take the next place among the connection's publishes now."""
    release: Callable[[int], None]
    """Give back a place no publish will use."""
    forget: Callable[[Any], None]
    """The Run ended: the session drops it."""
    cancels_of: Callable[[str], list[CancelRequest]]
    """The Run's standing cancel requests, oldest first."""
    view_of: Callable[[Any], RunView]
    """The view of one Run."""
