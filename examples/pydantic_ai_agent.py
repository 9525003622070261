"""A steerable pydantic-ai agent: its streamed runs go straight into runwire Runs.

    export OPENAI_API_KEY=sk-...      # OPENAI_BASE_URL points it elsewhere (tests do)
    runwire relay --store memory://
    python examples/pydantic_ai_agent.py --url ws://127.0.0.1:8787

The pydantic-ai agent runs its own tools. Steering mid-answer ends its run
(closing the model's HTTP stream) and starts another with the steering
message last; a cancel ends it and the Run ``cancelled``.
"""

from __future__ import annotations

import argparse
import os

import anyio
from pydantic_ai import Agent as PydanticAgent

from agent_side import Agent, Run, steering_loop
from agent_side.models.pydantic_ai import pydantic_ai_model


def travel_agent(model: str) -> PydanticAgent[None, str]:
    """The pydantic-ai agent: one tool; the model name as pydantic-ai spells it."""
    assistant = PydanticAgent(model, instructions="You are a concise travel assistant.")

    @assistant.tool_plain
    def get_weather(city: str) -> dict[str, object]:
        """The current weather in a city."""
        return {"city": city, "temp_c": 21, "sky": "clear"}

    return assistant


def build_agent(url: str, model: str = "openai:gpt-4.1-mini") -> Agent:
    """A worker whose Runs stream the pydantic-ai agent's answers."""
    llm = pydantic_ai_model(travel_agent(model))
    agent = Agent(url)

    @agent.on_run
    async def handle(run: Run) -> None:
        await steering_loop(run, llm)

    return agent


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8787", help="the relay's ws:// URL")
    parser.add_argument(
        "--model", default=os.environ.get("PYDANTIC_AI_MODEL", "openai:gpt-4.1-mini")
    )
    args = parser.parse_args()
    await build_agent(args.url, args.model).serve()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
