"""The steps a Run publishes besides model calls: tool calls, saved replies, checkpoints.

``RunSteps`` is the part of ``agent_side.Run`` that numbers steps (each one a
response with a stable message id, see ``agent_side.durable``), runs tool
calls as a step (``agent_side.tools``), saves a reply the agent's code decided
after a cancel, and checkpoints a durable Run after every step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from transport.asyncio.abort import AbortController, AbortSignal
from transport.errors import RunwireError
from transport.frames import (
    CheckpointEntry,
    Interrupt,
    InterruptEntry,
    InterruptKind,
    ResponseClose,
    ResponseOpen,
)
from transport.interrupts import PAUSE_VERSION
from transport.messages import TextPart, ToolCallPart, UIMessage

from .durable import step_message_id
from .inputs import RunInputs
from .pipe import PipeResult, close_budget
from .tools import (
    INTERRUPTED,
    Pause,
    Tool,
    ToolContext,
    ToolResult,
    _Paused,
    _Unanswered,
    execute_tools,
    result_from_dict,
    tool_calls,
)

if TYPE_CHECKING:
    from .session import AgentSession

__all__ = ["RunPaused", "RunSteps"]

log = logging.getLogger("runwire.agent")


class RunPaused(Exception):
    """The Run paused on questions (``interrupts``); the handler should return.

    ``Agent`` leaves a Run that raised it suspended; the relay hands it to a
    worker again once it is answered.
    """

    def __init__(self, interrupts: list[Interrupt]) -> None:
        super().__init__(", ".join(q.id for q in interrupts))
        self.interrupts = interrupts


class RunSteps:
    """Steps of a Run other than model calls (``Run`` derives from it)."""

    run_id: str
    durable: bool
    state: dict[str, Any]
    _session: AgentSession
    _prefix: str
    _step: int
    _inputs: RunInputs
    _open_replies: dict[str, UIMessage]
    _pause: Pause
    _run_asks: int
    _unrun: list[ToolCallPart]
    _unrun_steered: bool

    async def suspend(self) -> None:  # pragma: no cover - Run defines it
        raise NotImplementedError

    @property
    def ended(self) -> bool:  # pragma: no cover - Run defines it
        raise NotImplementedError

    @property
    def abort_signal(self) -> AbortSignal:  # pragma: no cover - Run defines it
        raise NotImplementedError

    @property
    def started(self) -> bool:  # pragma: no cover - Run defines it
        raise NotImplementedError

    async def start(self) -> None:  # pragma: no cover - Run defines it
        raise NotImplementedError

    def _require_live(self) -> None:  # pragma: no cover - Run defines it
        raise NotImplementedError

    def _entry_id(self) -> str:  # pragma: no cover - Run defines it
        raise NotImplementedError

    def _frame_bytes(self) -> int:
        """The relay's ``max_frame_bytes`` (as its welcome said; 1 MiB before one came)."""
        welcome = self._session._link.conn.welcome
        return welcome.max_frame_bytes if welcome else 1024 * 1024

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

        ``calls`` are tool call parts, or a message / ``PipeResult`` whose
        unanswered calls to run. ``signal`` (default: the Run's abort signal)
        stops the step: calls not started are answered ``ABORTED_BEFORE_DISPATCH``,
        a running call gets no result. Afterwards ``has_input()`` is true, so
        the model sees the results (unless the step was stopped). Returns one
        ``ToolResult`` per call. Raises ``RunwireError(RUN_NOT_ACTIVE)`` if the
        Run has ended, or the relay's error if a publish fails.
        """
        self._require_live()
        if isinstance(calls, PipeResult):
            calls = tool_calls(calls.message)
        elif isinstance(calls, UIMessage):
            calls = tool_calls(calls)
        if not calls:
            return []
        if not self.started:
            await self.start()
            self._require_live()
        stop = signal or self.abort_signal
        return await self._tool_step(
            list(calls),
            tools,
            message_id=self._next_step(tools=True),
            signal=stop,
            parallel=parallel,
            max_parallel=max_parallel,
            timeout=timeout,
            finished={},
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

        Call it first thing in a handler: finished calls keep their results,
        the calls that asked run again and get their answers, the rest run as
        the step ran them (``parallel``, ``max_parallel``, ``timeout`` from
        the checkpoint), unless these options set them: each one given (not
        ``None``) overrides what the checkpoint kept. May raise ``RunPaused``
        again. An adopted Run whose
        worker went away after a model step asked for tools and before their
        step started runs them here (``parallel``, ``max_parallel`` and
        ``timeout`` as ``run_tools`` takes them), or, when steering newer
        than that model step waits, answers them ``ABORTED_BEFORE_DISPATCH``
        (see ``agent_side.durable``).
        """
        step = self._pause.step
        if not step or not step.get("calls"):
            return await self._run_unrun(
                tools,
                signal,
                parallel=bool(parallel),
                max_parallel=max_parallel,
                timeout=timeout,
            )
        self._require_live()
        if not self.started:
            await self.start()
            self._require_live()
        self._pause.step = None
        calls = [ToolCallPart.model_validate(c) for c in step["calls"]]
        finished = {k: result_from_dict(v) for k, v in (step.get("results") or {}).items()}
        results = await self._tool_step(
            calls,
            tools,
            message_id=step["message_id"],
            signal=signal or self.abort_signal,
            parallel=bool(step.get("parallel")) if parallel is None else parallel,
            max_parallel=step.get("max_parallel") if max_parallel is None else max_parallel,
            timeout=step.get("timeout") if timeout is None else timeout,
            finished=finished,
        )
        if self._pause.settled:
            self._inputs.owe = False  # the user moved on: the step is answered, nothing more
        return results

    async def _run_unrun(
        self,
        tools: Iterable[Tool],
        signal: AbortSignal | None,
        *,
        parallel: bool,
        max_parallel: int | None,
        timeout: float | None,
    ) -> list[ToolResult]:
        """The tool calls an adopted Run's last model step asked for and no worker started."""
        calls, self._unrun = self._unrun, []
        if not calls:
            return []
        if self._unrun_steered:
            cut_off = AbortController()  # the steering cut that model step off
            cut_off.abort("steered")
            signal = AbortSignal.any(signal or self.abort_signal, cut_off.signal)
        return await self.run_tools(
            calls,
            tools,
            parallel=parallel,
            max_parallel=max_parallel,
            timeout=timeout,
            signal=signal,
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

        Returns the answer once the Run resumed (the handler runs again from
        its start: keep what it does before asking safe to do twice). Raises
        ``RunPaused`` when nobody answered yet, ``RunwireError(INTERRUPTED)``
        when the question expired or the user moved on or declined.
        """
        self._require_live()
        if not self.started:
            await self.start()
            self._require_live()
        ctx = ToolContext(self._prefix, None, self._pause)
        ctx._n = self._run_asks
        try:
            answer = await ctx.interrupt(
                message=message,
                response_schema=response_schema,
                reason=reason,
                expires_at=expires_at,
                kind=kind,
                details=details,
            )
        except _Paused as paused:
            await self._pause_on([paused.question], None)
            raise RunPaused([paused.question]) from None
        except _Unanswered as exc:
            raise RunwireError(INTERRUPTED, exc.text) from None
        finally:
            self._run_asks = ctx._n
        return answer

    async def _tool_step(
        self,
        calls: list[ToolCallPart],
        tools: Iterable[Tool],
        *,
        message_id: str,
        signal: AbortSignal,
        parallel: bool,
        max_parallel: int | None,
        timeout: float | None,
        finished: dict[str, ToolResult],
    ) -> list[ToolResult]:
        results, _, questions = await execute_tools(
            calls,
            tools,
            run_id=self.run_id,
            message_id=message_id,
            signal=signal,
            publish=self._session._publish,
            entry_id=self._entry_id,
            parallel=parallel,
            max_parallel=max_parallel,
            timeout=timeout,
            pause=self._pause,
            finished=finished,
            max_close_bytes=close_budget(self._frame_bytes()),
        )
        if self._pause.remembered:
            self.state["approved_tools"] = sorted(self._pause.remembered)
        if questions:
            step = {
                "version": PAUSE_VERSION,
                "message_id": message_id,
                "calls": [c.model_dump(mode="json") for c in calls],
                "results": {
                    r.tool_call_id: asdict(r) for r in results if r.status in ("ok", "error")
                },
                "parallel": parallel,
                "max_parallel": max_parallel,
                "timeout": timeout,
            }
            await self._pause_on(questions, step)
            raise RunPaused(questions)
        if not signal.aborted:
            self._inputs.owe = True
        await self._checkpoint()
        return results

    async def _pause_on(self, questions: list[Interrupt], step: dict[str, Any] | None) -> None:
        """Publish the questions and ``run: suspended``; the Run's handler should return."""
        await self._session._publish(
            InterruptEntry(
                id=self._entry_id(),
                run_id=self.run_id,
                status="paused",
                interrupts=questions,
                checkpoint=step,
            )
        )
        await self.suspend()
        self._session._forget(self)  # type: ignore[arg-type]

    async def save_reply(self, content: str | UIMessage, *, interrupted: bool = True) -> str:
        """Save a reply with the content your code decides; returns its message id.

        Closes the reply a cancelled ``pipe()`` left open (``save_interrupted_reply=False``)
        with ``content``, or, with none open, publishes ``content`` as a new
        response. ``interrupted`` sets ``metadata.interrupted``. Raises
        ``RunwireError(RUN_NOT_ACTIVE)`` if the Run has ended.
        """
        self._require_live()
        if not self.started:
            await self.start()
            self._require_live()
        if isinstance(content, str):
            parts: list[Any] = [TextPart(text=content)] if content else []
            metadata: dict[str, Any] = {}
        else:
            parts, metadata = list(content.parts), dict(content.metadata)
        if interrupted:
            metadata["interrupted"] = True
        if self._open_replies:
            message_id = next(reversed(self._open_replies))
            del self._open_replies[message_id]
        else:
            message_id = self._next_step()
            await self._session._publish(
                ResponseOpen(id=self._entry_id(), run_id=self.run_id, message_id=message_id)
            )
        message = UIMessage(id=message_id, role="assistant", parts=parts, metadata=metadata)
        await self._session._publish(
            ResponseClose(
                id=self._entry_id(), run_id=self.run_id, message_id=message_id, message=message
            )
        )
        await self._checkpoint()
        return message_id

    def _next_step(self, *, tools: bool = False) -> str:
        """Advance to the next step; its message id (past any step the view shows done)."""
        done = {r.view.message.id for r in self._session.tree.responses(self.run_id) if r.closed}
        while True:
            self._step += 1
            message_id = step_message_id(self._prefix, self._step, tools=tools)
            if message_id not in done and step_message_id(self._prefix, self._step) not in done:
                return message_id

    async def _checkpoint(self) -> None:
        """A durable Run's step is done: publish what another worker needs to go on."""
        if not self.durable or self.ended:
            return
        entry = CheckpointEntry(
            id=f"{self._prefix}.ckpt.{self._step}",
            run_id=self.run_id,
            step=self._step,
            turn=self._inputs.turn,
            iterations=self._inputs.iterations,
            seen=sorted(self._inputs.stamped),
            state=dict(self.state),
        )
        try:
            await self._session._publish(entry)
        except RunwireError as exc:
            log.warning("run %s: checkpoint %d not kept: %s", self.run_id, self._step, exc)

    async def _close_open_replies(self) -> None:
        """Replies a cancel left open and the agent's code did not save: closed empty."""
        while self._open_replies:
            message_id, message = self._open_replies.popitem()
            empty = message.model_copy(update={"parts": [], "metadata": {"interrupted": True}})
            await self._session._publish(
                ResponseClose(
                    id=self._entry_id(), run_id=self.run_id, message_id=message_id, message=empty
                )
            )
