"""``Run``: one turn of the agent (and the turns its follow-ups start), seen from the agent.

A ``Run`` is made for a Run the relay already knows: its prompt is on the
channel, status ``pending``. ``start()`` publishes ``run: active``, ``pipe()``
publishes a model call's response, ``run_tools()`` runs tool calls, and
``suspend()`` and ``end()`` publish the rest of the lifecycle. Every entry gets
its id when it is built, so a repeat after a reconnect is dropped by the relay.

The Run is one class with parts: ``RunMoves`` publishes its lifecycle,
``RunInputs`` takes queued messages in, ``RunSteps`` numbers steps and runs
tools, and ``RunCancels`` offers cancels to ``on_cancel``. It talks to its
session only through a ``RunLink``, and the session talks back through
``run.inbox``.
docs/explanation/agent-runs.md tells how input, cancels and steps work.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from transport.asyncio.abort import AbortController, AbortSignal
from transport.checks import Check
from transport.errors import (
    RunwireError,
)
from transport.frames import (
    Interrupt,
    InterruptKind,
    RunStatus,
)
from transport.history import model_history
from transport.messages import ToolCallPart, UIMessage
from transport.runs import ended_error, run_ended

from ._run_cancels import RunCancels
from ._run_end_retry import RunEndRetry
from ._run_inbox import RunInbox
from ._run_input_hooks import RunInputHooks
from ._run_link import RunLink, RunSession, RunView
from ._run_model_call import model_call
from ._run_moves import RunMoves
from ._run_output import RunOutput
from .durable import plan_adoption
from .inputs import RunInputs
from .options import (
    CancelHook,
    EndReason,
    Invocation,
    IterationLimit,
    QueueOptions,
    RunOptions,
    SteerHook,
    queue_options,
)
from .pipe import Chunk, PipeResult
from .steps import RunPaused, RunSteps
from .tools import Pause, Tool, ToolResult

__all__ = ["END_RETRY_FIRST", "END_RETRY_MAX", "Run", "RunPaused"]

log = logging.getLogger("runwire.agent")

END_RETRY_FIRST = 0.5
"""Seconds before a Run's end the relay's store refused (``STORE_UNAVAILABLE``) is tried again."""
END_RETRY_MAX = 5.0
"""The longest wait between two such tries (it doubles from ``END_RETRY_FIRST``)."""


class Run:
    """One Run taken by this agent (see the module docstring)."""

    def __init__(
        self,
        session: RunSession,
        invocation: Invocation,
        *,
        on_steer: SteerHook | None = None,
        on_cancel: CancelHook | None = None,
        queue: QueueOptions | None = None,
        max_in_flight: int = 1,
        options: RunOptions | None = None,
        adopted: bool = False,
        rollup_window: float = 0.0,
        checkpoint: dict[str, Any] | None = None,
        signal: AbortSignal | None = None,
    ) -> None:
        opts = options or RunOptions()
        if queue is not None:
            opts = opts.merge(queue=queue)
        self.invocation = invocation
        self.run_id = invocation.run_id
        self.session_id = invocation.session_id
        self.on_steer = on_steer
        self.on_cancel = on_cancel
        self.max_in_flight = max_in_flight
        self.rollup_window = rollup_window
        """Seconds ``pipe()`` may hold tokens before it publishes them (``pipe_stream``)."""
        self.on_iteration_limit: IterationLimit = opts.on_iteration_limit
        self.keeps_history = opts.history
        self.save_interrupted_reply = opts.save_interrupted_reply
        self.timeout = opts.timeout
        """Seconds the Run may stay active from each start; the relay ends it ``RUN_TIMEOUT``."""
        self.adopted = adopted
        self.pipe_error: BaseException | None = None
        """Why the last ``pipe()`` ended ``error`` (``None`` when it did not)."""
        self.status: RunStatus = "pending"
        self._session = session
        self._link: RunLink = session.run_link()
        self._abort = AbortController()
        self._queue = opts.queue
        link = self._link
        self._inputs = RunInputs(
            inputs=lambda: link.tree().inputs(self.run_id),
            checks=opts.input_checks,
            steering=opts.queue.steering,
            follow_up=opts.queue.follow_up,
            spawn=link.spawn,
            ready=lambda vm: self._hooks.ready(vm),
            refuse=lambda vm, error: self._hooks.refused(vm, error),
            max_iterations=opts.max_iterations,
        )
        pause = Pause.from_dict((checkpoint or {}).get("pause") if adopted else None)
        self._steps = RunSteps(self, self.run_id, link, self._inputs, pause, durable=opts.durable)
        self._cancels = RunCancels(self, link, self._abort, self._steps.entry_id)
        self._output = RunOutput(self._steps.publish)
        self._hooks = RunInputHooks(self, link, self._steps.publish, lambda: self._inputs.checks)
        self._end_retry = RunEndRetry(
            self.run_id,
            link,
            self.end,
            ended=lambda: self.ended,
            ending=lambda: self._moves.ending,
            delays=lambda: (END_RETRY_FIRST, END_RETRY_MAX),
        )
        self.inbox = RunInbox(
            self,
            link,
            self._abort,
            inputs=self._inputs,
            steps=self._steps,
            cancels=self._cancels,
            output=self._output,
            end_retry=self._end_retry,
        )
        """How the session talks to this Run (internal to the SDK)."""
        self._moves = RunMoves(
            self,
            link,
            steps=self._steps,
            inputs=self._inputs,
            hooks=self._hooks,
            cancels=self._cancels,
            end_retry=self._end_retry,
            inbox=self.inbox,
            prompt_checked=adopted,
        )
        self.view: RunView = link.view_of(self)
        if adopted:
            self._adopt(checkpoint)
        else:
            self._inputs.stamped.update(link.tree().seen(self.run_id))
        if signal is not None:
            self.link_signal(signal)

    def _adopt(self, checkpoint: dict[str, Any] | None) -> None:
        """Take up where the worker that went away left the Run (``agent_side.durable``)."""
        plan = plan_adoption(self._link.tree(), self.run_id, self._steps.prefix, checkpoint)
        self._steps.adopt(plan)
        self._inputs.restore(
            turn=plan.turn, iterations=plan.iterations, seen=plan.seen, answered=plan.step > 0
        )
        self._inputs.owe = plan.owe

    @property
    def session(self) -> RunSession:
        """The session attachment this Run belongs to (shared by the session's Runs)."""
        return self._session

    @property
    def state(self) -> dict[str, Any]:
        """The agent's own state, saved with every checkpoint of a durable Run."""
        return self._steps.state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._steps.state = value

    @property
    def durable(self) -> bool:
        """True if the Run keeps checkpoints, so another worker can take it up."""
        return self._steps.durable

    @durable.setter
    def durable(self, value: bool) -> None:
        self._steps.durable = value

    @property
    def abort_signal(self) -> AbortSignal:
        """Fires on an accepted cancel of this Run, or when the relay ends it."""
        return self._abort.signal

    @property
    def interrupts(self) -> list[Interrupt]:
        """The questions this Run waits on while it is paused (``[]`` otherwise)."""
        return self._link.tree().interrupts(self.run_id)

    @property
    def cancel_reason(self) -> Any:
        """Why ``abort_signal`` fired: the accepted ``CancelRequest``, an external
        signal's reason, or the relay's error; ``None`` while it has not fired."""
        return self._abort.signal.reason if self._abort.signal.aborted else None

    @property
    def started(self) -> bool:
        """True once ``start()`` went through (also while suspended or after the end)."""
        return self.status != "pending"

    @property
    def ended(self) -> bool:
        """True once the Run is ``complete``, ``cancelled`` or ``error``."""
        return run_ended(self.status)

    @property
    def queue(self) -> QueueOptions:
        """The queue modes (set it with a ``QueueOptions`` or a ``{"steering": ...}`` dict)."""
        return self._queue

    @queue.setter
    def queue(self, value: Mapping[str, str] | QueueOptions) -> None:
        self._queue = queue_options(value, self._queue)
        self._inputs.steering = self._queue.steering
        self._inputs.follow_up = self._queue.follow_up

    @property
    def max_iterations(self) -> int | None:
        """Model calls (``pipe()``) allowed per turn; ``None``: no limit."""
        return self._inputs.max_iterations

    @max_iterations.setter
    def max_iterations(self, value: int | None) -> None:
        if value is not None and value < 1:
            raise ValueError("max_iterations must be at least 1 (or None)")
        self._inputs.max_iterations = value

    @property
    def turn(self) -> int:
        """The turn the Run is in (each follow-up it takes starts a new one)."""
        return self._inputs.turn

    @property
    def iterations(self) -> int:
        """Model calls made in the current turn."""
        return self._inputs.iterations

    @property
    def iteration_limit_reached(self) -> bool:
        """True once a model call was still to make with the turn's ``max_iterations`` used up."""
        return self._inputs.limit_reached

    @property
    def input_checks(self) -> list[Check]:
        """The checks queued messages (and the prompt) pass before the model sees them."""
        return self._inputs.checks

    @property
    def messages(self) -> list[UIMessage]:
        """This Run's own turn only: its prompt, queued messages taken in and responses."""
        return [vm.message for vm in self.view.messages() if vm.run_id == self.run_id]

    def history(self) -> list[UIMessage]:
        """The conversation as a model should read it (``model_history`` of the view)."""
        return model_history(vm.message for vm in self.view.messages())

    def unanswered(self) -> list[str]:
        """Ids of this Run's steering messages no response has stamped, oldest first."""
        return self._inputs.steering_unstamped()

    def undelivered(self) -> list[str]:
        """Ids of this Run's queued messages no response took in (refused ones left out)."""
        return self._inputs.undelivered()

    def refused(self) -> dict[str, RunwireError]:
        """This Run's queued messages its input checks refused, by id."""
        return dict(self._inputs.refused)

    def has_input(self) -> bool:
        """True while a model call is still to make; takes queued messages in (module docstring).

        False once ``abort_signal`` fired: a loop ``while run.has_input()`` then ends,
        and what waited stays undelivered.
        """
        if self.ended or self.abort_signal.aborted:
            return False
        return self._inputs.has_input()

    def link_signal(self, signal: AbortSignal) -> None:
        """Let an outside ``AbortSignal`` (a request's, a shutdown's) cancel this Run.

        When it fires, ``abort_signal`` fires with its reason, as for an
        accepted cancel. The link is dropped once the Run ended or paused.
        """
        self._cancels.link(signal)

    @property
    def linked_signals(self) -> int:
        """How many outside signals may still cancel this Run (``link_signal``)."""
        return self._cancels.linked

    async def start(self) -> None:
        """Publish ``run: active``; also resumes a suspended Run.

        The first start checks the prompt: a refused one ends the Run ``error``.
        Cancels already in the view are offered at once. Raises ``RunwireError``:
        ``RUN_NOT_ACTIVE`` once ended, or the relay's refusal, such as
        ``VALIDATION_ERROR`` while no slot is free or another worker started the
        Run. docs/explanation/agent-runs.md tells the details.
        """
        await self._moves.start()

    async def suspend(self) -> None:
        """Publish ``run: suspended``; ``start()`` resumes.

        Raises ``RunwireError(RUN_NOT_ACTIVE)`` unless the Run is active.
        """
        await self._moves.suspend()

    async def end(
        self,
        reason: EndReason = "complete",
        *,
        error: RunwireError | BaseException | str | None = None,
    ) -> None:
        """Publish the Run's end; ending twice, or after the relay ended it, does nothing.

        ``error`` (for ``reason="error"``) is a ``RunwireError`` or text. A
        ``cancelled`` end carries the abort's reason as ``RUN_CANCELLED``. A
        ``complete`` end saves the injects no model call took in. Raises the
        relay's refusal, unless the Run had ended already. On ``STORE_UNAVAILABLE``
        explicit mode tries the end again in the background
        (docs/explanation/agent-runs.md).
        """
        await self._moves.end(reason, error)

    async def pipe(
        self,
        stream: AsyncIterable[str | Chunk],
        *,
        max_in_flight: int | None = None,
        save_interrupted_reply: bool | None = None,
        signal: AbortSignal | None = None,
        rollup_window: float | None = None,
    ) -> PipeResult:
        """Publish a model call's output stream as one response (see ``agent_side.pipe``).

        Starts the Run if needed. The response's ``seen`` lists what
        ``has_input()`` took in, and the call counts against ``max_iterations``.
        On a cancel the reply is saved as streamed, with ``metadata.interrupted``.
        ``signal`` stops the read and closes the response as it stands.
        Raises ``RunwireError(RUN_NOT_ACTIVE)`` if the Run has ended; other
        errors come back as ``PipeResult(reason="error")``.
        """
        await anyio.lowlevel.checkpoint()
        self._require_live()
        if self.status == "pending":
            await self.start()
            self._require_live()
        save = (
            self.save_interrupted_reply
            if save_interrupted_reply is None
            else save_interrupted_reply
        )
        result = await model_call(
            self._steps,
            stream,
            abort_signal=self.abort_signal,
            publish=self._output.publish,
            max_in_flight=max_in_flight or self.max_in_flight,
            rollup_window=self.rollup_window if rollup_window is None else rollup_window,
            save_interrupted=save,
            stop_signal=signal,
        )
        self.pipe_error = result.error if result.reason == "error" else None
        return result

    async def run_tools(
        self,
        calls: Sequence[ToolCallPart] | UIMessage | PipeResult,
        tools: Iterable[Tool],
        *,
        parallel: bool = False,
        max_parallel: int | None = None,
        timeout: float | None = None,
        signal: AbortSignal | None = None,
    ) -> list[ToolResult]:
        """Run tool calls as one step and publish their results (see ``agent_side.tools``).

        ``calls`` are tool call parts, or a message or ``PipeResult`` whose
        unanswered calls to run. ``signal`` (default: the Run's abort signal)
        stops the step. Returns one ``ToolResult`` per call.
        """
        return await self._steps.run_tools(
            calls,
            tools,
            parallel=parallel,
            max_parallel=max_parallel,
            timeout=timeout,
            signal=signal,
        )

    async def resume_tools(
        self,
        tools: Iterable[Tool],
        *,
        signal: AbortSignal | None = None,
        parallel: bool | None = None,
        max_parallel: int | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """Finish the tool step a resumed Run paused in; ``[]`` when it paused in none.

        Call it first thing in a handler. Each option given overrides what the
        checkpoint kept. May raise ``RunPaused`` again.
        """
        return await self._steps.resume_tools(
            tools, signal=signal, parallel=parallel, max_parallel=max_parallel, timeout=timeout
        )

    async def interrupt(
        self,
        *,
        message: str,
        response_schema: Any = None,
        reason: str = "",
        expires_at: Any = None,
        kind: InterruptKind = "input",
        details: dict[str, Any] | None = None,
    ) -> Any:
        """Ask a person outside a tool (ids ``<run>#<n>``); pauses the Run until answered.

        Returns the answer once the Run resumed. Raises ``RunPaused`` while
        nobody answered, ``RunwireError(INTERRUPTED)`` once it cannot be answered.
        """
        return await self._steps.interrupt(
            message=message,
            response_schema=response_schema,
            reason=reason,
            expires_at=expires_at,
            kind=kind,
            details=details,
        )

    async def save_reply(self, content: str | UIMessage, *, interrupted: bool = True) -> str:
        """Save a reply with the content your code decides; returns its message id.

        Closes the reply a cancelled ``pipe()`` left open, or publishes a new one.
        """
        return await self._steps.save_reply(content, interrupted=interrupted)

    def _require_live(self) -> None:
        if self.ended:
            raise ended_error(self.run_id, self.status)

    def __repr__(self) -> str:
        return (
            f"Run(session_id={self.session_id!r}, run_id={self.run_id!r}, status={self.status!r})"
        )
