"""Send a message, steer the reply while it streams, then print how it ended.

Start a relay and ``examples/hello_agent.py`` first, then run ``python examples/hello_client.py``.
"""

import asyncio
import os
import uuid

import client_side

URL = os.environ.get("RUNWIRE_URL", "ws://127.0.0.1:8787")


async def main() -> None:
    conversation = f"hello-{uuid.uuid4().hex[:8]}"  # a new conversation each time
    async with client_side.connect(URL, conversation) as session:
        run = await session.send("Plan a 3-day trip to Lisbon.")
        async for event in session.view.events():  # wait until the reply starts
            message = getattr(event, "message", None)
            if message is not None and message.message.role == "assistant":
                break
        delivery = run.steer("Make it 5 days.")  # change course mid-reply
        outcome = await delivery.outcome
        result = await run.result()
        print("the agent saw the steer:", outcome.consumed)
        print("the run ended:", result.status)
        print("last reply:", session.view.messages()[-1].message.text().strip())


if __name__ == "__main__":
    asyncio.run(main())
