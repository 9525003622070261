"""Deploy and pick a region, end to end: a tool asks a question, a person answers it.

Run it: ``python examples/deploy_region.py``. It starts a relay in the
process, a worker whose ``deploy`` tool asks where to deploy, and a client
that sends "Deploy the api", reads the question when the Run pauses, types
an answer (read by ``parse_answer``) and prints the reply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
from pydantic import BaseModel

import agent_side
import client_side
import relay
from transport import ToolResultPart, UIMessage, answer_format, parse_answer


class Service(BaseModel):
    service: str


class Region(BaseModel):
    region: Literal["eu", "us"]


@agent_side.tool
async def deploy(params: Service, ctx: agent_side.ToolContext) -> str:
    """Deploys a service."""
    answer = await ctx.interrupt(
        reason="pick_region",
        message=f"Where should {params.service} go?",
        response_schema=Region,
        expires_at=datetime.now(UTC) + timedelta(hours=1),
    )
    return f"{params.service} is live in {answer.region}"


async def model(messages: list[UIMessage], signal: agent_side.AbortSignal) -> AsyncIterator[Any]:
    """A scripted model: it calls ``deploy``, then reports what the tool said."""
    results = [p for m in messages for p in m.parts if isinstance(p, ToolResultPart)]
    if results:
        yield f"Done: {results[-1].output}."
        return
    yield {
        "type": "tool-input-available",
        "toolCallId": "call_1",
        "toolName": "deploy",
        "input": {"service": "api"},
    }


def worker(url: str) -> agent_side.Agent:
    agent = agent_side.Agent(url, durable=True)

    @agent.on_run
    async def handle(run: agent_side.Run) -> None:
        # Pauses when deploy asks; runs again (adopted) once someone answers.
        await agent_side.steering_loop(run, model, tools=[deploy])

    return agent


async def main(typed: str = "EU") -> str:
    async with relay.serve(port=0, store="memory://") as server:
        url = server.url
        async with worker(url), client_side.connect(url, "deploys") as session:
            run = await session.send("Deploy the api")
            paused = await run.result()  # status "suspended", the question in interrupts
            question = paused.interrupts[0]  # id "call_1#0", kind "input"
            print(f"{question.message} ({answer_format(question.response_schema)})")
            parsed = parse_answer(typed, question.response_schema)  # {"region": "eu"}
            assert parsed.ok, parsed.problem
            events = session.view.events()  # every event from now on: none is missed
            await session.resume(run.run_id, {question.id: parsed.value})
            while run.status != "complete":
                await anext(events)
            await events.aclose()
            reply = session.view.messages()[-1].message.text()
            print(reply)
            return reply


if __name__ == "__main__":
    anyio.run(main)
