"""A steerable Anthropic agent: Messages streamed into runwire Runs, with one tool.

    export ANTHROPIC_API_KEY=sk-ant-...  # ANTHROPIC_BASE_URL points it elsewhere (tests do)
    runwire relay --store memory://
    python examples/anthropic_agent.py --url ws://127.0.0.1:8787

Steering mid-answer closes the model's HTTP stream at once and asks again with
the steering message last; a cancel closes it and ends the Run ``cancelled``.
"""

from __future__ import annotations

import argparse
import os

import anyio
from anthropic import AsyncAnthropic
from pydantic import BaseModel

from agent_side import Agent, Run, steering_loop, tool
from agent_side.models.anthropic import anthropic_model


class City(BaseModel):
    city: str


@tool
async def get_weather(params: City) -> dict[str, object]:
    """The current weather in a city."""
    return {"city": params.city, "temp_c": 21, "sky": "clear"}


def build_agent(url: str, model: str = "claude-sonnet-4-5") -> Agent:
    """A worker whose Runs stream ``model``'s answers; the client reads ANTHROPIC_* variables."""
    llm = anthropic_model(
        AsyncAnthropic(), model, system="You are a concise travel assistant.", tools=[get_weather]
    )
    agent = Agent(url)

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, llm, tools=[get_weather])

    return agent


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8787", help="the relay's ws:// URL")
    parser.add_argument("--model", default=os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5"))
    args = parser.parse_args()
    await build_agent(args.url, args.model).serve()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
