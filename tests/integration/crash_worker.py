"""A worker process the crash tests kill with SIGKILL.

``crash_worker.py URL tools [--durable]``: the model asks for three tool calls
(``lookup``, ``charge``, ``notify``); ``lookup`` answers at once, ``charge``
prints ``CHARGING`` and never returns, so the test kills the process while it
runs. ``crash_worker.py URL stream [--durable]``: the model streams words
forever, printing ``STREAMING`` after the first few, so the test kills the
process mid-response. ``crash_worker.py URL interrupt [--durable]``: the model
asks for ``deploy`` (which asks where, printing ``ASKING``) and ``notify``;
once both answered it says what came back.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
from pydantic import BaseModel

import agent_side
from agent_side import AbortSignal, Run
from transport import UIMessage


class Query(BaseModel):
    q: str


@agent_side.tool
def lookup(params: Query) -> str:
    """Look something up."""
    return f"found {params.q}"


@agent_side.tool
async def charge(params: Query) -> str:
    """Charge a card (never returns here)."""
    print("CHARGING", flush=True)
    await anyio.sleep_forever()
    return "charged"


@agent_side.tool
def notify(params: Query) -> str:
    """Send a notification."""
    return "sent"


class Region(BaseModel):
    region: Literal["eu", "us"]


@agent_side.tool
async def deploy(params: Query, ctx: agent_side.ToolContext) -> str:
    """Deploy a service somewhere a person picks."""
    print("ASKING", flush=True)
    answer = await ctx.interrupt(
        reason="pick_region",
        message=f"Where should {params.q} go?",
        response_schema=Region,
    )
    return f"{params.q} deployed to {answer.region}"


async def interrupt_model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Any]:
    results = [p for m in messages for p in m.parts if p.type == "tool-result"]
    if results:
        yield "Done: " + "; ".join(str(getattr(p, "output", "")) for p in results)
        return
    yield call("c1", "deploy")
    yield call("c2", "notify")


def call(cid: str, name: str) -> dict[str, Any]:
    return {
        "type": "tool-input-available",
        "toolCallId": cid,
        "toolName": name,
        "input": {"q": cid},
    }


async def tools_model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Any]:
    yield "Booking it. "
    yield call("c1", "lookup")
    yield call("c2", "charge")
    yield call("c3", "notify")


async def stream_model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    i = 0
    while not signal.aborted:
        yield f"old-{i} "
        i += 1
        if i == 5:
            print("STREAMING", flush=True)
        await anyio.sleep(0.01)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("mode", choices=["tools", "stream", "interrupt"])
    parser.add_argument("--durable", action="store_true")
    args = parser.parse_args()
    agent = agent_side.Agent(args.url, durable=args.durable)

    @agent.on_run
    async def handle(run: Run) -> None:
        print("RUN", run.run_id, flush=True)
        if args.mode == "tools":
            await agent_side.steering_loop(run, tools_model, tools=[lookup, charge, notify])
        elif args.mode == "interrupt":
            await agent_side.steering_loop(run, interrupt_model, tools=[deploy, notify])
        else:
            await agent_side.steering_loop(run, stream_model)

    await agent.serve()


if __name__ == "__main__":
    anyio.run(main)
