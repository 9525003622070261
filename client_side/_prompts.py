"""The ``message`` entry a client's ``send()`` publishes to start a Run.

A prompt carries the trace context of the ``runwire.send`` span when tracing is
on. It names its parent only when the caller did, or when the Run starts at
once: with ``alongside`` and ``reject`` it continues from the tail of the
view. A prompt that waits (``enqueue``, ``interrupt``, ``rollback``) names no
parent unless asked, so the tree places it when its turn comes.

docs/howto/double-texting.md explains the multitask strategies.
"""

from __future__ import annotations

from transport import _tracing as tracing
from transport._runs import MULTITASK_STRATEGIES
from transport.asyncio._view import View
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import MessageEntry, Multitask, ThreadAccess, Welcome
from transport.messages import UIMessage

__all__ = ["check_strategy", "prompt_entry"]


def check_strategy(multitask: Multitask | None) -> None:
    """Raise ``VALIDATION_ERROR`` for a multitask strategy the relay does not know."""
    if multitask is not None and multitask not in MULTITASK_STRATEGIES:
        raise RunwireError(
            VALIDATION_ERROR,
            f"unknown multitask strategy {multitask!r}; expected one of "
            + ", ".join(MULTITASK_STRATEGIES),
            details={"multitask": multitask},
        )


def prompt_entry(
    msg: UIMessage,
    run_id: str,
    *,
    agent: str,
    view: View | None,
    welcome: Welcome | None,
    multitask: Multitask | None,
    parent_id: str | None,
    parent_run_id: str | None,
    thread_access: ThreadAccess | None,
    activate: bool | None,
) -> MessageEntry:
    """The prompt of a new Run; ``view`` is None for a write-only session."""
    if tracing.ENABLED:
        carried = dict(msg.metadata)
        tracing.inject(carried)
        if carried != msg.metadata:
            msg = msg.model_copy(update={"metadata": carried})
    effective = multitask or (welcome.multitask if welcome else None) or "alongside"
    if view is not None and parent_id is None and effective in ("alongside", "reject"):
        tail = view.messages()
        parent_id = tail[-1].message.id if tail else None
    return MessageEntry(
        id=msg.id,
        run_id=run_id,
        intent="prompt",
        agent=agent,
        message=msg,
        parent_id=parent_id,
        multitask=multitask,
        parent_run_id=parent_run_id,
        thread_access=thread_access,
        activate=activate,
    )
