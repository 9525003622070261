"""The agent SDK: take Runs, stream answers, honour steering and cancels.

Worker mode::

    agent = agent_side.Agent("ws://127.0.0.1:8787", name="default")

    @agent.on_run
    async def handle(run):
        await agent_side.steering_loop(run, model)

    await agent.serve()

Explicit mode::

    async with agent_side.connect(url, session_id) as session:
        run = session.create_run(invocation, on_steer=..., on_cancel=...)
        await run.start()
        while run.has_input():
            await run.pipe(model(run.history(), run.abort_signal))
        await run.end()
"""

from transport._history import (
    ABORTED_BEFORE_DISPATCH,
    OUTCOME_UNKNOWN,
    history_message,
    repair_unanswered_tool_calls,
)
from transport._interrupts import pending_questions
from transport.asyncio._abort import AbortController, AbortSignal

from ._agent import Agent, RunHandler
from ._loop import Model, steering_loop
from ._options import (
    AGENT_ERROR,
    ITERATION_LIMIT_REACHED,
    CancelHook,
    CancelRequest,
    Invocation,
    QueueOptions,
    RunOptions,
    SteerHook,
)
from ._pipe import PipeResult
from ._run import Run, RunPaused
from ._session import AgentSession, connect
from ._tools import (
    APPROVAL_SCHEMA,
    INTERRUPTED,
    TOOL_ERROR,
    TOOL_NOT_FOUND,
    TOOL_TIMEOUT,
    Approval,
    Tool,
    ToolContext,
    ToolResult,
    tool,
    tool_calls,
)
from ._view import RunView, View

__all__ = [
    "ABORTED_BEFORE_DISPATCH",
    "AGENT_ERROR",
    "APPROVAL_SCHEMA",
    "INTERRUPTED",
    "ITERATION_LIMIT_REACHED",
    "OUTCOME_UNKNOWN",
    "TOOL_ERROR",
    "TOOL_NOT_FOUND",
    "TOOL_TIMEOUT",
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentSession",
    "Approval",
    "CancelHook",
    "CancelRequest",
    "Invocation",
    "Model",
    "PipeResult",
    "QueueOptions",
    "Run",
    "RunHandler",
    "RunOptions",
    "RunPaused",
    "RunView",
    "SteerHook",
    "Tool",
    "ToolContext",
    "ToolResult",
    "View",
    "connect",
    "history_message",
    "pending_questions",
    "repair_unanswered_tool_calls",
    "steering_loop",
    "tool",
    "tool_calls",
]
