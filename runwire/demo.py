"""``runwire demo``: a relay on SQLite, a demo agent and a terminal chat, in one process.

The demo agent's "model" needs no network and no key: it streams a scripted
travel plan word by word, and it reads the whole conversation on every call,
so a steering message ("make it 5 days", "under £800", "vegan") visibly changes
the next answer. In the chat: type to send; typing while the agent streams
steers it; ``/stop`` cancels; ``/new TEXT`` cancels and re-prompts; ``/also
TEXT`` sends alongside; ``/quit`` leaves.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable

import anyio

import agent_side
import client_side
import relay
from transport import AbortSignal, UIMessage, message_text, new_id

__all__ = ["demo_model", "plan_reply", "run_demo"]

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
        opening = f'Got it: "{users[-1]}". '
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
) -> AsyncIterator[str]:
    """Stream ``plan_reply`` word by word; stops as soon as ``signal`` fires."""
    words = plan_reply(messages).split(" ")
    for i, word in enumerate(words):
        if signal.aborted:
            return
        yield word if i == 0 else " " + word
        await anyio.sleep(delay)


async def _chat(url: str, session_id: str, out: Callable[[str], None]) -> None:
    async with client_side.connect(url, session_id) as session:
        printed: dict[str, int] = {}

        def on_message(event: object) -> None:
            vm = event.message  # type: ignore[attr-defined]
            if vm.message.role != "assistant":
                return
            text = message_text(vm.message)
            done = printed.get(vm.message.id)
            if done is None:
                out("\nagent> ")
                done = 0
            if len(text) > done:
                out(text[done:])
                printed[vm.message.id] = len(text)

        def on_run(event: object) -> None:
            info = event.run  # type: ignore[attr-defined]
            if info.status in ("complete", "cancelled", "error"):
                out(f"\n[run {info.run_id[:8]} {info.status}]\n")

        session.view.on("message", on_message)
        session.view.on("run", on_run)
        out(
            f"session {session_id}. Type to chat; type while it streams to steer; "
            "/stop, /new TEXT, /also TEXT, /quit\n"
        )
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if not line:
                return
            text = line.strip()
            if not text:
                continue
            active = [r for r in session.view.runs() if r.status in ("pending", "active")]
            if text == "/quit":
                return
            if text == "/stop":
                for r in active:
                    await session.cancel(r.run_id)
                continue
            if text.startswith("/new "):
                for r in active:
                    await session.cancel(r.run_id)
                await session.send(text[5:])
                continue
            if text.startswith("/also "):
                await session.send(text[6:])
                continue
            if active:
                run = session.run(active[-1].run_id)
                delivery = run.steer(text)

                async def report(d: object = delivery) -> None:
                    outcome = await d.outcome  # type: ignore[attr-defined]
                    if not outcome.consumed:
                        out("\n(not seen by the agent: it had already finished)\n")

                anyio.lowlevel.current_token()  # keep within the loop
                session_tasks.start_soon(report)
                continue
            await session.send(text)


session_tasks: anyio.abc.TaskGroup


async def run_demo(args: argparse.Namespace) -> None:
    """Relay + demo agent (+ terminal chat unless ``--no-chat``) until /quit or Ctrl-C."""
    global session_tasks

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    async with relay.serve(host="127.0.0.1", port=args.port, store=args.store) as server:
        out(f"runwire demo: relay on {server.url} (store {server.store.url})\n")
        agent = agent_side.Agent(server.url, name="default")

        @agent.on_run
        async def handle(run: agent_side.Run) -> None:
            await agent_side.steering_loop(run, demo_model)

        async with anyio.create_task_group() as tg:
            session_tasks = tg
            tg.start_soon(agent.serve)
            if args.no_chat:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        break
            else:
                await _chat(server.url, args.session or f"demo-{new_id()[:8]}", out)
            tg.cancel_scope.cancel()
