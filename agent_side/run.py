"""``Run``: one turn of the agent (and the turns its follow-ups start), seen from the agent.

Theory of operation
-------------------
A ``Run`` is created for a Run the relay already knows (its prompt is on the
channel, status ``pending``). ``start()`` publishes ``run: active``; ``pipe()``
publishes a model call's response; ``run_tools()`` runs tool calls and
publishes their results; ``suspend()`` / ``end()`` publish the rest of the
lifecycle. Every entry gets an id fixed when it is built, so the driver may
re-send it after a reconnect and the relay drops the repeat; every step's
response has a stable message id (see ``agent_side.durable``).

Input (``agent_side.inputs``). ``has_input()`` is true while a model call is
owed: the prompt, steering or a follow-up taken in and not answered yet, or
tool results the model has not seen. It takes queued messages in by the queue
modes and the iteration budget; injects join the next call without causing
one. Queued messages pass the Run's ``input_checks`` first; one that is
refused is published as ``refused`` and never reaches the model. The Run's
``view`` (and ``history()``, what a model reads) holds only what was taken in.

Signals. ``on_steer()`` is called synchronously the moment a steering message
of this Run folds in (once its checks passed); an async one is awaited in a
background task (keep it cheap either way). A cancel entry of this Run is
offered to ``on_cancel(request)`` (default: accept); once accepted,
``abort_signal`` fires. A refusal (``on_cancel`` returns ``False``) publishes a
``cancel_denied`` entry naming the cancel, so the asker gets ``CANCEL_DENIED``
and every device sees the Run go on; a later cancel is offered again. An
``on_cancel`` that raises refuses the cancel the same way (fail closed: a
broken authorisation check lets no cancel through), with a reason naming the
failure; the exception is logged. The ``cancel_denied`` of a plain ``on_cancel`` is
published from a task but takes its place among the connection's publishes when the
hook refused, so it is stored before what the Run publishes next (``end()`` right after
``start()``): the asker hears the refusal, not a Run that ended before it could be
refused. Cancels that folded in before ``start()``
(several devices may have asked) are offered right after it, each on its own,
oldest first, until one is accepted. A terminal lifecycle entry that this Run
did not publish (the relay ending it ``AGENT_LOST``, or ``cancelled`` with
``RUN_TIMEOUT`` at the deadline its ``timeout`` set), or the relay handing the
Run to another worker, marks it ended and fires ``abort_signal`` too (its reason
the end's error).

What a cancel leaves. ``pipe()`` saves the text already streamed as the reply
with ``metadata.interrupted: true`` (with ``save_interrupted_reply=False`` it
leaves the reply open for the agent's code: ``save_reply()``); ``run_tools()``
answers calls not started ``ABORTED_BEFORE_DISPATCH``, keeps finished results
and writes nothing for a call still running.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel

from transport import tracing
from transport.asyncio.abort import AbortController, AbortSignal
from transport.checks import Check, first_refusal, refusal_entry_id
from transport.errors import (
    AGENT_LOST,
    RUN_CANCELLED,
    RUN_NOT_ACTIVE,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import (
    CancelDenied,
    EntryBody,
    ErrorBody,
    Interrupt,
    RefusedEntry,
    ResponseAppend,
    RunEntry,
    RunStatus,
)
from transport.history import history_message, repair_unanswered_tool_calls
from transport.messages import ToolCallPart, UIMessage, new_id
from transport.runs import TERMINAL
from transport.tree import ViewMessage

from .durable import plan_adoption, run_prefix
from .inputs import RunInputs
from .options import (
    AGENT_ERROR,
    ITERATION_LIMIT_REACHED,
    CancelHook,
    CancelRequest,
    EndReason,
    Invocation,
    IterationLimit,
    QueueMode,
    QueueOptions,
    RunOptions,
    SteerHook,
    as_error,
    queue_options,
)
from .pipe import Chunk, PipeResult, close_budget, close_entry, pipe_stream
from .steps import RunPaused, RunSteps
from .tools import Pause
from .view import RunView

if TYPE_CHECKING:
    from .session import AgentSession

__all__ = [
    "AGENT_ERROR",
    "ITERATION_LIMIT_REACHED",
    "CancelHook",
    "CancelRequest",
    "Invocation",
    "QueueMode",
    "QueueOptions",
    "Run",
    "RunOptions",
    "RunPaused",
    "SteerHook",
    "as_error",
    "queue_options",
]

log = logging.getLogger("runwire.agent")

END_RETRY_FIRST = 0.5
"""Seconds before a Run's end the relay's store refused (``STORE_UNAVAILABLE``) is tried again."""
END_RETRY_MAX = 5.0
"""The longest wait between two such tries (it doubles from ``END_RETRY_FIRST``)."""

LifecycleStatus = Literal["active", "suspended", "complete", "cancelled", "error"]
_QUEUED = ("steer", "follow_up", "inject")


class Run(RunSteps):
    """One Run taken by this agent (see the module docstring)."""

    def __init__(
        self,
        session: AgentSession,
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
        self.durable = opts.durable
        self.timeout = opts.timeout
        """Seconds the Run may stay active from each start; the relay ends it ``RUN_TIMEOUT``."""
        self.adopted = adopted
        self.pipe_error: BaseException | None = None
        """Why the last ``pipe()`` ended ``error`` (``None`` when it did not)."""
        self.state: dict[str, Any] = {}
        """The agent's own state, saved with every checkpoint of a durable Run."""
        self.status: RunStatus = "pending"
        self.view = RunView(
            session.view,
            self.run_id,
            tail=self._tail,
            visible=self._visible,
            retry=lambda: self._retry_id,
        )
        self._session = session
        self._abort = AbortController()
        self._unlinks: list[Callable[[], None]] = []
        self._lost: RunwireError | None = None  # the link went away with the Run (AGENT_LOST)
        self._output: set[anyio.CancelScope] = set()  # pipe publishes waiting for the relay
        self._ending = False
        self._started_elsewhere = False  # start() refused: another worker started it
        # The end ``end()`` asked for that the store refused, tried again in the background
        # (explicit mode) until stored: its reason and error.
        self._end_again: tuple[EndReason, RunwireError | BaseException | str | None] | None = None
        self._seq = 0
        self._nonce = new_id()[:10]
        self._prefix = run_prefix(self.run_id)
        self._step = 0
        self._retry_id: str | None = None
        self._to_close: list[UIMessage] = []
        self._close_appends: dict[str, list[dict[str, Any]]] = {}
        self._unrun: list[ToolCallPart] = []
        self._unrun_steered = False
        self._open_replies: dict[str, UIMessage] = {}
        self._refusals: dict[str, RefusedEntry] = {}
        self._prompt_checked = adopted
        self._queue = opts.queue
        self._pause = Pause.from_dict((checkpoint or {}).get("pause") if adopted else None)
        self._run_asks = 0
        self._inputs = RunInputs(
            inputs=lambda: session.tree.inputs(self.run_id),
            checks=opts.input_checks,
            steering=opts.queue.steering,
            follow_up=opts.queue.follow_up,
            spawn=session._spawn,
            ready=self._input_ready,
            refuse=self._input_refused,
            max_iterations=opts.max_iterations,
        )
        if adopted:
            plan = plan_adoption(session.tree, self.run_id, self._prefix, checkpoint)
            self._step = plan.step
            self.state = plan.state
            self._retry_id = plan.retry_id
            paused_id = (self._pause.step or {}).get("message_id")
            self._to_close = [m for m in plan.close if m.id != paused_id]
            self._close_appends = plan.close_appends
            if paused_id is None:
                self._unrun, self._unrun_steered = plan.unrun, plan.unrun_steered
            if paused_id is not None:
                plan.owe = plan.retry_id is not None  # resume_tools() owes the model a call
            self._inputs.restore(
                turn=plan.turn, iterations=plan.iterations, seen=plan.seen, answered=plan.step > 0
            )
            self._inputs.owe = plan.owe
            self._pause.remembered.update(self.state.get("approved_tools") or [])
        else:
            self._inputs.stamped.update(session.tree.seen(self.run_id))
        if signal is not None:
            self.link_signal(signal)

    # ----------------------------------------------------------- reading --

    @property
    def session(self) -> AgentSession:
        """The session attachment this Run belongs to (shared by the session's Runs)."""
        return self._session

    @property
    def abort_signal(self) -> AbortSignal:
        """Fires on an accepted cancel of this Run, or when the relay ends it."""
        return self._abort.signal

    @property
    def interrupts(self) -> list[Interrupt]:
        """The questions this Run waits on while it is paused (``[]`` otherwise)."""
        return self._session.tree.interrupts(self.run_id)

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
        return self.status in TERMINAL

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
        """True once a model call was owed with the turn's ``max_iterations`` used up."""
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
        """The conversation as a model should read it.

        ``view.messages()`` with interrupted replies marked
        ``[interrupted by the user]`` (``history_message``), empty replies left
        out, and every tool call without a result answered ``OUTCOME_UNKNOWN``
        (``repair_unanswered_tool_calls``; the channel is not changed).
        """
        out: list[UIMessage] = []
        for vm in self.view.messages():
            message = vm.message
            if message.role == "assistant" and not message.parts:
                if not message.metadata.get("interrupted"):
                    continue
            out.append(history_message(message))
        return repair_unanswered_tool_calls(out)

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
        """True while a model call is owed; takes queued messages in (module docstring).

        False once ``abort_signal`` fired: a loop ``while run.has_input()`` then ends,
        and what waited stays undelivered.
        """
        if self.ended or self.abort_signal.aborted:
            return False
        return self._inputs.has_input()

    def _visible(self) -> set[str]:
        """Queued ids of this Run its view shows."""
        return set(self._inputs.visible())

    def _tail(self) -> list[str]:
        return self._inputs.tail()

    def link_signal(self, signal: AbortSignal) -> None:
        """Let an outside ``AbortSignal`` (a request's, a shutdown's) cancel this Run.

        When ``signal`` fires, ``abort_signal`` fires with its reason, as for an
        accepted cancel: ``has_input()`` turns false, ``pipe()`` stops, and a
        ``cancelled`` end carries the reason. One that fired already aborts at
        once. The link is dropped once the Run ended or paused. ``create_run(...,
        signal=...)`` calls it; in worker mode call it in the handler.
        """
        if self.ended:
            return
        self._unlinks.append(signal.add_callback(self._external_abort))

    def _external_abort(self, reason: Any) -> None:
        if not self.ended:
            self._abort.abort(reason)

    def _unlink_signals(self) -> None:
        """The Run is done with (ended, paused): drop its links to outside signals."""
        unlinks, self._unlinks = self._unlinks, []
        for unlink in unlinks:
            unlink()

    # -------------------------------------------------------- lifecycle --

    async def start(self) -> None:
        """Publish ``run: active`` (also resumes a suspended Run).

        The first start checks the prompt with the input checks: a refused
        prompt is published as ``refused`` and the Run ends ``error`` with the
        check's error (``start()`` returns; the Run has ended). Cancels of
        this Run already in the view are offered at once. Raises
        ``RunwireError`` (``RUN_NOT_ACTIVE`` once ended, or the relay's refusal:
        resuming a suspended Run takes a slot of the relay's
        ``max_concurrent_runs``, ``VALIDATION_ERROR`` while none is free; the
        Run stays suspended, and once its questions are settled the relay resumes
        it, handing it to a worker, when one frees; a Run whose cancel stands
        resumes, to apply it, free slot or not). A Run another worker started
        first (the relay handed it out twice: it restarted, or this worker's link
        dropped between the dispatch and the start) is refused ``VALIDATION_ERROR``
        (``details["status"]`` is ``"active"``); the ``Agent`` lets its handler go
        quietly then, without ending the Run, which is the other worker's.
        """
        if self.ended:
            raise RunwireError(RUN_NOT_ACTIVE, f"run {self.run_id!r} already ended ({self.status})")
        if self.status == "active":
            return
        if not self._prompt_checked:
            self._prompt_checked = True
            if await self._refuse_prompt():
                return
        try:
            await self._publish_status(
                "active", durable=True if self.durable else None, timeout=self.timeout
            )
        except RunwireError as exc:
            # Refused as already active: another worker started it (the relay handed it
            # out twice). The Agent lets such a handler go quietly.
            self._started_elsewhere = exc.code == VALIDATION_ERROR and (
                exc.details.get("status") == "active"
            )
            raise
        if self.ended:  # ended elsewhere while the publish was in flight
            return
        self.status = "active"
        for message in self._to_close:  # as they stand: their parts are what the view folded
            chunks = self._close_appends.pop(message.id, None)
            if chunks:  # results of calls the step never started (agent_side.durable)
                await self._session._publish(
                    ResponseAppend(
                        id=self._entry_id(),
                        run_id=self.run_id,
                        message_id=message.id,
                        chunks=chunks,
                    )
                )
            await self._session._publish(
                close_entry(
                    entry_id=self._entry_id(),
                    run_id=self.run_id,
                    message=message,
                    max_bytes=close_budget(self._frame_bytes()),
                )
            )
        if self._to_close:
            self._to_close = []
            await self._checkpoint()
        for request in self._session._cancels_of(self.run_id):
            self._offer_cancel(request)  # each asker gets its answer (none once one is taken)

    async def suspend(self) -> None:
        """Publish ``run: suspended``; ``start()`` resumes.

        Raises ``RunwireError(RUN_NOT_ACTIVE)`` unless the Run is active.
        """
        if self.status != "active":
            raise RunwireError(RUN_NOT_ACTIVE, f"run {self.run_id!r} is {self.status}, not active")
        await self._flush_refusals()
        await self._publish_status("suspended")
        if not self.ended:
            self.status = "suspended"

    async def end(
        self,
        reason: EndReason = "complete",
        *,
        error: RunwireError | BaseException | str | None = None,
    ) -> None:
        """Publish the Run's end; ending twice (or after the relay ended it) does nothing.

        ``error`` (for ``reason="error"``) is a ``RunwireError`` or text
        (``AGENT_ERROR``). A ``cancelled`` end carries the abort's reason
        (``cancel_reason``, or ``error`` when given) as a ``RUN_CANCELLED``
        error, so every device's result says why the Run stopped. A Run that
        stopped at its iteration limit with
        ``on_iteration_limit="error"`` ends ``error`` (``ITERATION_LIMIT_REACHED``)
        when asked to end ``complete``. A ``complete`` end saves the injects
        no model call took in (unless the Run keeps no history). Raises
        ``RunwireError`` if the relay refuses for another reason than the Run
        having ended already. ``STORE_UNAVAILABLE`` (the relay's store stayed away
        the connection's ``store_wait``) is raised too, and in explicit mode
        (``agent_side.connect``) this same end is then tried again in the background,
        every 0.5 s at first and every 5 s at most, while the session is open, until
        the store takes it (``ended`` turns true) or the Run ended otherwise; calling
        ``end()`` again is allowed, not needed. (A worker, ``agent_side.Agent``, tries
        it again itself.)
        """
        if reason not in ("complete", "cancelled", "error"):
            raise ValueError(f"reason must be complete, cancelled or error, not {reason!r}")
        if self.ended or self._ending:
            return
        asked = reason
        if (
            reason == "complete"
            and self._inputs.limit_reached
            and self.on_iteration_limit == "error"
        ):
            reason = "error"
            error = error or RunwireError(
                ITERATION_LIMIT_REACHED,
                f"the Run used its {self.max_iterations} model calls of turn {self.turn}",
                details={"max_iterations": self.max_iterations, "turn": self.turn},
            )
        body: ErrorBody | None = None
        if reason == "error":
            err = as_error(error)
            body = ErrorBody(code=err.code, message=err.message, details=err.details)
        elif reason == "cancelled":
            why = cancel_error(error if error is not None else self.cancel_reason)
            if why is not None:
                body = ErrorBody(code=why.code, message=why.message, details=why.details)
        if self.status == "pending" and reason == "complete":
            await self.start()
            if self.ended:
                return
        await self._flush_refusals()
        await self._close_open_replies()
        saved: list[str] | None = None
        if reason == "complete" and self.keeps_history and self.status != "pending":
            saved = self._inputs.to_save() or None
        self._ending = True
        try:
            await self._publish_status(reason, error=body, seen=saved)
        except RunwireError as exc:
            self._ending = False
            if exc.code == STORE_UNAVAILABLE and not self.ended:
                self._end_later(asked, error)
            if exc.code != RUN_NOT_ACTIVE:
                raise
            log.debug("run %s had already ended: %s", self.run_id, exc)
            if not self.ended:
                self.status = reason
        else:
            if not self.ended:
                self.status = reason
        self._session._forget(self)

    def _end_later(
        self, reason: EndReason, error: RunwireError | BaseException | str | None
    ) -> None:
        """The store refused this Run's end: in explicit mode, try it again in the background.

        A worker (``agent_side.Agent``) tries its Runs' ends again itself, holding the
        session meanwhile; here the session is the caller's, open until their block exits.
        """
        if not self._session._owns_link:
            return
        pending = self._end_again is not None
        self._end_again = (reason, error)  # the newest asked for
        if not pending and not self._session._spawn(self._end_retry):
            self._end_again = None

    async def _end_until_stored(
        self, reason: EndReason, error: RunwireError | BaseException | str | None
    ) -> None:
        """The store refused this Run's end: try it again until it is stored (see
        ``_end_retry``). A worker awaits this while it holds the Run's session."""
        self._end_again = (reason, error)
        await self._end_retry()

    async def _end_retry(self) -> None:
        """Try the end the store refused again, every ``END_RETRY_FIRST`` seconds at first
        and every ``END_RETRY_MAX`` at most, until it is stored, the Run ended otherwise, or
        the session closes (a Run nobody ends is ended ``AGENT_LOST`` by the relay)."""
        delay = END_RETRY_FIRST
        try:
            while self._end_again is not None and not self.ended:
                await anyio.sleep(delay)
                delay = min(delay * 2, END_RETRY_MAX)
                if self.ended or self._ending or self._end_again is None:
                    continue  # an end of the caller's is on its way
                reason, error = self._end_again
                try:
                    await self.end(reason, error=error)
                except RunwireError as exc:
                    if exc.code != STORE_UNAVAILABLE:
                        log.warning("could not end run %s: %s", self.run_id, exc)
                        return
                    log.info("could not end run %s yet: %s", self.run_id, exc)
        finally:
            self._end_again = None

    # ------------------------------------------------------------ output --

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
        ``has_input()`` took in; the call counts against the turn's
        ``max_iterations``. On a cancel the reply is saved with what was
        streamed and ``metadata.interrupted`` (``save_interrupted_reply=False``
        leaves it open for ``save_reply``). ``signal`` (steering's abort of this
        model call) stops the read too: the source is closed and the response
        closes as it stands, ``complete``. ``rollup_window`` (seconds; default the
        session's, 0) holds tokens up to that long so several ride one append. Raises
        ``RunwireError(RUN_NOT_ACTIVE)`` if the Run has ended; the stream's and the
        relay's errors (an ``error`` chunk too) come back as ``PipeResult(reason="error")``,
        and a worker (``agent_side.Agent``) whose handler returns after one ends the Run
        ``error``. It always yields to the event loop at least once, also when the Run was
        cancelled already, so no loop around it can spin.
        """
        await anyio.lowlevel.checkpoint()
        self._require_live()
        if self.status == "pending":
            await self.start()
            self._require_live()
        seen, was_answered = self._inputs.take_seen()
        step_before = self._step
        message_id = self._next_step()
        frame_bytes = self._frame_bytes()
        save = (
            self.save_interrupted_reply
            if save_interrupted_reply is None
            else save_interrupted_reply
        )
        with tracing.span("runwire.model_call", attributes={"runwire.run_id": self.run_id}):
            result = await pipe_stream(
                stream,
                run_id=self.run_id,
                message_id=message_id,
                seen=seen,
                abort_signal=self.abort_signal,
                publish=self._publish_output,
                entry_id=self._entry_id,
                max_in_flight=max_in_flight or self.max_in_flight,
                rollup_window=self.rollup_window if rollup_window is None else rollup_window,
                max_batch_bytes=max(256, frame_bytes // 2),
                max_close_bytes=close_budget(frame_bytes),
                save_interrupted=save,
                stop_signal=signal,
            )
        self.pipe_error = result.error if result.reason == "error" else None
        if result.message_id is None:  # nothing was published: nothing was taken in
            self._inputs.untake(seen, was_answered)
            self._step = step_before
            return result
        self._retry_id = None
        if not result.closed and result.message is not None:
            self._open_replies[message_id] = result.message
        elif result.reason != "error":
            await self._checkpoint()
        return result

    # ---------------------------------------------------------- internal --

    async def _publish_output(self, entry: EntryBody) -> None:
        """Publish a piece of a reply; raise the loss once the link went away with the Run
        (waiting publishes too: they would wait for a relay that ended the Run)."""
        if self._lost is not None:
            raise self._lost
        with anyio.CancelScope() as scope:
            self._output.add(scope)
            try:
                await self._session._publish(entry)
            finally:
                self._output.discard(scope)
        if scope.cancelled_caught and self._lost is not None:
            raise self._lost

    def _require_live(self) -> None:
        if self.ended:
            raise RunwireError(RUN_NOT_ACTIVE, f"run {self.run_id!r} already ended ({self.status})")

    def _entry_id(self) -> str:
        self._seq += 1
        return f"{self._prefix}.{self._nonce}.{self._seq}"

    async def _publish_status(
        self,
        status: LifecycleStatus,
        *,
        error: ErrorBody | None = None,
        durable: bool | None = None,
        seen: list[str] | None = None,
        timeout: float | None = None,
    ) -> None:
        entry = RunEntry(
            id=self._entry_id(),
            run_id=self.run_id,
            status=status,
            error=error,
            durable=durable,
            seen=seen,
            timeout=timeout,
        )
        await self._session._publish(entry)

    async def _refuse_prompt(self) -> bool:
        """Check the prompt; a refused one is published and the Run ends ``error``."""
        if not self._inputs.checks:
            return False
        prompt = self._session.tree.prompt(self.run_id)
        if prompt is None:
            return False
        refusal = await first_refusal(self._inputs.checks, prompt.message)
        if refusal is None:
            return False
        self._refusals[prompt.message.id] = _refused_entry(self.run_id, prompt, refusal)
        await self.end("error", error=refusal)
        return True

    def _input_folded(self, vm: ViewMessage) -> None:
        """A queued message of this Run folded in (called on the delivery path)."""
        if not self.ended and vm.intent in _QUEUED:
            self._inputs.folded(vm)

    def _input_ready(self, vm: ViewMessage) -> None:
        """A queued message passed its checks: a steering one calls ``on_steer``.

        A plain hook runs here, on the delivery path; an async one (or a plain
        one returning an awaitable) is awaited in a background task. Either
        way its exception is logged, never raised.
        """
        if vm.intent != "steer" or self.ended or self.on_steer is None:
            return
        try:
            outcome = self.on_steer()
        except Exception:
            log.exception("on_steer of run %s failed", self.run_id)
            return
        if inspect.isawaitable(outcome):
            self._session._spawn(self._await_steer, outcome)

    async def _await_steer(self, outcome: Awaitable[object]) -> None:
        """Finish an async ``on_steer``; its exception is logged."""
        try:
            await outcome
        except Exception:
            log.exception("on_steer of run %s failed", self.run_id)

    def _input_refused(self, vm: ViewMessage, error: RunwireError) -> None:
        log.info("run %s: input check refused %s: %s", self.run_id, vm.message.id, error)
        self._refusals[vm.message.id] = _refused_entry(self.run_id, vm, error)
        self._session._spawn(self._flush_refusals)

    async def _flush_refusals(self) -> None:
        for message_id, entry in list(self._refusals.items()):
            try:
                await self._session._publish(entry)
            except RunwireError as exc:
                log.warning("run %s: refusal of %s not published: %s", self.run_id, message_id, exc)
            self._refusals.pop(message_id, None)

    def _cancel_folded(self, request: CancelRequest) -> None:
        """A cancel entry of this Run folded in; before ``start()`` it waits for it."""
        if self.started and not self.ended:
            self._offer_cancel(request)

    def _offer_cancel(self, request: CancelRequest) -> None:
        if self.abort_signal.aborted:
            return
        if self.on_cancel is None:
            self._abort.abort(request)
            return
        try:
            decision: Any = self.on_cancel(request)
        except Exception as exc:
            # An authorisation hook that fails must not let the cancel through.
            log.exception("on_cancel of run %s failed; refusing the cancel", self.run_id)
            self._deny_soon(request, _hook_failed(exc))
            return
        if inspect.isawaitable(decision):
            self._session._spawn(self._await_cancel, decision, request)
        elif decision is not False:
            self._abort.abort(request)
        else:
            self._deny_soon(request)

    def _deny_soon(
        self, request: CancelRequest, reason: str = "the agent refused to cancel this run"
    ) -> None:
        """Refuse the cancel from a task, in the place among the connection's publishes
        taken now: before what the Run publishes next (its end), which the asker hears after."""
        slot = self._session._reserve()
        if not self._session._spawn(self._deny, request, reason, slot):
            self._session._release(slot)

    async def _await_cancel(self, decision: Awaitable[bool | None], request: CancelRequest) -> None:
        try:
            accepted = await decision
        except Exception as exc:
            log.exception("on_cancel of run %s failed; refusing the cancel", self.run_id)
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
        if self.ended or self.abort_signal.aborted:
            if slot is not None:
                self._session._release(slot)
            return
        entry = CancelDenied(
            id=self._entry_id(),
            run_id=self.run_id,
            cancel_id=request.cancel_id,
            reason=reason,
        )
        try:
            await self._session._publish(entry, slot)
        except RunwireError as exc:
            log.warning("could not refuse the cancel of run %s: %s", self.run_id, exc)

    def _ended_elsewhere(self, status: EndReason, error: RunwireError | None) -> None:
        """The relay (or another publisher) ended this Run."""
        if self.ended:
            return
        self.status = status
        self._session._forget(self)
        self._abort.abort(error or RunwireError(RUN_NOT_ACTIVE, f"run ended {status}"))

    def _attachment_lost(self, error: RunwireError) -> None:
        """The worker lost this Run's session (its token no longer covers it): this agent
        can publish nothing more for the Run, which the relay ends ``AGENT_LOST`` after its
        grace; likewise when the worker's connection stayed down past that grace. Marked
        ended, ``abort_signal`` fires with ``error``, and the reply publishes still waiting
        give up with it."""
        self._lost = error
        for scope in list(self._output):
            scope.cancel()
        self._ended_elsewhere("error", error)

    def _handed_over(self) -> None:
        """The relay gave this Run to another worker (this one was gone too long)."""
        self._ended_elsewhere(
            "error", RunwireError(AGENT_LOST, "the relay handed this Run to another worker")
        )

    def __repr__(self) -> str:
        return (
            f"Run(session_id={self.session_id!r}, run_id={self.run_id!r}, status={self.status!r})"
        )


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


def _refused_entry(run_id: str, vm: ViewMessage, error: RunwireError) -> RefusedEntry:
    return RefusedEntry(
        id=refusal_entry_id(vm.message.id),
        run_id=run_id,
        message_id=vm.message.id,
        intent=vm.intent or "steer",
        error=ErrorBody(code=error.code, message=error.message, details=error.details),
    )


def _hook_failed(exc: Exception) -> str:
    """The reason of a cancel refused because ``on_cancel`` raised (never the exception's text)."""
    return f"the agent's on_cancel failed ({type(exc).__name__}); the run goes on"
