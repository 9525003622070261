"""A relay, a worker and a scripted model over loopback WebSockets, for the seed scenarios.

The model is scripted: each call records the conversation it was given and
plays the next reply of its script (text deltas and stream parts). ``HOLD``
makes a reply wait until the test releases it (ignoring the abort signal, as
a slow model would); ``UNTIL_ABORT`` waits for the call's signal.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

import agent_side
import relay
from agent_side import AbortSignal, Run
from client_side import ClientSession
from transport import UIMessage, message_text

ROOT = Path(__file__).resolve().parents[2]
Handler = Callable[[Run], Awaitable[None]]
Item = str | dict[str, Any] | anyio.Event


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNTIL_ABORT = _Marker("UNTIL_ABORT")
"""In a reply: wait for the call's abort signal (a steer or a cancel)."""


class ScriptedModel:
    """``model(messages, signal)`` playing ``replies`` in order, then ``default``.

    A reply is a sequence of stream items; an ``anyio.Event`` in it waits for
    the event (ignoring the signal), ``UNTIL_ABORT`` waits for the signal.
    """

    def __init__(self, *replies: Sequence[Item | _Marker], default: str = "ok") -> None:
        self.replies = [list(r) for r in replies]
        self.default = default
        self.calls: list[list[UIMessage]] = []
        self._changed = anyio.Event()

    async def __call__(self, messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[Any]:
        self.calls.append(messages)
        self._changed.set()
        self._changed = anyio.Event()
        n = len(self.calls)
        reply = self.replies[n - 1] if n <= len(self.replies) else [self.default]
        for item in reply:
            if isinstance(item, anyio.Event):
                await item.wait()
            elif item is UNTIL_ABORT:
                await signal.wait()
                return
            else:
                if signal.aborted:
                    return
                yield item
                await anyio.lowlevel.checkpoint()

    async def wait_calls(self, n: int, timeout: float = 10.0) -> None:
        with anyio.fail_after(timeout):
            while len(self.calls) < n:
                await self._changed.wait()

    def texts(self, call: int) -> list[str]:
        """The texts of the conversation model call ``call`` (0-based) was given."""
        return [message_text(m) for m in self.calls[call]]


@asynccontextmanager
async def stack(
    handler: Handler | None,
    *,
    grace: float = 30.0,
    store: str = "memory://",
    relay_checks: Sequence[Any] = (),
    **agent_options: Any,
) -> AsyncIterator[tuple[relay.Server, agent_side.Agent | None]]:
    """A relay on a loopback port and (with ``handler``) one worker of ``default``.

    ``relay_checks`` are the relay's input checks; ``agent_options`` go to the
    ``Agent`` (``input_checks=`` there are the agent's).
    """
    async with relay.serve(
        port=0, store=store, agent_grace=grace, input_checks=list(relay_checks)
    ) as server:
        if handler is None:
            yield server, None
            return
        worker = agent_side.Agent(server.url, **agent_options)
        worker.on_run(handler)
        async with worker:
            yield server, worker


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def texts(session: ClientSession) -> list[tuple[str, str]]:
    return [(vm.message.role, message_text(vm.message)) for vm in session.view.messages()]


def status(session: ClientSession, run_id: str) -> str | None:
    info = session.view.run(run_id)
    return info.status if info else None


async def stored_entries(server: relay.Server, session_id: str) -> list[dict[str, Any]]:
    """Every entry the relay's store holds for a session, as JSON objects."""
    from transport import _codec as codec

    out: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await server.store.read(session_id, after=after, limit=1000)
        if not page:
            return out
        out.extend(codec.loads(e.data) for e in page)
        after = page[-1].serial


async def start_worker_process(
    url: str, *args: str
) -> tuple[subprocess.Popen[str], Callable[[str], Awaitable[None]]]:
    """``tests/integration/crash_worker.py`` as a process, and a waiter for its stdout lines."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "integration" / "crash_worker.py"), url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    async def wait_line(pattern: str) -> None:
        assert proc.stdout is not None
        with anyio.fail_after(20):
            while True:
                line = await anyio.to_thread.run_sync(proc.stdout.readline, abandon_on_cancel=True)
                if not line:
                    raise AssertionError(f"worker exited before printing {pattern!r}")
                if re.search(pattern, line):
                    return

    return proc, wait_line
