"""A worker process of the chaos suite's model, for the scenarios that SIGKILL it.

``python -m tests.chaos.worker URL [--durable]``: serves ``rig.handle`` Runs,
prints ``READY`` once connected and ``RUN <run id>`` as each Run starts.
"""

from __future__ import annotations

import argparse

import anyio

import agent_side
from agent_side import Run

from .rig import BACKOFF, handle


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--durable", action="store_true")
    args = parser.parse_args()
    agent = agent_side.Agent(args.url, durable=args.durable)
    agent.connection.backoff_max = BACKOFF

    @agent.on_run
    async def run(run: Run) -> None:
        print("RUN", run.run_id, flush=True)
        await handle(run)

    async with agent:
        print("READY", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main)
