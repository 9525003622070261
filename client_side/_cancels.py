"""Cancelling a Run from a client: publish the cancel, then wait for the Run's end if asked.

``ClientSession.cancel()`` and ``ClientRun.cancel()`` publish a ``cancel``
entry. A cancel of a Run that already ended is not an error: it does nothing.
With ``wait`` they watch the view until the Run ends. The agent may refuse the
cancel with a ``cancel_denied`` entry, which raises ``CANCEL_DENIED``. A reset
that rebuilt the view without the Run raises ``EPOCH_MISMATCH``.

A send's abort signal cancels its Run quietly, from a task: a failure is
logged, not raised.

docs/howto/steering-and-cancel.md shows cancelling from a client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from transport._runs import run_ended
from transport._tree import CancelDenial
from transport.errors import CANCEL_DENIED, RUN_NOT_ACTIVE, RunwireError
from transport.frames import Ack, CancelEntry, EntryBody
from transport.messages import new_id

from ._deliveries import Deliveries

__all__ = ["cancel_quietly", "cancel_run", "denied_error"]

log = logging.getLogger("runwire.client")

Publish = Callable[[EntryBody, "int | None"], Awaitable[Ack]]


async def cancel_run(
    publish: Publish,
    runs: Deliveries,
    run_id: str,
    *,
    reason: str | None,
    wait: bool,
    timeout: float | None,
) -> None:
    """Publish a cancel of ``run_id``; with ``wait``, wait until the Run ends (see above)."""
    cancel = CancelEntry(id=new_id(), run_id=run_id, reason=reason)
    resets = runs.resets
    try:
        await publish(cancel, None)
    except RunwireError as exc:
        if exc.code != RUN_NOT_ACTIVE:
            raise
        return
    if wait:
        await _settled(runs, run_id, cancel.id, timeout, resets)


async def cancel_quietly(publish: Publish, run_id: str, slot: int) -> None:
    """Cancel a Run whose send's signal fired, in the lane place ``slot``; log a failure."""
    cancel = CancelEntry(id=new_id(), run_id=run_id, reason="the send's signal was aborted")
    try:
        await publish(cancel, slot)
    except RunwireError as exc:
        if exc.code != RUN_NOT_ACTIVE:  # it ended meanwhile: nothing to cancel
            log.warning("cancelling run %s after its signal fired failed: %s", run_id, exc)


async def _settled(
    runs: Deliveries, run_id: str, cancel_id: str, timeout: float | None, resets: int
) -> None:
    """Wait until the Run ends; raise ``CANCEL_DENIED`` if cancel ``cancel_id`` is refused,
    ``EPOCH_MISMATCH`` if a reset after ``resets`` lost the Run."""
    view = runs.view
    with anyio.move_on_after(timeout):
        while True:
            denial = view.tree.cancel_denial(cancel_id)
            if denial is not None:
                raise denied_error(denial)
            info = view.run(run_id)
            if info is not None and run_ended(info.status):
                return
            runs.check_lost(run_id, resets)
            await runs.wait_change()


def denied_error(denial: CancelDenial) -> RunwireError:
    """The ``CANCEL_DENIED`` error for a cancel the agent refused."""
    return RunwireError(
        CANCEL_DENIED,
        denial.reason or "the agent refused the cancel",
        details={
            "run_id": denial.run_id,
            "cancel_id": denial.cancel_id,
            "client_id": denial.client_id,
            "user_id": denial.user_id,
        },
    )
