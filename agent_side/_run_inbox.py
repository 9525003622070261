"""What a session tells one of its Runs, and what it asks of it (internal to ``agent_side``).

The session folds the channel's entries and passes a Run what concerns it
through ``run.inbox``: its queued messages, its cancels, its end by the relay,
and the loss of its session. The session's view of the Run reads which of its
queued messages to show from here too.
"""

from __future__ import annotations

from typing import Protocol

from transport._tree import ViewMessage
from transport.asyncio._abort import AbortController
from transport.errors import AGENT_LOST, RUN_NOT_ACTIVE, RunwireError
from transport.frames import RunStatus

from ._inputs import RunInputs
from ._options import CancelRequest, EndReason
from ._run_cancels import RunCancels
from ._run_end_retry import EndAsked, RunEndRetry
from ._run_link import RunLink
from ._run_output import RunOutput
from ._steps import RunSteps

__all__ = ["InboxRun", "RunInbox"]

_QUEUED = ("steer", "follow_up", "inject")


class InboxRun(Protocol):
    """What ``RunInbox`` needs of its ``Run``."""

    status: RunStatus

    @property
    def ended(self) -> bool: ...


class RunInbox:
    """The one way a session talks to a Run: entries folded in, ends, and what to show."""

    def __init__(
        self,
        run: InboxRun,
        link: RunLink,
        abort: AbortController,
        *,
        inputs: RunInputs,
        steps: RunSteps,
        cancels: RunCancels,
        output: RunOutput,
        end_retry: RunEndRetry,
    ) -> None:
        self._run = run
        self._link = link
        self._abort = abort
        self._inputs = inputs
        self._steps = steps
        self._cancels = cancels
        self._output = output
        self._end_retry = end_retry
        self.started_elsewhere = False
        """True once ``start()`` was refused because another worker started the Run."""

    def input_folded(self, vm: ViewMessage) -> None:
        """A queued message of this Run folded in (called on the delivery path)."""
        if not self._run.ended and vm.intent in _QUEUED:
            self._inputs.folded(vm)

    def cancel_folded(self, request: CancelRequest) -> None:
        """A cancel entry of this Run folded in (called on the delivery path)."""
        self._cancels.folded(request)

    def ended_elsewhere(self, status: EndReason, error: RunwireError | None) -> None:
        """The relay, or another publisher, ended this Run."""
        run = self._run
        if run.ended:
            return
        run.status = status
        self._link.forget(run)
        self._abort.abort(error or RunwireError(RUN_NOT_ACTIVE, f"run ended {status}"))

    def attachment_lost(self, error: RunwireError) -> None:
        """The worker lost this Run's session: marked ended, the abort signal fires with
        ``error``, and the reply publishes still waiting give up with it."""
        self._output.lose(error)
        self.ended_elsewhere("error", error)

    def passed_on(self) -> None:
        """The relay gave this Run to another worker (this one was gone too long)."""
        self.ended_elsewhere(
            "error", RunwireError(AGENT_LOST, "the relay handed this Run to another worker")
        )

    def unlink_signals(self) -> None:
        """The Run is done with (ended, paused): drop its links to outside signals."""
        self._cancels.unlink_all()

    def visible_inputs(self) -> set[str]:
        """Queued ids of this Run its view shows."""
        return set(self._inputs.visible())

    def input_tail(self) -> list[str]:
        """Ids of this Run's input still to answer, which its view shows last."""
        return self._inputs.tail()

    @property
    def retry_id(self) -> str | None:
        """A step being retried after an adoption: the view leaves it out until published."""
        return self._steps.retry_id

    @property
    def end_asked(self) -> EndAsked | None:
        """The end the store refused, still tried again in the background (None: none)."""
        return self._end_retry.asked

    async def end_until_stored(
        self, reason: EndReason, error: RunwireError | BaseException | str | None
    ) -> None:
        """The store refused this Run's end: try it again until it is stored. A worker
        awaits this while it holds the Run's session."""
        await self._end_retry.until_stored(reason, error)
