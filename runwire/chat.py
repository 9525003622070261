"""The demo's terminal chat: what it shows, and what a typed line does.

``Chat`` follows one session. It turns the session's events into labelled
lines: the user's own lines, steers, other devices' messages, the agent's
reply, each steer's outcome, each Run's end and the agent's questions. A
reply streams into live lines until each line is whole; whole lines go to
``show``. ``runwire.terminal`` draws all this, with prompt_toolkit in a
terminal and as plain lines through a pipe.

A typed line starts a Run, or steers the Run that is streaming. While the
agent waits on a question, a typed line answers it. Commands start with a
slash; ``/help`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

import client_side
from transport import (
    DeliveryEvent,
    Interrupt,
    MessageEvent,
    RunEvent,
    RunwireError,
    ToolCallPart,
    answer_format,
    message_text,
    parse_answer,
    user_message,
)
from transport._answers import answer_choices
from transport._runs import run_ended
from transport.errors import RUN_NOT_ACTIVE

__all__ = ["COMMANDS", "Chat", "Question"]

YOU = "you> "
YOU_STEER = "you (steer)> "
YOU_ANSWER = "you (answer)> "
OTHER = "other device> "
OTHER_STEER = "other device (steer)> "
AGENT = "agent> "
ASKS = "agent asks> "

COMMANDS = {
    "/stop": "stop the reply that is streaming",
    "/new TEXT": "stop the reply, then send TEXT as a new message",
    "/also TEXT": "send TEXT as a new message while the reply streams",
    "/resend": "send your last steer the agent did not see as a new message",
    "/decline": "end the agent's question without an answer",
    "/help": "show these commands",
    "/quit": "leave (Ctrl-D and Ctrl-C do the same)",
}
"""The chat's commands and what each does."""

LATE = "(your steer arrived after the reply ended; /resend sends it as a new message)"


@dataclass
class _Reply:
    run_id: str
    text: str = ""
    tools: list[str] = field(default_factory=list)
    shown: int = 0
    """How many of its lines are on screen."""
    done: bool = False


@dataclass(frozen=True)
class Question:
    """A question the agent asks: its Run, the interrupt, and the choices if it has some."""

    run_id: str
    interrupt: Interrupt
    choices: list[Any] | None


class Chat:
    """One session's chat as labelled lines (see the module docstring)."""

    def __init__(
        self,
        session: client_side.ClientSession,
        show: Callable[[str], None],
        tasks: anyio.abc.TaskGroup,
    ) -> None:
        self.session = session
        self.show = show
        """Puts one whole line on screen, above the input line."""
        self.refresh: Callable[[], None] = lambda: None
        """Called when ``live()`` or ``prompt()`` changed; a frontend sets it."""
        self.questions: list[Question] = []
        """Questions waiting for an answer here, oldest first."""
        self.missed: str | None = None
        """The last steer of ours the agent did not see (``/resend`` sends it)."""
        self._tasks = tasks
        self._own: set[str] = set()
        self._users: set[str] = set()
        self._replies: dict[str, _Reply] = {}
        self._ended: set[str] = set()
        self._asked: set[str] = set()

    def attach(self) -> None:
        """Show what the session already holds, then follow its events."""
        view = self.session.view
        for vm in view.messages():
            self._on_message(MessageEvent(vm, "added"))
        for info in view.runs():
            self._on_run(RunEvent(info))
        view.on("message", self._on_message)
        view.on("run", self._on_run)
        view.on("delivery", self._on_delivery)

    # ------------------------------------------------------------------ drawing

    def active(self) -> list[str]:
        """Ids of the Runs a typed line would steer, oldest first."""
        return [r.run_id for r in self.session.view.runs() if r.status in ("pending", "active")]

    async def settled(self) -> None:
        """Return once no Run streams: none is pending or active."""
        while self.active():
            changed = anyio.Event()

            def wake(_: object, changed: anyio.Event = changed) -> None:
                changed.set()

            stop = self.session.view.on("run", wake)
            try:
                await changed.wait()
            finally:
                stop()

    def prompt(self) -> str:
        """The input line's label: what Enter will do."""
        if self.questions:
            return "answer> "
        return "steer> " if self.active() else YOU

    def live(self) -> list[str]:
        """The lines of the replies still streaming, each as far as it got."""
        lines = []
        for reply in self._replies.values():
            if reply.done:
                continue
            partial = reply.text.split("\n")[reply.shown :]
            if partial and partial[-1]:
                lines.append(self._label(reply, len(reply.text.split("\n")) - 1) + partial[-1])
        return lines

    def _label(self, reply: _Reply, line: int) -> str:
        label = AGENT
        if len(self.active()) > 1:
            label = f"agent [{reply.run_id[:8]}]> "
        return label if line == 0 else " " * len(label)

    def _flush(self, reply: _Reply) -> None:
        lines = reply.text.split("\n")
        whole = lines if reply.done else lines[:-1]
        if reply.done and whole and not whole[-1]:
            whole = whole[:-1]
        for i in range(reply.shown, len(whole)):
            self.show((self._label(reply, i) + whole[i]).rstrip())
        reply.shown = max(reply.shown, len(whole))
        if reply.done and reply.tools:
            self.show(f"{AGENT}(uses {', '.join(reply.tools)})")
            reply.tools = []

    def _finish_run(self, run_id: str, *, cut: bool = False) -> None:
        """End the Run's replies on screen; ``cut`` marks a line left half done with "…"."""
        for reply in self._replies.values():
            if reply.run_id == run_id and not reply.done:
                reply.done = True
                if cut and reply.text and not reply.text.endswith((".", "\n")):
                    reply.text += " …"
                self._flush(reply)

    # ------------------------------------------------------------------- events

    def _on_message(self, event: MessageEvent) -> None:
        vm = event.message
        message = vm.message
        if event.op == "removed":
            return
        if message.role == "user":
            if message.id in self._own or message.id in self._users:
                return
            self._users.add(message.id)
            label = OTHER_STEER if vm.intent == "steer" else OTHER
            self.show(label + message_text(message))
        elif message.role == "assistant":
            reply = self._replies.get(message.id)
            if reply is None:
                # A new reply of the same Run follows the earlier ones: steering cut them
                # off, or their tool calls were answered.
                self._finish_run(vm.run_id, cut=True)
                reply = self._replies[message.id] = _Reply(vm.run_id)
            if reply.done:
                return
            reply.text = message_text(message)
            reply.tools = [p.tool_name for p in message.parts if isinstance(p, ToolCallPart)]
            self._flush(reply)
        self.refresh()

    def _on_run(self, event: RunEvent) -> None:
        info = event.run
        if event.op == "removed":
            return
        if info.status == "suspended":
            self._finish_run(info.run_id)
            self._ask(info.run_id)
        else:
            settled = [q for q in self.questions if q.run_id == info.run_id]
            if settled:
                self.questions = [q for q in self.questions if q.run_id != info.run_id]
                self.show("(the question was settled on another device)")
        if run_ended(info.status) and info.run_id not in self._ended:
            self._ended.add(info.run_id)
            self._finish_run(info.run_id)
            end = f"[run {info.run_id[:8]} {info.status}"
            if info.error:
                end += f": {info.error.get('message') or info.error.get('code')}"
            self.show(end + "]")
        self.refresh()

    def _on_delivery(self, event: DeliveryEvent) -> None:
        outcome = event.outcome
        if outcome.message_id in self._own:
            return  # our own steer: its Delivery reports it
        if outcome.consumed:
            self.show("(the agent saw the other device's steer)")
        elif outcome.refused is not None:
            self.show(f"(the other device's steer was refused: {outcome.refused.get('message')})")
        else:
            why = _why(outcome.run_terminal_reason)
            self.show(f"(the other device's steer was not seen: {why})")

    def _ask(self, run_id: str) -> None:
        for interrupt in self.session.view.tree.interrupts(run_id):
            if interrupt.id in self._asked:
                continue
            self._asked.add(interrupt.id)
            choices = answer_choices(interrupt.response_schema)
            self.questions.append(Question(run_id, interrupt, choices))
            self.show(ASKS + (interrupt.message or interrupt.reason or "a question"))
            if choices:
                picks = "  ".join(f"{i}) {c}" for i, c in enumerate(choices, 1))
                self.show(f"  {picks}  (type a number or a choice)")
            else:
                self.show(f"  (answer with {answer_format(interrupt.response_schema)})")

    # ------------------------------------------------------------------- typing

    async def handle(self, line: str) -> bool:
        """Act on one typed line; False when the chat should end."""
        text = line.strip()
        if not text:
            return True
        command, _, rest = text.partition(" ")
        rest = rest.strip()
        if command in ("/quit", "/exit"):
            return False
        if command == "/help":
            for name, what in COMMANDS.items():
                self.show(f"  {name:<12} {what}")
        elif self.questions and not text.startswith("/"):
            await self._answer(self.questions[0], text)
        elif command == "/decline" and self.questions:
            question = self.questions.pop(0)
            await self._call(self.session.cancel_pause(question.run_id))
        elif command == "/stop":
            await self._stop()
        elif command == "/new" and rest:
            await self._stop()
            await self._send(rest)
        elif command == "/also" and rest:
            await self._send(rest)
        elif command == "/resend":
            if self.missed is None:
                self.show("(no missed steer to resend)")
            else:
                text, self.missed = self.missed, None
                await self._send(text)
        elif text.startswith("/"):
            self.show(f"(unknown command {command}: /help lists them)")
        elif self.active():
            self._steer(self.active()[-1], text)
        else:
            await self._send(text)
        self.refresh()
        return True

    async def _call(self, request: Any) -> None:
        try:
            await request
        except RunwireError as exc:
            self.show(f"(not done: {exc.message})")

    async def _stop(self) -> None:
        runs = self.active()
        if not runs:
            self.show("(nothing is streaming)")
        for run_id in runs:
            await self._call(self.session.cancel(run_id))

    async def _send(self, text: str) -> None:
        message = user_message(text)
        self._own.add(message.id)
        self.show(YOU + text)
        await self._call(self.session.send(message))

    def _steer(self, run_id: str, text: str) -> None:
        message = user_message(text)
        self._own.add(message.id)
        self.show(YOU_STEER + text)
        delivery = self.session.run(run_id).steer(message)
        self._tasks.start_soon(self._report, delivery, text)

    async def _report(self, delivery: client_side.Delivery, text: str) -> None:
        """Say whether the agent saw a steer of ours, and why not."""
        try:
            outcome = await delivery.outcome
        except RunwireError as exc:
            if exc.code == RUN_NOT_ACTIVE:
                self._late(text)
            else:
                self.show(f"(your steer was not sent: {exc.message})")
            return
        if outcome.consumed:
            self.show("(the agent saw your steer)")
        elif outcome.refused is not None:
            self.show(f"(your steer was refused: {outcome.refused.message})")
        elif outcome.run_terminal_reason == "complete":
            self._late(text)
        else:
            self.show(f"(your steer was not seen: {_why(outcome.run_terminal_reason)})")
        self.refresh()

    def _late(self, text: str) -> None:
        self.missed = text
        self.show(LATE)

    async def _answer(self, question: Question, text: str) -> None:
        """Read ``text`` by the question's schema and send it with ``session.resume``."""
        schema = question.interrupt.response_schema
        choices = question.choices or []
        if text.isdigit() and 1 <= int(text) <= len(choices):
            text = str(choices[int(text) - 1])
        parsed = parse_answer(text, schema)
        if not parsed.ok:
            self.show(f"({parsed.problem}; answer with {answer_format(schema)})")
            return
        self.questions.remove(question)
        self.show(YOU_ANSWER + text)
        try:
            await self.session.resume(question.run_id, {question.interrupt.id: parsed.value})
        except RunwireError as exc:
            self.show(f"(answer not taken: {exc.message})")


def _why(reason: str | None) -> str:
    if reason == "complete":
        return "the reply had already ended"
    if reason == "cancelled":
        return "the reply was stopped first"
    if reason == "error":
        return "the reply failed first"
    return "the agent paused to ask a question first"
