"""The steps a Run publishes besides model calls: tool calls, saved replies, checkpoints.

``RunSteps`` is the part of ``agent_side.Run`` that numbers steps (each one a
response with a stable message id, see ``agent_side.durable``), runs tool
calls as a step (``agent_side.tools``), saves a reply the agent's code decided
after a cancel, and checkpoints a durable Run after every step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from transport.asyncio.abort import AbortSignal
from transport.errors import RunwireError
from transport.frames import CheckpointEntry, ResponseClose, ResponseOpen
from transport.messages import TextPart, ToolCallPart, UIMessage

from .durable import step_message_id
from .inputs import RunInputs
from .pipe import PipeResult
from .tools import Tool, ToolResult, execute_tools, tool_calls

if TYPE_CHECKING:
    from .session import AgentSession

__all__ = ["RunSteps"]

log = logging.getLogger("runwire.agent")


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
        results, _ = await execute_tools(
            list(calls),
            tools,
            run_id=self.run_id,
            message_id=self._next_step(tools=True),
            signal=stop,
            publish=self._session._publish,
            entry_id=self._entry_id,
            parallel=parallel,
            max_parallel=max_parallel,
            timeout=timeout,
        )
        if not stop.aborted:
            self._inputs.owe = True
        await self._checkpoint()
        return results

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
