"""A Run deadline in one file: a relay, an agent whose model hangs, and a client.

Run it with ``python examples/deadline_agent.py``. The agent gives its Runs 0.5 s
(``timeout=``); the relay ends the Run ``cancelled`` with ``RUN_TIMEOUT`` at that
deadline, the agent's ``abort_signal`` fires with that error, and the client's Run
ends. It prints what each side saw.
"""

from __future__ import annotations

import anyio

import agent_side
import client_side
import relay


async def main() -> None:
    async with relay.serve(port=0, store="memory://", max_run_seconds=600) as server:
        worker = agent_side.Agent(server.url, timeout=0.5)

        @worker.on_run
        async def handle(run: agent_side.Run) -> None:
            await run.start()
            await run.abort_signal.wait()  # a model call that never returns
            print("agent:", run.abort_signal.reason)

        async with worker, client_side.connect(server.url, "deadline-demo") as session:
            run = await session.send("Write me a novel")
            result = await run.result()
            info = session.view.run(run.run_id)
            code = info.error["code"] if info and info.error else None
            print("client:", result.status, code)


if __name__ == "__main__":
    anyio.run(main)
