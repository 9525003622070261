"""The steps a Run publishes besides model calls: tool calls, saved replies, checkpoints.

``RunSteps`` is a part of ``agent_side.Run``. It numbers the Run's steps, each
one a response with a stable message id (``agent_side.durable``). It runs tool
calls as a step (``agent_side.tools``), saves a reply the agent's code decided
after a cancel, and checkpoints a durable Run after every step. It talks to the
session through the Run's ``RunLink``, and to the Run through ``RunLifecycle``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any, Literal, Protocol

from transport.asyncio.abort import AbortController, AbortSignal
from transport.errors import RunwireError
from transport.frames import (
    CheckpointEntry,
    EntryBody,
    ErrorBody,
    Interrupt,
    InterruptEntry,
    InterruptKind,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
)
from transport.interrupts import PAUSE_VERSION
from transport.messages import TextPart, ToolCallPart, UIMessage, new_id
from transport.runs import ended_error

from ._asking import Paused, Unanswered
from ._run_link import RunLink
from .durable import Adoption, run_prefix, step_message_id
from .inputs import RunInputs
from .pipe import PipeResult, close_budget, close_entry
from .tools import (
    INTERRUPTED,
    Pause,
    Tool,
    ToolContext,
    ToolResult,
    execute_tools,
    result_from_dict,
    tool_calls,
)

__all__ = ["RunLifecycle", "RunPaused", "RunSteps"]

log = logging.getLogger("runwire.agent")


class RunPaused(Exception):
    """The Run paused on questions (``interrupts``); the handler should return.

    ``Agent`` leaves a Run that raised it suspended; the relay passes it to a
    worker again once it is answered.
    """

    def __init__(self, interrupts: list[Interrupt]) -> None:
        super().__init__(", ".join(q.id for q in interrupts))
        self.interrupts = interrupts


def paused_step(
    message_id: str,
    calls: list[ToolCallPart],
    results: list[ToolResult],
    parallel: bool,
    max_parallel: int | None,
    timeout: float | None,
) -> dict[str, Any]:
    """The checkpoint a tool step keeps when it pauses: what ``resume_tools`` runs again."""
    return {
        "version": PAUSE_VERSION,
        "message_id": message_id,
        "calls": [c.model_dump(mode="json") for c in calls],
        "results": {r.tool_call_id: asdict(r) for r in results if r.status in ("ok", "error")},
        "parallel": parallel,
        "max_parallel": max_parallel,
        "timeout": timeout,
    }


class RunLifecycle(Protocol):
    """What ``RunSteps`` needs of its ``Run``: its status, and to start or suspend it."""

    @property
    def status(self) -> str: ...

    @property
    def started(self) -> bool: ...

    @property
    def ended(self) -> bool: ...

    @property
    def abort_signal(self) -> AbortSignal: ...

    async def start(self) -> None: ...

    async def suspend(self) -> None: ...


class RunSteps:
    """The steps of one Run: their numbers, entry ids, tool steps, replies and checkpoints."""

    def __init__(
        self,
        run: RunLifecycle,
        run_id: str,
        link: RunLink,
        inputs: RunInputs,
        pause: Pause,
        *,
        durable: bool,
    ) -> None:
        self.run = run
        self.run_id = run_id
        self.prefix = run_prefix(run_id)
        self.link = link
        self.inputs = inputs
        self.pause = pause
        self.durable = durable
        self.state: dict[str, Any] = {}
        """The agent's own state, saved with every checkpoint of a durable Run."""
        self.step = 0
        self.retry_id: str | None = None
        """A step being retried after an adoption: left out of the view until published."""
        self.open_replies: dict[str, UIMessage] = {}
        self.unrun: list[ToolCallPart] = []
        self.unrun_steered = False
        self.run_asks = 0
        self.to_close: list[UIMessage] = []
        """Replies the worker that went away left open, to close as they stand."""
        self.close_appends: dict[str, list[dict[str, Any]]] = {}
        self._nonce = new_id()[:10]
        self._seq = 0

    def adopt(self, plan: Adoption) -> None:
        """Take up the steps a worker that went away left (``agent_side.durable``)."""
        self.step = plan.step
        self.state = plan.state
        self.retry_id = plan.retry_id
        paused_id = (self.pause.step or {}).get("message_id")
        self.to_close = [m for m in plan.close if m.id != paused_id]
        self.close_appends = plan.close_appends
        if paused_id is None:
            self.unrun, self.unrun_steered = plan.unrun, plan.unrun_steered
        else:
            plan.owe = plan.retry_id is not None  # resume_tools() still has a model call to ask
        self.pause.remembered.update(self.state.get("approved_tools") or [])

    async def close_adopted(self) -> None:
        """Close the replies the worker that went away left open, then checkpoint."""
        for message in self.to_close:  # as they stand: their parts are what the view folded
            chunks = self.close_appends.pop(message.id, None)
            if chunks:  # results of calls the step never started (agent_side.durable)
                await self.publish(
                    ResponseAppend(
                        id=self.entry_id(), run_id=self.run_id, message_id=message.id, chunks=chunks
                    )
                )
            await self.publish(
                close_entry(
                    entry_id=self.entry_id(),
                    run_id=self.run_id,
                    message=message,
                    max_bytes=close_budget(self.frame_bytes()),
                )
            )
        if self.to_close:
            self.to_close = []
            await self.checkpoint()

    def entry_id(self) -> str:
        """A new id for an entry of this Run, fixed when the entry is built."""
        self._seq += 1
        return f"{self.prefix}.{self._nonce}.{self._seq}"

    def frame_bytes(self) -> int:
        """The relay's ``max_frame_bytes`` (as its welcome said; 1 MiB before one came)."""
        return self.link.frame_bytes()

    async def publish(self, entry: EntryBody, slot: int | None = None) -> None:
        """Publish one entry of this Run through its session."""
        await self.link.publish(entry, slot)

    async def publish_status(
        self,
        status: Literal["active", "suspended", "complete", "cancelled", "error"],
        *,
        error: ErrorBody | None = None,
        durable: bool | None = None,
        seen: list[str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Publish a lifecycle entry of this Run."""
        entry = RunEntry(
            id=self.entry_id(),
            run_id=self.run_id,
            status=status,
            error=error,
            durable=durable,
            seen=seen,
            timeout=timeout,
        )
        await self.publish(entry)

    def _require_live(self) -> None:
        if self.run.ended:
            raise ended_error(self.run_id, self.run.status)

    async def _live_and_started(self) -> None:
        self._require_live()
        if not self.run.started:
            await self.run.start()
            self._require_live()

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
        if not self.run.started:
            await self.run.start()
            self._require_live()
        stop = signal or self.run.abort_signal
        return await self._tool_step(
            list(calls),
            tools,
            message_id=self.next_step(tools=True),
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

        Call it first thing in a handler. Finished calls keep their results,
        and the calls that asked run again and get their answers. The rest run
        as the step ran them, with ``parallel``, ``max_parallel`` and ``timeout``
        from the checkpoint; each of these options given here overrides what the
        checkpoint kept. May raise ``RunPaused`` again.

        An adopted Run's worker may have gone away after a model step asked for
        tools and before their step started. This runs those calls, with the
        options as ``run_tools`` takes them. When steering newer than that model
        step waits, it answers them ``ABORTED_BEFORE_DISPATCH`` instead (see
        ``agent_side.durable``).
        """
        step = self.pause.step
        if not step or not step.get("calls"):
            return await self._run_unrun(
                tools,
                signal,
                parallel=bool(parallel),
                max_parallel=max_parallel,
                timeout=timeout,
            )
        await self._live_and_started()
        self.pause.step = None
        calls = [ToolCallPart.model_validate(c) for c in step["calls"]]
        finished = {k: result_from_dict(v) for k, v in (step.get("results") or {}).items()}
        results = await self._tool_step(
            calls,
            tools,
            message_id=step["message_id"],
            signal=signal or self.run.abort_signal,
            parallel=bool(step.get("parallel")) if parallel is None else parallel,
            max_parallel=step.get("max_parallel") if max_parallel is None else max_parallel,
            timeout=step.get("timeout") if timeout is None else timeout,
            finished=finished,
        )
        if self.pause.settled:
            self.inputs.owe = False  # the user moved on: the step is answered, nothing more
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
        calls, self.unrun = self.unrun, []
        if not calls:
            return []
        if self.unrun_steered:
            cut_off = AbortController()  # the steering cut that model step off
            cut_off.abort("steered")
            signal = AbortSignal.any(signal or self.run.abort_signal, cut_off.signal)
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
        await self._live_and_started()
        ctx = ToolContext(self.prefix, None, self.pause, asked=self.run_asks)
        try:
            answer = await ctx.interrupt(
                message=message,
                response_schema=response_schema,
                reason=reason,
                expires_at=expires_at,
                kind=kind,
                details=details,
            )
        except Paused as paused:
            await self._pause_on([paused.question], None)
            raise RunPaused([paused.question]) from None
        except Unanswered as exc:
            raise RunwireError(INTERRUPTED, exc.text) from None
        finally:
            self.run_asks = ctx.asked
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
            publish=self.publish,
            entry_id=self.entry_id,
            parallel=parallel,
            max_parallel=max_parallel,
            timeout=timeout,
            pause=self.pause,
            finished=finished,
            max_close_bytes=close_budget(self.frame_bytes()),
        )
        if self.pause.remembered:
            self.state["approved_tools"] = sorted(self.pause.remembered)
        if questions:
            step = paused_step(message_id, calls, results, parallel, max_parallel, timeout)
            await self._pause_on(questions, step)
            raise RunPaused(questions)
        if not signal.aborted:
            self.inputs.owe = True
        await self.checkpoint()
        return results

    async def _pause_on(self, questions: list[Interrupt], step: dict[str, Any] | None) -> None:
        """Publish the questions and ``run: suspended``; the Run's handler should return."""
        await self.publish(
            InterruptEntry(
                id=self.entry_id(),
                run_id=self.run_id,
                status="paused",
                interrupts=questions,
                checkpoint=step,
            )
        )
        await self.run.suspend()
        self.link.forget(self.run)

    async def save_reply(self, content: str | UIMessage, *, interrupted: bool = True) -> str:
        """Save a reply with the content your code decides; returns its message id.

        Closes the reply a cancelled ``pipe()`` left open (``save_interrupted_reply=False``)
        with ``content``, or, with none open, publishes ``content`` as a new
        response. ``interrupted`` sets ``metadata.interrupted``. Raises
        ``RunwireError(RUN_NOT_ACTIVE)`` if the Run has ended.
        """
        await self._live_and_started()
        if isinstance(content, str):
            parts: list[Any] = [TextPart(text=content)] if content else []
            metadata: dict[str, Any] = {}
        else:
            parts, metadata = list(content.parts), dict(content.metadata)
        if interrupted:
            metadata["interrupted"] = True
        if self.open_replies:
            message_id = next(reversed(self.open_replies))
            del self.open_replies[message_id]
        else:
            message_id = self.next_step()
            await self.publish(
                ResponseOpen(id=self.entry_id(), run_id=self.run_id, message_id=message_id)
            )
        message = UIMessage(id=message_id, role="assistant", parts=parts, metadata=metadata)
        await self.publish(
            ResponseClose(
                id=self.entry_id(), run_id=self.run_id, message_id=message_id, message=message
            )
        )
        await self.checkpoint()
        return message_id

    def next_step(self, *, tools: bool = False) -> str:
        """Advance to the next step; its message id (past any step the view shows done)."""
        done = {r.view.message.id for r in self.link.tree().responses(self.run_id) if r.closed}
        while True:
            self.step += 1
            message_id = step_message_id(self.prefix, self.step, tools=tools)
            if message_id not in done and step_message_id(self.prefix, self.step) not in done:
                return message_id

    async def checkpoint(self) -> None:
        """A durable Run's step is done: publish what another worker needs to go on."""
        if not self.durable or self.run.ended:
            return
        entry = CheckpointEntry(
            id=f"{self.prefix}.ckpt.{self.step}",
            run_id=self.run_id,
            step=self.step,
            turn=self.inputs.turn,
            iterations=self.inputs.iterations,
            seen=sorted(self.inputs.stamped),
            state=dict(self.state),
        )
        try:
            await self.publish(entry)
        except RunwireError as exc:
            log.warning("run %s: checkpoint %d not kept: %s", self.run_id, self.step, exc)

    async def close_open_replies(self) -> None:
        """Replies a cancel left open and the agent's code did not save: closed empty."""
        while self.open_replies:
            message_id, message = self.open_replies.popitem()
            empty = message.model_copy(update={"parts": [], "metadata": {"interrupted": True}})
            await self.publish(
                ResponseClose(
                    id=self.entry_id(), run_id=self.run_id, message_id=message_id, message=empty
                )
            )
