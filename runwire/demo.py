"""``runwire demo``: a relay, a demo agent, a chat page and a terminal chat, in one process.

The demo agent's "model" needs no network and no key. It streams a scripted
travel plan word by word, about 8 words a second (``--pace``), so a person
can steer it by hand. It reads the whole conversation on every call, so a
steer ("make it 5 days", "under £800", "vegan") changes the next answer, and
that answer says it changed course. The terminal chat is ``runwire.chat``.
The relay also serves a chat page (``runwire/static/index.html``) at
``http://127.0.0.1:<port>/?session=<id>``: the same session, live in every tab.

"Deploy the api" makes the demo model call a ``deploy`` tool that asks where
to deploy (an interrupt). The Run pauses until the terminal or a tab answers.
"""

from __future__ import annotations

import argparse
import functools
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel

import agent_side
import client_side
import relay
from transport import (
    AbortSignal,
    RunwireError,
    ToolResultPart,
    UIMessage,
    message_text,
    new_id,
)

from .chat import Chat

__all__ = [
    "DEFAULT_PACE",
    "DEMO_TOOLS",
    "PAGE",
    "demo_model",
    "deploy",
    "page_url",
    "plan_reply",
    "run_demo",
    "terminal_chat",
]

PAGE = Path(__file__).resolve().parent / "static" / "index.html"
"""The demo's chat page, served by the relay at ``/``."""

_DEPLOY = re.compile(r"\bdeploy\s+(?:the\s+)?([\w-]+)", re.IGNORECASE)


class Service(BaseModel):
    service: str


class Region(BaseModel):
    region: Literal["eu", "us"]


@agent_side.tool
async def deploy(params: Service, ctx: agent_side.ToolContext) -> str:
    """Deploys a service where a person says."""
    answer = await ctx.interrupt(
        reason="pick_region",
        message=f"Where should {params.service} go?",
        response_schema=Region,
    )
    return f"{params.service} is live in {answer.region}"


DEMO_TOOLS = [deploy]
"""The demo agent's tools."""

DEFAULT_PACE = 8.0
"""Words a second the demo model streams by default: slow enough to steer by hand."""

_WORD = re.compile(r"\s*\S+")
_DAYS = re.compile(r"\b(\d{1,2})[\s-]*days?\b", re.IGNORECASE)
_BUDGET = re.compile(r"(?:under|below|max(?:imum)?|budget(?: of)?)\s*([£$€]\s?\d[\d,]*)", re.I)
_PLACE = re.compile(r"\b(?:to|in|for|visit)\s+([A-Z][a-zA-Z]+)")
_SIGHTS = [
    "walk the old town and have lunch by the river",
    "visit the main museum, then a long dinner",
    "take a day trip to the coast",
    "explore the markets and a viewpoint at sunset",
    "a slow morning, cafés, then the castle",
    "cycle along the waterfront",
    "a cooking class and the botanical garden",
]


def plan_reply(conversation: list[UIMessage]) -> str:
    """The demo model's answer: deterministic, and shaped by every user message.

    A reply to a steering message says so: it quotes the steer and says it
    changes course. A reply to a new prompt in a longer conversation names it
    a new request. A steer carries ``metadata.queued == "steer"``.
    """
    users = [m for m in conversation if m.role == "user"]
    text = " ".join(message_text(m) for m in users)
    days = 3
    for match in _DAYS.finditer(text):
        days = max(1, min(int(match.group(1)), 14))
    place = "your destination"
    for match in _PLACE.finditer(text):
        place = match.group(1)
    budget = None
    for match in _BUDGET.finditer(text):
        budget = match.group(1).replace(" ", "")
    vegan = "vegan" in text.lower()
    plan = f"a {days}-day plan for {place}."
    opening = f"Here is {plan}"
    last = conversation[-1] if conversation else None
    if last is not None and last.role == "user" and len(users) > 1:
        said = message_text(last).rstrip(".!? ")
        if last.metadata.get("queued") == "steer":
            opening = f'Got it: "{said}". Changing course: here is {plan}'
        else:
            opening = f'New request: "{said}". Here is {plan}'
    lines = [opening]
    for day in range(days):
        lines.append(f"- Day {day + 1}: {_SIGHTS[day % len(_SIGHTS)]}.")
    notes = []
    if budget:
        notes.append(f"All of it stays under {budget}.")
    if vegan:
        notes.append("Every meal above has vegan options.")
    if notes:
        lines += ["", " ".join(notes)]
    return "\n".join(lines)


async def demo_model(
    messages: list[UIMessage], signal: AbortSignal, *, delay: float = 1 / DEFAULT_PACE
) -> AsyncIterator[str | dict[str, Any]]:
    """Stream ``plan_reply`` word by word, ``delay`` seconds apart; stops when ``signal`` fires.

    A last user message "deploy X" calls the ``deploy`` tool instead; its result
    is then reported.
    """
    last = messages[-1] if messages else None
    results = [p for p in (last.parts if last else []) if isinstance(p, ToolResultPart)]
    if results:
        output = results[-1].output
        yield f"Done: {output.get('message') if isinstance(output, dict) else output}."
        return
    if last is not None and last.role == "user":
        match = _DEPLOY.search(message_text(last))
        if match:
            yield {
                "type": "tool-input-available",
                "toolCallId": f"deploy-{new_id()[:8]}",
                "toolName": "deploy",
                "input": {"service": match.group(1)},
            }
            return
    for word in _WORD.findall(plan_reply(messages)):
        if signal.aborted:
            return
        yield word
        await anyio.sleep(delay)


def page_url(port: int, session_id: str) -> str:
    """The chat page's address for a session on a local relay."""
    return f"http://127.0.0.1:{port}/?session={session_id}"


async def terminal_chat(url: str, session_id: str, *, plain: bool = False) -> None:
    """The chat on ``session_id`` in this terminal (``runwire.chat``), until /quit or ^C.

    ``plain`` reads and prints plain lines, for a pipe.
    """
    from .terminal import plain_chat, prompt_chat

    async with client_side.connect(url, session_id) as session, anyio.create_task_group() as tasks:
        chat = Chat(session, _print, tasks)
        _print(
            f"Session {session_id}. Type to chat; type while a reply streams to steer it. "
            "/help lists the commands."
        )
        if plain:
            await plain_chat(chat)
        else:
            await prompt_chat(chat)
        tasks.cancel_scope.cancel()


def _print(line: str) -> None:
    print(line, flush=True)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def run_demo(args: argparse.Namespace) -> None:
    """Relay + demo agent + chat page (+ terminal chat unless ``--no-chat``) until /quit or ^C."""
    session_id = args.session or f"demo-{new_id()[:8]}"
    async with AsyncExitStack() as stack:
        try:
            server = await stack.enter_async_context(
                relay.serve(
                    host="127.0.0.1", port=args.port, store=args.store, index_html=str(PAGE)
                )
            )
        except (OSError, ValueError, RunwireError) as exc:
            # A port in use, a store that cannot start: one line, no trace (as ``runwire relay``).
            sys.stderr.write(f"runwire demo: {exc}\n")
            raise SystemExit(2) from None
        _print(f"runwire demo: relay on {server.url} (store {server.store.url})")
        _print("The relay is anonymous and listens on loopback only: only this machine reaches it.")
        _print(f"Chat in a browser: {page_url(server.port, session_id)}")
        agent = agent_side.Agent(server.url, name="default")
        model = functools.partial(demo_model, delay=1 / args.pace)

        @agent.on_run
        async def handle(run: agent_side.Run) -> None:
            await agent_side.steering_loop(run, model, tools=DEMO_TOOLS)

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.serve)
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            if not args.no_chat:
                plain = not (sys.stdin.isatty() and sys.stdout.isatty())
                await terminal_chat(server.url, session_id, plain=plain)
                tg.cancel_scope.cancel()
