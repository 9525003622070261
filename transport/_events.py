"""What the conversation tree reports: message and Run snapshots, refusals, events (no I/O).

``transport._tree`` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ._outcomes import OutcomeRecord
from .frames import Intent, RunEndReason, RunStatus
from .messages import UIMessage

__all__ = [
    "CancelDenial",
    "DeliveryEvent",
    "MessageEvent",
    "Refusal",
    "ResponseState",
    "RunEvent",
    "RunInfo",
    "TreeEvent",
    "ViewMessage",
]


@dataclass(frozen=True)
class ViewMessage:
    """A message as the tree holds it: the ``UIMessage`` and where it sits.

    ``serial`` is the serial of the entry that created it (a response's
    ``response_open``); ``intent`` is ``None`` for responses; ``refused`` is
    true once an input check refused the message (it is then left out of
    ``messages()``).
    """

    message: UIMessage
    run_id: str
    serial: int
    parent_id: str | None = None
    intent: Intent | None = None
    refused: bool = False


@dataclass(frozen=True)
class Refusal:
    """An input check refused a queued message: which, where, and the error object.

    ``client_id`` is who published the refusal (``"relay"``, or the agent).
    """

    message_id: str
    run_id: str
    intent: Intent
    error: dict[str, Any]
    serial: int
    client_id: str | None = None


@dataclass(frozen=True)
class ResponseState:
    """One response of a Run: the message, whether it was closed, what it had ``seen``."""

    view: ViewMessage
    closed: bool
    seen: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunInfo:
    """A snapshot of one Run as the channel's entries describe it.

    ``client_id`` / ``user_id`` / ``agent`` come from the Run's prompt (``None``
    while the prompt is not loaded).
    """

    run_id: str
    status: RunStatus
    client_id: str | None = None
    user_id: str | None = None
    end_reason: RunEndReason | None = None
    error: dict[str, Any] | None = None
    agent: str | None = None


@dataclass(frozen=True)
class CancelDenial:
    """An agent refused a cancel: which one (``cancel_id``), of which Run, who refused."""

    run_id: str
    cancel_id: str | None
    serial: int
    reason: str | None = None
    client_id: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class MessageEvent:
    """A message was added to the tree, changed, or came onto or left ``messages()``.

    ``op="added"``: a new message, or one already held that came onto the
    active branch (a ``select_branch``, a rebuild). ``op="updated"``: its
    content, parent or ``refused`` changed. ``op="removed"``: it left
    ``messages()``. A fork or rollback left its turn behind, a branch was
    selected, it was refused, a rebuild moved it, or a client's reset dropped it.
    ``message`` is then the tree's view of it while the tree still holds it, else
    the last one it had.

    ``shown``: whether the message is in ``messages()`` once the entry (or
    selection) that caused the event is applied; always ``False`` for
    ``removed``. A message off the active branch (a Run a fork left behind
    streams on, another device grows a branch not shown) is reported
    ``added`` / ``updated`` with ``shown=False``. A UI that follows events
    upserts a message whose event is shown and drops it otherwise; it then
    shows exactly ``messages()``.
    """

    message: ViewMessage
    op: Literal["added", "updated", "removed"]
    shown: bool = True
    kind: Literal["message"] = field(default="message", init=False)


@dataclass(frozen=True)
class RunEvent:
    """A Run appeared or its status (or error) changed (``op="changed"``).

    ``op="removed"``: a client's reset rebuilt the view from a page that does
    not name the Run (the relay lost it, or it is older than the page);
    ``run`` is the last snapshot the view had.
    """

    run: RunInfo
    op: Literal["changed", "removed"] = "changed"
    kind: Literal["run"] = field(default="run", init=False)


@dataclass(frozen=True)
class DeliveryEvent:
    """A steering message's outcome resolved (reported once per message)."""

    outcome: OutcomeRecord
    kind: Literal["delivery"] = field(default="delivery", init=False)


TreeEvent = MessageEvent | RunEvent | DeliveryEvent
