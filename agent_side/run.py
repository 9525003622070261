"""``Run``: one turn of the agent, seen from the agent.

Theory of operation
-------------------
A ``Run`` is created for a Run the relay already knows (its prompt is on the
channel, status ``pending``). ``start()`` publishes ``run: active``; ``pipe()``
publishes a response; ``suspend()`` / ``end()`` publish the rest of the
lifecycle. Every entry gets an id fixed when it is built (the run id, a
per-``Run`` nonce and a sequence number), so the driver may re-send it after
a reconnect and the relay drops the repeat.

Input. ``has_input()`` is true while the agent owes an answer: before the
first ``pipe()`` (the prompt), and while steering of this Run that folded in
has not been stamped by a ``pipe()``. It drains pending steering by the queue
mode (``all``: every message waiting; ``one-at-a-time``: one per call) into
the set the next ``pipe()`` lists in ``response_open.seen``.

Signals. ``on_steer()`` is called synchronously the moment a steering message
of this Run folds in. A cancel entry of this Run is offered to
``on_cancel(request)`` (default: accept); once accepted, ``abort_signal``
fires. A refusal (``on_cancel`` returns ``False``) publishes a
``cancel_denied`` entry naming the cancel, so the asker gets
``CANCEL_DENIED`` and every device sees the Run go on; a later cancel is
offered again. A cancel that folded in before ``start()`` is applied right after it.
A terminal lifecycle entry that this Run did not publish (the relay ending it
``AGENT_LOST``) marks it ended and fires ``abort_signal`` too.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from transport.asyncio.abort import AbortController, AbortSignal
from transport.errors import RUN_NOT_ACTIVE, RunwireError
from transport.frames import CancelDenied, ErrorBody, RunEntry, RunStatus
from transport.messages import UIMessage, new_id
from transport.runs import TERMINAL

from .pipe import Chunk, PipeResult, pipe_stream

if TYPE_CHECKING:
    from .session import AgentSession, View

__all__ = [
    "AGENT_ERROR",
    "CancelHook",
    "CancelRequest",
    "Invocation",
    "QueueMode",
    "QueueOptions",
    "Run",
    "SteerHook",
    "queue_options",
]

log = logging.getLogger("runwire.agent")

AGENT_ERROR = "AGENT_ERROR"
"""The code of a Run that ended ``error`` because the agent's code raised."""

QueueMode = Literal["all", "one-at-a-time"]
EndReason = Literal["complete", "cancelled", "error"]
LifecycleStatus = Literal["active", "suspended", "complete", "cancelled", "error"]
_MODES: dict[str, QueueMode] = {"all": "all", "one-at-a-time": "one-at-a-time"}


@dataclass(frozen=True)
class Invocation:
    """Which Run to take: the session and the run id (what a dispatch names)."""

    session_id: str
    run_id: str


@dataclass(frozen=True)
class CancelRequest:
    """A cancel of a Run, as ``on_cancel`` sees it (who asked: ids stamped by the relay).

    ``interrupted_by`` is the Run whose ``interrupt`` / ``rollback`` caused it.
    """

    run_id: str
    reason: str | None = None
    client_id: str | None = None
    user_id: str | None = None
    cancel_id: str | None = None
    interrupted_by: str | None = None


@dataclass(frozen=True)
class QueueOptions:
    """How many waiting messages one ``has_input()`` takes, per kind."""

    steering: QueueMode = "all"
    follow_up: QueueMode = "one-at-a-time"


def queue_options(
    queue: Mapping[str, str] | QueueOptions | None, default: QueueOptions | None = None
) -> QueueOptions:
    """Validate a ``queue={...}`` option; raises ``ValueError`` for unknown keys or modes."""
    base = default or QueueOptions()
    if queue is None:
        return base
    if isinstance(queue, QueueOptions):
        return queue
    unknown = set(queue) - {"steering", "follow_up"}
    if unknown:
        raise ValueError(f"unknown queue keys: {', '.join(sorted(unknown))}")
    modes: list[QueueMode] = []
    for key in ("steering", "follow_up"):
        mode = queue.get(key, getattr(base, key))
        if mode not in _MODES:
            raise ValueError(f"queue mode must be 'all' or 'one-at-a-time', not {mode!r}")
        modes.append(_MODES[mode])
    return QueueOptions(steering=modes[0], follow_up=modes[1])


SteerHook = Callable[[], object]
CancelHook = Callable[[CancelRequest], "bool | Awaitable[bool | None] | None"]


def as_error(error: BaseException | str | None) -> RunwireError:
    """The ``RunwireError`` a Run ends with for ``error`` (``AGENT_ERROR`` unless it is one)."""
    if isinstance(error, RunwireError):
        return error
    if error is None:
        return RunwireError(AGENT_ERROR, "the agent failed")
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return RunwireError(AGENT_ERROR, text)


class Run:
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
    ) -> None:
        from .session import View

        self.invocation = invocation
        self.run_id = invocation.run_id
        self.session_id = invocation.session_id
        self.on_steer = on_steer
        self.on_cancel = on_cancel
        self.queue = queue or QueueOptions()
        self.max_in_flight = max_in_flight
        self.adopted = False
        self.status: RunStatus = "pending"
        self.view: View = View(session, run=self)
        self._session = session
        self._abort = AbortController()
        self._ending = False
        self._answered_prompt = False
        self._drained: list[str] = []
        self._taken: set[str] = set()
        self._stamped: set[str] = set()
        self._seq = 0
        self._nonce = new_id()[:10]
        self._prefix = (
            self.run_id
            if len(self.run_id) <= 150
            else hashlib.sha256(self.run_id.encode()).hexdigest()[:32]
        )

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
    def started(self) -> bool:
        """True once ``start()`` went through (also while suspended or after the end)."""
        return self.status != "pending"

    @property
    def ended(self) -> bool:
        """True once the Run is ``complete``, ``cancelled`` or ``error``."""
        return self.status in TERMINAL

    @property
    def messages(self) -> list[UIMessage]:
        """This Run's own turn only: its prompt, steering and responses, in view order."""
        return [vm.message for vm in self.view.messages() if vm.run_id == self.run_id]

    def unanswered(self) -> list[str]:
        """Ids of this Run's steering messages no response has stamped, oldest first."""
        stamped = self._session._seen_of(self.run_id)
        return [
            mid
            for mid in self._session._steering_of(self.run_id)
            if mid not in stamped and mid not in self._stamped
        ]

    def has_input(self) -> bool:
        """True while there is input the agent has not answered; drains pending steering."""
        if self.ended:
            return False
        stamped = self._session._seen_of(self.run_id)
        pending = [
            mid
            for mid in self._session._steering_of(self.run_id)
            if mid not in self._taken and mid not in stamped
        ]
        if pending:
            take = pending if self.queue.steering == "all" else pending[:1]
            self._drained.extend(take)
            self._taken.update(take)
        return not self._answered_prompt or bool(self._drained)

    # -------------------------------------------------------- lifecycle --

    async def start(self) -> None:
        """Publish ``run: active`` (also resumes a suspended Run).

        A cancel of this Run already in the view is then applied at once.
        Raises ``RunwireError`` (``RUN_NOT_ACTIVE`` once ended, or the relay's refusal).
        """
        if self.ended:
            raise RunwireError(RUN_NOT_ACTIVE, f"run {self.run_id!r} already ended ({self.status})")
        if self.status == "active":
            return
        await self._publish_status("active")
        if self.ended:  # ended elsewhere while the publish was in flight
            return
        self.status = "active"
        request = self._session._cancel_of(self.run_id)
        if request is not None:
            self._offer_cancel(request)

    async def suspend(self) -> None:
        """Publish ``run: suspended``; ``start()`` resumes.

        Raises ``RunwireError(RUN_NOT_ACTIVE)`` unless the Run is active.
        """
        if self.status != "active":
            raise RunwireError(RUN_NOT_ACTIVE, f"run {self.run_id!r} is {self.status}, not active")
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
        (``AGENT_ERROR``). Raises ``RunwireError`` if the relay refuses for
        another reason than the Run having ended already.
        """
        if reason not in ("complete", "cancelled", "error"):
            raise ValueError(f"reason must be complete, cancelled or error, not {reason!r}")
        if self.ended or self._ending:
            return
        body: ErrorBody | None = None
        if reason == "error":
            err = as_error(error)
            body = ErrorBody(code=err.code, message=err.message, details=err.details)
        if self.status == "pending" and reason == "complete":
            await self.start()
            if self.ended:
                return
        self._ending = True
        try:
            await self._publish_status(reason, error=body)
        except RunwireError as exc:
            self._ending = False
            if exc.code != RUN_NOT_ACTIVE:
                raise
            log.debug("run %s had already ended: %s", self.run_id, exc)
            if not self.ended:
                self.status = reason
        else:
            if not self.ended:
                self.status = reason
        self._session._forget(self)

    # ------------------------------------------------------------ output --

    async def pipe(
        self, stream: AsyncIterable[str | Chunk], *, max_in_flight: int | None = None
    ) -> PipeResult:
        """Publish a model's output stream as one response (see ``agent_side.pipe``).

        Starts the Run if needed. The response's ``seen`` lists the steering
        that ``has_input()`` drained. Raises ``RunwireError(RUN_NOT_ACTIVE)``
        if the Run has ended; the stream's and the relay's errors come back as
        ``PipeResult(reason="error")``.
        """
        if self.ended:
            raise RunwireError(RUN_NOT_ACTIVE, f"run {self.run_id!r} already ended ({self.status})")
        if self.status == "pending":
            await self.start()
        seen, self._drained = self._drained, []
        self._stamped.update(seen)
        self._answered_prompt = True
        welcome = self._session._link.conn.welcome
        frame_bytes = welcome.max_frame_bytes if welcome else 1024 * 1024
        result = await pipe_stream(
            stream,
            run_id=self.run_id,
            message_id=new_id(),
            seen=seen,
            abort_signal=self.abort_signal,
            publish=self._session._publish,
            entry_id=self._entry_id,
            max_in_flight=max_in_flight or self.max_in_flight,
            max_batch_bytes=max(4096, frame_bytes // 2),
        )
        if result.message_id is None:  # nothing was published: nothing was stamped
            self._stamped.difference_update(seen)
            self._drained = seen + self._drained
        return result

    # ---------------------------------------------------------- internal --

    def _entry_id(self) -> str:
        self._seq += 1
        return f"{self._prefix}.{self._nonce}.{self._seq}"

    async def _publish_status(
        self, status: LifecycleStatus, *, error: ErrorBody | None = None
    ) -> None:
        entry = RunEntry(
            id=self._entry_id(),
            run_id=self.run_id,
            status=status,
            error=error,
        )
        await self._session._publish(entry)

    def _steering_folded(self) -> None:
        """A steering message of this Run folded in (called on the delivery path)."""
        if self.ended or self.on_steer is None:
            return
        try:
            self.on_steer()
        except Exception:
            log.exception("on_steer of run %s failed", self.run_id)

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
        except Exception:
            log.exception("on_cancel of run %s failed; accepting the cancel", self.run_id)
            decision = True
        if inspect.isawaitable(decision):
            self._session._spawn(self._await_cancel, decision, request)
        elif decision is not False:
            self._abort.abort(request)
        else:
            self._session._spawn(self._deny, request)

    async def _await_cancel(self, decision: Awaitable[bool | None], request: CancelRequest) -> None:
        try:
            accepted = await decision
        except Exception:
            log.exception("on_cancel of run %s failed; accepting the cancel", self.run_id)
            accepted = True
        if accepted is not False:
            self._abort.abort(request)
        else:
            await self._deny(request)

    async def _deny(self, request: CancelRequest) -> None:
        """Tell everyone the cancel was refused (the asker's SDK raises ``CANCEL_DENIED``)."""
        if self.ended or self.abort_signal.aborted:
            return
        entry = CancelDenied(
            id=self._entry_id(),
            run_id=self.run_id,
            cancel_id=request.cancel_id,
            reason="the agent refused to cancel this run",
        )
        try:
            await self._session._publish(entry)
        except RunwireError as exc:
            log.warning("could not refuse the cancel of run %s: %s", self.run_id, exc)

    def _ended_elsewhere(self, status: EndReason, error: RunwireError | None) -> None:
        """The relay (or another publisher) ended this Run."""
        if self.ended:
            return
        self.status = status
        self._session._forget(self)
        self._abort.abort(error or RunwireError(RUN_NOT_ACTIVE, f"run ended {status}"))

    def __repr__(self) -> str:
        return (
            f"Run(session_id={self.session_id!r}, run_id={self.run_id!r}, status={self.status!r})"
        )
