"""The demo chat's two frontends: prompt_toolkit in a terminal, plain lines through a pipe.

In a terminal, ``prompt_chat`` keeps the input line apart from the streamed
text. ``patch_stdout`` prints each whole line above the prompt, and the prompt
shows the replies' live lines above the input line. Ctrl-C and Ctrl-D leave.
When standard input or output is not a terminal, ``plain_chat`` reads lines
and prints whole lines only.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
from typing import TextIO

try:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.application import create_app_session, run_in_terminal
    from prompt_toolkit.application.current import get_app_session
    from prompt_toolkit.completion import Completer, DynamicCompleter, WordCompleter
    from prompt_toolkit.formatted_text import FormattedText
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output
    from prompt_toolkit.patch_stdout import patch_stdout
except ImportError as exc:
    raise ImportError(
        "the demo's terminal chat needs prompt_toolkit: pip install 'runwire[demo]'"
    ) from exc

from .chat import COMMANDS, Chat

__all__ = ["plain_chat", "prompt_chat"]

_COMMANDS = WordCompleter([name.split()[0] for name in COMMANDS], WORD=True)


def _message(chat: Chat) -> FormattedText:
    """The prompt: the live lines of the replies, then the input line's label."""
    parts: list[tuple[str, str]] = [("class:live", line + "\n") for line in chat.live()]
    parts.append(("bold", chat.prompt()))
    return FormattedText(parts)


def _completer(chat: Chat) -> Completer:
    """The choices of the question asked, else the commands."""
    if chat.questions and chat.questions[0].choices:
        return WordCompleter([str(c) for c in chat.questions[0].choices])
    return _COMMANDS


class _Lines:
    """Writes whole lines above the prompt, in order, from the event loop's thread.

    ``patch_stdout`` writes from a thread of its own: between two prompts that
    thread and the prompt's drawing can interleave. Lines shown here are
    written in a loop callback instead, through ``run_in_terminal`` while a
    prompt is up. Terminal escape sequences in the text are neutralised.
    """

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._session = get_app_session()
        # The chat's events come from the session's tasks, which run in another context:
        # the lines are written in this one, where the prompt's application is current.
        self._context = contextvars.copy_context()

    def show(self, line: str) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush, context=self._context)
        self._pending.append(line)

    def refresh(self) -> None:
        app = self._session.app
        if app is not None and app.is_running:
            app.invalidate()

    def _flush(self) -> None:
        text = "".join(line + "\n" for line in self._pending)
        self._pending.clear()
        app = self._session.app
        if app is not None and app.is_running:
            run_in_terminal(lambda: self._write(text), in_executor=False)
        else:
            self._write(text)

    def _write(self, text: str) -> None:
        self._session.output.write(text)
        self._session.output.flush()


async def prompt_chat(
    chat: Chat, *, input: Input | None = None, output: Output | None = None
) -> None:
    """Run ``chat`` with prompt_toolkit until /quit, Ctrl-D or Ctrl-C.

    ``input`` and ``output`` default to the terminal; tests pass a pipe input
    and a dummy output.
    """
    with create_app_session(input=input, output=output), patch_stdout():
        session: PromptSession[str] = PromptSession(
            erase_when_done=True, completer=DynamicCompleter(lambda: _completer(chat))
        )
        lines = _Lines()
        chat.show = lines.show
        chat.refresh = lines.refresh
        chat.attach()
        while True:
            try:
                line = await session.prompt_async(lambda: _message(chat))
            except (EOFError, KeyboardInterrupt):
                return
            if not await chat.handle(line):
                return


async def plain_chat(chat: Chat, stdin: TextIO | None = None) -> None:
    """Run ``chat`` on lines read from ``stdin`` until /quit, or its end and the reply's."""
    lines = _lines_of(stdin or sys.stdin)
    chat.attach()
    while True:
        line = await lines.get()
        if not line:
            await chat.settled()  # the input ended: let the reply it asked for finish
            return
        if not await chat.handle(line):
            return


def _lines_of(source: TextIO) -> asyncio.Queue[str]:
    """The lines of ``source``, then "", read by a daemon thread.

    A worker thread blocked on a read would hold the process open when the
    chat ends on ^C; a daemon thread does not.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str] = asyncio.Queue()

    def read() -> None:
        while True:
            line = source.readline()
            try:
                loop.call_soon_threadsafe(queue.put_nowait, line)
            except RuntimeError:  # the loop closed: nobody reads any more
                return
            if not line:
                return

    threading.Thread(target=read, name="runwire-chat-stdin", daemon=True).start()
    return queue
