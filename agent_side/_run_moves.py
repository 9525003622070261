"""A Run's moves through its lifecycle: start, suspend and end (internal to ``agent_side``).

``RunMoves`` publishes the Run's ``run`` entries. The first start checks the
prompt and offers the cancels that came before it. An end closes what the Run
left open, saves the injects no model call took in, and passes a refused end
to ``RunEndRetry``. docs/explanation/agent-runs.md tells the details.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from transport._runs import ended_error
from transport.errors import (
    RUN_NOT_ACTIVE,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import RunStatus

from ._inputs import RunInputs
from ._options import ITERATION_LIMIT_REACHED, EndReason, IterationLimit
from ._run_cancels import RunCancels, end_error
from ._run_end_retry import RunEndRetry
from ._run_inbox import RunInbox
from ._run_input_hooks import RunInputHooks
from ._run_link import RunLink
from ._steps import RunSteps

__all__ = ["MovingRun", "RunMoves"]

log = logging.getLogger("runwire.agent")


class MovingRun(Protocol):
    """What ``RunMoves`` needs of its ``Run``."""

    run_id: str
    status: RunStatus
    timeout: float | None
    keeps_history: bool
    on_iteration_limit: IterationLimit

    @property
    def ended(self) -> bool: ...

    @property
    def cancel_reason(self) -> Any: ...

    @property
    def max_iterations(self) -> int | None: ...

    @property
    def turn(self) -> int: ...

    async def end(
        self,
        reason: EndReason = "complete",
        *,
        error: RunwireError | BaseException | str | None = None,
    ) -> None: ...


class RunMoves:
    """Publishes one Run's start, suspend and end, and keeps its status."""

    def __init__(
        self,
        run: MovingRun,
        link: RunLink,
        *,
        steps: RunSteps,
        inputs: RunInputs,
        hooks: RunInputHooks,
        cancels: RunCancels,
        end_retry: RunEndRetry,
        inbox: RunInbox,
        prompt_checked: bool,
    ) -> None:
        self._run = run
        self._link = link
        self._steps = steps
        self._inputs = inputs
        self._hooks = hooks
        self._cancels = cancels
        self._end_retry = end_retry
        self._inbox = inbox
        self.prompt_checked = prompt_checked
        """False until the first start checked the prompt (an adopted Run's was)."""
        self.ending = False
        """True while the Run's end is on its way to the relay."""

    async def start(self) -> None:
        """Publish ``run: active`` (see ``Run.start``)."""
        if self._run.ended:
            raise ended_error(self._run.run_id, self._run.status)
        if self._run.status == "active":
            return
        if not self.prompt_checked:
            self.prompt_checked = True
            refusal = await self._hooks.check_prompt()
            if refusal is not None:
                await self._run.end("error", error=refusal)
                return
        try:
            await self._steps.publish_status(
                "active", durable=True if self._steps.durable else None, timeout=self._run.timeout
            )
        except RunwireError as exc:
            # Refused as already active: another worker started it (the relay handed it
            # out twice). The Agent lets such a handler go quietly.
            self._inbox.started_elsewhere = exc.code == VALIDATION_ERROR and (
                exc.details.get("status") == "active"
            )
            raise
        if self._run.ended:  # ended elsewhere while the publish was in flight
            return
        self._run.status = "active"
        await self._steps.close_adopted()
        for request in self._link.cancels_of(self._run.run_id):
            self._cancels.offer(request)  # each asker gets its answer (none once one is taken)

    async def suspend(self) -> None:
        """Publish ``run: suspended`` (see ``Run.suspend``)."""
        if self._run.status != "active":
            raise RunwireError(
                RUN_NOT_ACTIVE, f"run {self._run.run_id!r} is {self._run.status}, not active"
            )
        await self._hooks.flush()
        await self._steps.publish_status("suspended")
        if not self._run.ended:
            self._run.status = "suspended"

    async def end(
        self, reason: EndReason, error: RunwireError | BaseException | str | None
    ) -> None:
        """Publish the Run's end (see ``Run.end``)."""
        if reason not in ("complete", "cancelled", "error"):
            raise ValueError(f"reason must be complete, cancelled or error, not {reason!r}")
        if self._run.ended or self.ending:
            return
        asked = reason
        if (
            reason == "complete"
            and self._inputs.limit_reached
            and self._run.on_iteration_limit == "error"
        ):
            reason = "error"
            error = error or RunwireError(
                ITERATION_LIMIT_REACHED,
                f"the Run used its {self._run.max_iterations} model calls of turn {self._run.turn}",
                details={"max_iterations": self._run.max_iterations, "turn": self._run.turn},
            )
        body = end_error(reason, error, self._run.cancel_reason)
        if self._run.status == "pending" and reason == "complete":
            await self.start()
            if self._run.ended:
                return
        await self._hooks.flush()
        await self._steps.close_open_replies()
        saved: list[str] | None = None
        if reason == "complete" and self._run.keeps_history and self._run.status != "pending":
            saved = self._inputs.to_save() or None
        self.ending = True
        try:
            await self._steps.publish_status(reason, error=body, seen=saved)
        except RunwireError as exc:
            self.ending = False
            if exc.code == STORE_UNAVAILABLE and not self._run.ended:
                self._end_retry.later(asked, error)
            if exc.code != RUN_NOT_ACTIVE:
                raise
            log.debug("run %s had already ended: %s", self._run.run_id, exc)
            if not self._run.ended:
                self._run.status = reason
        else:
            if not self._run.ended:
                self._run.status = reason
        self._link.forget(self._run)
