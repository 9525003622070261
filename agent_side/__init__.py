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

from .agent import Agent, RunHandler
from .loop import Model, steering_loop
from .options import (
    AGENT_ERROR,
    ITERATION_LIMIT_REACHED,
    CancelHook,
    CancelRequest,
    Invocation,
    QueueOptions,
    RunOptions,
    SteerHook,
)
from .pipe import PipeResult
from .run import Run, RunPaused
from .session import AgentSession, connect
from .tools import (
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
from .view import RunView, View

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
