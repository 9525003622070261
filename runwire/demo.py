"""``runwire demo``: a relay, a demo agent, a chat page and a terminal chat, in one process.

The demo agent's "model" needs no network and no key: it streams a scripted
travel plan word by word, and it reads the whole conversation on every call,
so a steering message ("make it 5 days", "under £800", "vegan") visibly changes
the next answer. In the chat: type to send; typing while the agent streams
steers it; ``/stop`` cancels; ``/new TEXT`` cancels and re-prompts; ``/also
TEXT`` sends alongside; ``/quit`` leaves. The relay also serves a chat page
(``runwire/static/index.html``) at ``http://127.0.0.1:<port>/?session=<id>``:
the same session, in a browser, live in every tab.

"Deploy the api" makes the demo model call a ``deploy`` tool that asks where
to deploy (an interrupt): the Run pauses, the page shows the question with a
form, and any tab's answer lets the Run finish.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
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
    MessageEvent,
    RunEvent,
    RunwireError,
    ToolResultPart,
    UIMessage,
    message_text,
    new_id,
)

__all__ = ["DEMO_TOOLS", "PAGE", "demo_model", "deploy", "page_url", "plan_reply", "run_demo"]

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
    """The demo model's answer: deterministic, and shaped by every user message."""
    users = [message_text(m) for m in conversation if m.role == "user"]
    text = " ".join(users)
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
    opening = ""
    if len(users) > 1 and conversation and conversation[-1].role == "user":
        opening = f'Got it: "{users[-1].rstrip(".!? ")}". '
    lines = [f"{opening}Here is a {days}-day plan for {place}."]
    for day in range(days):
        lines.append(f"Day {day + 1}: {_SIGHTS[day % len(_SIGHTS)]}.")
    if budget:
        lines.append(f"All of it stays under {budget}.")
    if vegan:
        lines.append("Every meal above has vegan options.")
    return " ".join(lines)


async def demo_model(
    messages: list[UIMessage], signal: AbortSignal, *, delay: float = 0.06
) -> AsyncIterator[str | dict[str, Any]]:
    """Stream ``plan_reply`` word by word; stops as soon as ``signal`` fires.

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
    words = plan_reply(messages).split(" ")
    for i, word in enumerate(words):
        if signal.aborted:
            return
        yield word if i == 0 else " " + word
        await anyio.sleep(delay)


async def _chat(url: str, session_id: str, out: Callable[[str], None]) -> None:
    """A line-based terminal chat on ``session_id`` (see the module docstring)."""
    async with client_side.connect(url, session_id) as session, anyio.create_task_group() as tg:
        # The terminal follows one Run's reply at a time (its newest: after steering the
        # Run answers again); a reply of another Run streaming alongside is held back and
        # shown, caught up, when the followed Run ends.
        printed: dict[str, int] = {}
        texts: dict[str, tuple[str, str]] = {}  # message id -> (run id, text so far)
        follow: list[str] = []

        def show(message_id: str) -> None:
            run_id, text = texts[message_id]
            done = printed.get(message_id)
            if done is None:
                out(f"\nagent [{run_id[:8]}]> ")
                done = 0
            out(text[done:])
            printed[message_id] = len(text)

        def on_message(event: MessageEvent) -> None:
            message = event.message.message
            if message.role != "assistant" or event.op == "removed":
                return  # a terminal cannot take printed text back
            run_id = event.message.run_id or ""
            new = message.id not in texts
            texts[message.id] = (run_id, message_text(message))
            if not follow:
                follow.append(message.id)
            elif new and texts[follow[0]][0] == run_id:
                follow[0] = message.id  # the followed Run's next reply (after steering)
            if follow[0] == message.id:
                show(message.id)

        def on_run(event: RunEvent) -> None:
            info = event.run
            if info.status not in ("complete", "cancelled", "error") or event.op == "removed":
                return
            out(f"\n[run {info.run_id[:8]} {info.status}]\n")
            if follow and texts[follow[0]][0] == info.run_id:
                follow.clear()
                waiting = [m for m, (_, t) in texts.items() if len(t) > printed.get(m, 0)]
                if waiting:
                    follow.append(waiting[0])
                    show(waiting[0])

        async def report(delivery: client_side.Delivery) -> None:
            try:
                outcome = await delivery.outcome
            except RunwireError as exc:
                out(f"\n(steering not sent: {exc.code})\n")
                return
            if not outcome.consumed:
                out("\n(not seen by the agent: it had already finished)\n")

        session.view.on("message", on_message)
        session.view.on("run", on_run)
        out(
            f"session {session_id}. Type to chat; type while it streams to steer; "
            "/stop, /new TEXT, /also TEXT, /quit\n"
        )
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if not line:
                break
            text = line.strip()
            if not text:
                continue
            active = [r for r in session.view.runs() if r.status in ("pending", "active")]
            if text == "/quit":
                break
            if text == "/stop":
                for r in active:
                    await session.cancel(r.run_id)
            elif text.startswith("/new "):
                for r in active:
                    await session.cancel(r.run_id)
                await session.send(text[5:])
            elif text.startswith("/also "):
                await session.send(text[6:])
            elif active:
                tg.start_soon(report, session.run(active[-1].run_id).steer(text))
            else:
                await session.send(text)
        tg.cancel_scope.cancel()


def page_url(port: int, session_id: str) -> str:
    """The chat page's address for a session on a local relay."""
    return f"http://127.0.0.1:{port}/?session={session_id}"


async def run_demo(args: argparse.Namespace) -> None:
    """Relay + demo agent + chat page (+ terminal chat unless ``--no-chat``) until /quit or ^C."""

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

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
        out(f"runwire demo: relay on {server.url} (store {server.store.url})\n")
        out(f"chat in a browser: {page_url(server.port, session_id)}\n")
        agent = agent_side.Agent(server.url, name="default")

        @agent.on_run
        async def handle(run: agent_side.Run) -> None:
            await agent_side.steering_loop(run, demo_model, tools=DEMO_TOOLS)

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.serve)
            if args.no_chat:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        break
            else:
                await _chat(server.url, session_id, out)
            tg.cancel_scope.cancel()
