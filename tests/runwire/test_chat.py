"""The demo's terminal chat, driven through prompt_toolkit's own test input, on a real relay.

Keys go in through ``create_pipe_input()``; what the terminal would show is
recorded by an output that keeps what is written to it. The demo agent runs
in process; its model pauses mid-reply until steered, so a steer lands while
the reply streams whatever the machine's load.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.input.base import PipeInput
from prompt_toolkit.output import DummyOutput

import agent_side
import client_side
import relay
from runwire.chat import LATE, Chat
from runwire.demo import DEMO_TOOLS, demo_model
from runwire.terminal import prompt_chat
from transport import AbortSignal, UIMessage, new_id

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ENTER = "\r"
CTRL_C = "\x03"
CTRL_D = "\x04"


class Screen(DummyOutput):
    """A terminal output that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self.seen = 0
        """Where the last line ``_shown`` matched ends."""

    def write(self, data: str) -> None:
        self.text += data

    def write_raw(self, data: str) -> None:
        self.text += data


async def paused_model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Any]:
    """The demo model, at full speed, that waits at a long plan's Day 2 until a steer aborts it."""
    steered = messages[-1].metadata.get("queued") == "steer"
    async for chunk in demo_model(messages, signal, delay=0):
        yield chunk
        if chunk == " 2:" and not steered and "7-day" in str(messages[-1].parts):
            await signal.wait()
            return


async def until(check: Callable[[], bool]) -> None:
    while not check():
        await anyio.sleep(0.01)


@asynccontextmanager
async def relay_with(handler: Callable[[agent_side.Run], Awaitable[None]]) -> AsyncIterator[str]:
    async with relay.serve(port=0, store="memory://") as server:
        agent = agent_side.Agent(server.url, name="default")
        agent.on_run(handler)
        async with agent:
            yield server.url


async def demo_agent(run: agent_side.Run) -> None:
    await agent_side.steering_loop(run, paused_model, tools=DEMO_TOOLS)


@asynccontextmanager
async def terminal(url: str, session_id: str) -> AsyncIterator[tuple[PipeInput, Screen, Chat]]:
    """The chat on ``session_id`` in a pretend terminal; yields once it shows its prompt."""
    screen = Screen()
    with create_pipe_input() as keys:
        async with (
            client_side.connect(url, session_id) as session,
            anyio.create_task_group() as tasks,
        ):
            chat = Chat(session, print, tasks)
            ended = anyio.Event()

            async def run() -> None:
                await prompt_chat(chat, input=keys, output=screen)
                ended.set()

            tasks.start_soon(run)
            await until(lambda: "you>" in screen.text)  # the prompt is up
            yield keys, screen, chat
            with anyio.fail_after(10):
                await ended.wait()  # the test ended the chat with a key
            tasks.cancel_scope.cancel()


async def test_a_steer_changes_course_and_the_question_is_answered_here() -> None:
    with anyio.fail_after(60):
        async with (
            relay_with(demo_agent) as url,
            terminal(url, f"t-{new_id()[:8]}") as (
                keys,
                screen,
                chat,
            ),
        ):
            keys.send_text("Plan a 7-day trip to Lisbon." + ENTER)
            await until(lambda: "- Day 1: walk the old town" in screen.text)
            assert chat.prompt() == "steer> "  # the Run streams: Enter steers it
            keys.send_text("Make it 2 days, and keep it under £800" + ENTER)
            await until(lambda: "(the agent saw your steer)\n" in screen.text)
            await until(lambda: " complete]\n" in screen.text)
            text = screen.text
            assert "you> Plan a 7-day trip to Lisbon.\n" in text
            assert "agent> Here is a 7-day plan for Lisbon.\n" in text
            assert "you (steer)> Make it 2 days, and keep it under £800\n" in text
            steered = (
                'agent> Got it: "Make it 2 days, and keep it under £800". '
                "Changing course: here is a 2-day plan for Lisbon.\n"
            )
            assert steered in text
            assert "       All of it stays under £800.\n" in text
            assert "- Day 7:" not in text, "the steered reply was cut short"
            assert text.index("you (steer)>") < text.index(steered)

            # The deploy flow's question, asked as a choice and answered here.
            keys.send_text("Deploy the api" + ENTER)
            await until(lambda: "  1) eu  2) us  (type a number or a choice)\n" in screen.text)
            assert "agent asks> Where should api go?\n" in screen.text
            assert chat.prompt() == "answer> "
            keys.send_text("3" + ENTER)  # not a choice: said so, asked again
            await until(lambda: "'3' is not one of eu, us" in screen.text)
            keys.send_text("2" + ENTER)
            await until(lambda: "agent> Done: api is live in us.\n" in screen.text)
            assert "you (answer)> us\n" in screen.text
            await until(lambda: screen.text.count(" complete]\n") == 2)
            assert chat.prompt() == "you> "
            keys.send_text(CTRL_D)


async def test_messages_from_another_device_are_labelled() -> None:
    with anyio.fail_after(60):
        session_id = f"t-{new_id()[:8]}"
        async with relay_with(demo_agent) as url, terminal(url, session_id) as (keys, screen, _):
            async with client_side.connect(url, session_id) as browser:
                run = await browser.send("Plan 2 days in Rome")
                await run.result()
            await until(lambda: " complete]\n" in screen.text)
            assert "other device> Plan 2 days in Rome\n" in screen.text
            assert "agent> Here is a 2-day plan for Rome.\n" in screen.text
            assert "       - Day 2: visit the main museum, then a long dinner.\n" in screen.text
            keys.send_text("/quit" + ENTER)


async def test_a_steer_the_agent_never_saw_is_announced_and_can_be_resent() -> None:
    """An agent that ends its Run once the steer is in, without reading it: a late steer."""
    steer_stored = anyio.Event()
    replies = iter(["Here is your plan.", "Now a plan for what you resent."])

    async def deaf(run: agent_side.Run) -> None:
        await run.start()
        run.has_input()
        await run.pipe(_words(next(replies)))
        await steer_stored.wait()  # set already for the resent message's Run
        await run.end("complete")

    with anyio.fail_after(60):
        async with (
            relay_with(deaf) as url,
            terminal(url, f"t-{new_id()[:8]}") as (
                keys,
                screen,
                chat,
            ),
        ):
            chat.session.view.on(
                "message", lambda e: e.message.intent == "steer" and steer_stored.set()
            )
            keys.send_text("Plan a trip" + ENTER)
            await until(lambda: "agent> Here is your plan." in screen.text)
            await until(lambda: chat.prompt() == "steer> ")
            keys.send_text("too late" + ENTER)
            await until(lambda: LATE + "\n" in screen.text)
            assert LATE == (
                "(your steer arrived after the reply ended; /resend sends it as a new message)"
            )
            assert "(the agent saw your steer)" not in screen.text
            assert chat.missed == "too late"
            keys.send_text("/resend" + ENTER)
            await until(lambda: "agent> Now a plan for what you resent.\n" in screen.text)
            assert "you> too late\n" in screen.text
            keys.send_text(CTRL_C)


async def test_the_documented_session_is_what_the_chat_shows() -> None:
    """docs/howto/demo.md's session, typed here: each line it shows, in its order."""
    doc = (ROOT / "docs" / "howto" / "demo.md").read_text(encoding="utf-8")
    session = re.search(r"```text\n(you> Plan.*?)```", doc, re.S)
    assert session is not None
    expected = [line for line in session.group(1).splitlines() if line]
    with anyio.fail_after(60):
        async with (
            relay_with(demo_agent) as url,
            terminal(url, f"t-{new_id()[:8]}") as (
                keys,
                screen,
                _,
            ),
        ):
            for line in expected:
                typed = re.match(r"you(?: \(steer\)| \(answer\))?> (.*)", line)
                if typed:
                    keys.send_text(typed.group(1) + ENTER)
                # Each line as the chat writes it (a whole line, ended by "\n"), in order;
                # run ids differ from run to run.
                head, run, tail = line.partition("[run ")
                pattern = re.escape(head + run)
                pattern += "[0-9a-f]{8}" + re.escape(tail[8:]) if run else ""
                pattern += "\n"
                await until(lambda p=pattern: _shown(screen, p))
            keys.send_text(CTRL_D)


def _shown(screen: Screen, pattern: str) -> bool:
    """Whether ``pattern`` is on screen after what was matched before; moves past it."""
    found = re.compile(pattern).search(screen.text, screen.seen)
    if found is None:
        return False
    screen.seen = found.end()
    return True


async def _words(text: str) -> AsyncIterator[str]:
    for i, word in enumerate(text.split(" ")):
        yield word if i == 0 else " " + word
