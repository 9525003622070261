"""Cancels of a Run, offered to its ``on_cancel`` hook (internal to ``agent_side``).

A cancel of a started Run is offered to ``on_cancel``; the default accepts it.
Accepted, the Run's abort signal fires. Refused, or when the hook raises, a
``cancel_denied`` entry tells every device, and the asker gets
``CANCEL_DENIED``. Cancels that came before ``start()`` are offered right after
it, oldest first, until one is accepted. docs/explanation/agent-runs.md tells
the reasons.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from transport.asyncio._abort import AbortController, AbortSignal
from transport.errors import RUN_CANCELLED, RunwireError
from transport.frames import CancelDenied, ErrorBody

from ._options import CancelHook, CancelRequest, EndReason, as_error
from ._run_link import RunLink

__all__ = ["CancelledRun", "RunCancels", "cancel_error", "end_error"]

log = logging.getLogger("runwire.agent")


class CancelledRun(Protocol):
    """What ``RunCancels`` needs of its ``Run``."""

    @property
    def run_id(self) -> str: ...

    @property
    def on_cancel(self) -> CancelHook | None: ...

    @property
    def started(self) -> bool: ...

    @property
    def ended(self) -> bool: ...


class RunCancels:
    """Offers one Run's cancels to its ``on_cancel`` hook and publishes the refusals."""

    def __init__(
        self,
        run: CancelledRun,
        link: RunLink,
        abort: AbortController,
        entry_id: Callable[[], str],
        on_cancel: CancelHook | None = None,
    ) -> None:
        self._run = run
        self._link = link
        self._abort = abort
        self._entry_id = entry_id
        self._unlinks: list[Callable[[], None]] = []

    def link(self, signal: AbortSignal) -> None:
        """An outside signal cancels the Run when it fires, as an accepted cancel does."""
        if not self._run.ended:
            self._unlinks.append(signal.add_callback(self._external_abort))

    @property
    def linked(self) -> int:
        """How many outside signals are linked."""
        return len(self._unlinks)

    def _external_abort(self, reason: Any) -> None:
        if not self._run.ended:
            self._abort.abort(reason)

    def unlink_all(self) -> None:
        """Drop the links to outside signals (the Run ended or paused)."""
        unlinks, self._unlinks = self._unlinks, []
        for unlink in unlinks:
            unlink()

    def folded(self, request: CancelRequest) -> None:
        """A cancel entry of this Run folded in; before ``start()`` it waits for it."""
        if self._run.started and not self._run.ended:
            self.offer(request)

    def offer(self, request: CancelRequest) -> None:
        """Offer one cancel to ``on_cancel``: accepted, the abort signal fires."""
        if self._abort.signal.aborted:
            return
        if self._run.on_cancel is None:
            self._abort.abort(request)
            return
        try:
            decision: Any = self._run.on_cancel(request)
        except Exception as exc:
            # An authorisation hook that fails must not let the cancel through.
            log.exception("on_cancel of run %s failed; refusing the cancel", self._run.run_id)
            self._deny_soon(request, _hook_failed(exc))
            return
        if inspect.isawaitable(decision):
            self._link.spawn(self._await_cancel, decision, request)
        elif decision is not False:
            self._abort.abort(request)
        else:
            self._deny_soon(request)

    def _deny_soon(
        self, request: CancelRequest, reason: str = "the agent refused to cancel this run"
    ) -> None:
        """Refuse the cancel from a task, in the place among the connection's publishes
        taken now: before what the Run publishes next (its end), which the asker hears after."""
        slot = self._link.reserve()
        if not self._link.spawn(self._deny, request, reason, slot):
            self._link.release(slot)

    async def _await_cancel(self, decision: Awaitable[bool | None], request: CancelRequest) -> None:
        try:
            accepted = await decision
        except Exception as exc:
            log.exception("on_cancel of run %s failed; refusing the cancel", self._run.run_id)
            await self._deny(request, _hook_failed(exc))
            return
        if accepted is not False:
            self._abort.abort(request)
        else:
            await self._deny(request)

    async def _deny(
        self,
        request: CancelRequest,
        reason: str = "the agent refused to cancel this run",
        slot: int | None = None,
    ) -> None:
        """Tell everyone the cancel was refused (the asker's SDK raises ``CANCEL_DENIED``)."""
        if self._run.ended or self._abort.signal.aborted:
            if slot is not None:
                self._link.release(slot)
            return
        entry = CancelDenied(
            id=self._entry_id(),
            run_id=self._run.run_id,
            cancel_id=request.cancel_id,
            reason=reason,
        )
        try:
            await self._link.publish(entry, slot)
        except RunwireError as exc:
            log.warning("could not refuse the cancel of run %s: %s", self._run.run_id, exc)


def cancel_error(reason: object) -> RunwireError | None:
    """The error a ``cancelled`` end carries for an abort's ``reason``; ``None`` for none.

    A ``CancelRequest`` gives its text (none without one) with who asked in the
    details; a ``RunwireError`` stays as it is; text or an exception becomes
    ``RUN_CANCELLED`` with that text.
    """
    if reason is None:
        return None
    if isinstance(reason, RunwireError):
        return reason
    if isinstance(reason, CancelRequest):
        if not reason.reason:
            return None
        asked = {
            "cancel_id": reason.cancel_id,
            "client_id": reason.client_id,
            "user_id": reason.user_id,
            "interrupted_by": reason.interrupted_by,
        }
        details = {k: v for k, v in asked.items() if v is not None}
        return RunwireError(RUN_CANCELLED, reason.reason, details=details)
    if isinstance(reason, BaseException):
        return RunwireError(RUN_CANCELLED, str(reason) or type(reason).__name__)
    if isinstance(reason, str) and reason:
        return RunwireError(RUN_CANCELLED, reason[:1000])
    return None


def _hook_failed(exc: Exception) -> str:
    """The reason of a cancel refused because ``on_cancel`` raised (never the exception's text)."""
    return f"the agent's on_cancel failed ({type(exc).__name__}); the run goes on"


def end_error(
    reason: EndReason, error: RunwireError | BaseException | str | None, cancel_reason: object
) -> ErrorBody | None:
    """The error a Run's end carries: ``error`` for an ``error`` end, and for a
    ``cancelled`` one the abort's reason (``error`` when given) as ``cancel_error`` says."""
    if reason == "error":
        err = as_error(error)
        return ErrorBody(code=err.code, message=err.message, details=err.details)
    if reason == "cancelled":
        why = cancel_error(error if error is not None else cancel_reason)
        if why is not None:
            return ErrorBody(code=why.code, message=why.message, details=why.details)
    return None
