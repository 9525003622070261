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
            await run.pipe(model(run.view.messages(), run.abort_signal))
        await run.end()
"""

from transport.asyncio.abort import AbortController, AbortSignal

from .agent import Agent, RunHandler
from .loop import Model, steering_loop
from .pipe import Coalescer, MessageBuilder, Normalizer, PipeResult
from .run import (
    AGENT_ERROR,
    CancelHook,
    CancelRequest,
    Invocation,
    QueueOptions,
    Run,
    SteerHook,
)
from .session import AgentSession, View, connect

__all__ = [
    "AGENT_ERROR",
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentSession",
    "CancelHook",
    "CancelRequest",
    "Coalescer",
    "Invocation",
    "MessageBuilder",
    "Model",
    "Normalizer",
    "PipeResult",
    "QueueOptions",
    "Run",
    "RunHandler",
    "SteerHook",
    "View",
    "connect",
    "steering_loop",
]
