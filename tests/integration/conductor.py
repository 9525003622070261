"""A scripted worker for end-to-end tests: each Run says it started, then waits to be
released (it then says it is done) or cancelled; the test decides when, with events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

import agent_side
import client_side
import relay
from agent_side import CancelRequest, Run
from client_side import ClientSession
from relay.auth import mint_token
from transport import message_text

SECRET = "integration-secret-" + "0123456789abcdef" * 3
CLIENT_CAPS = ["subscribe", "publish", "steer", "cancel"]


def token(user: str, caps: list[str] | None = None, pattern: str = "*", **kw: Any) -> str:
    """A token for ``user`` with ``caps`` (default: a client's) on sessions ``pattern``."""
    return mint_token(user=user, sessions={pattern: caps or CLIENT_CAPS}, secret=SECRET, **kw)


class Conductor:
    """The handler of a worker: records which Runs started and ended, in order."""

    def __init__(self, on_cancel: Callable[[CancelRequest], bool] | None = None) -> None:
        self.started: list[str] = []
        self.ended: list[tuple[str, str]] = []
        self.requests: list[CancelRequest] = []
        self.on_cancel = on_cancel
        self._release: dict[str, anyio.Event] = {}
        self._changed = anyio.Event()

    def release(self, run_id: str) -> None:
        """Let the Run finish (``complete``)."""
        self._event(run_id).set()

    def _event(self, run_id: str) -> anyio.Event:
        return self._release.setdefault(run_id, anyio.Event())

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        with anyio.fail_after(timeout):
            while not predicate():
                await self._changed.wait()

    def _hook(self, request: CancelRequest) -> bool:
        self.requests.append(request)
        self._notify()
        return self.on_cancel(request) if self.on_cancel is not None else True

    async def __call__(self, run: Run) -> None:
        run.on_cancel = self._hook
        await run.start()
        prompt = message_text(run.messages[0]) if run.messages else "?"
        release = self._event(run.run_id)

        async def stream() -> AsyncIterator[str]:
            yield f"{prompt}: started"
            async with run.abort_signal.scope():
                await release.wait()
            if not run.abort_signal.aborted:
                yield " and done"

        self.started.append(run.run_id)
        self._notify()
        await run.pipe(stream())
        reason = "cancelled" if run.abort_signal.aborted else "complete"
        await run.end(reason)
        self.ended.append((run.run_id, reason))
        self._notify()


@asynccontextmanager
async def stack(
    conductor: Conductor, *, agent_token: str | None = None, **options: Any
) -> AsyncIterator[relay.Server]:
    """A relay (memory store) with one worker driven by ``conductor``."""
    async with relay.serve(port=0, store="memory://", **options) as server:
        worker = agent_side.Agent(server.url, token=agent_token)
        worker.on_run(conductor)
        async with worker:
            yield server


async def until(session: ClientSession, predicate: Callable[[], bool], timeout: float = 10) -> None:
    """Wait until ``predicate()`` holds after some change of the session's view."""
    with anyio.fail_after(timeout):
        while not predicate():
            await session._wait_change()


def status(session: ClientSession, run_id: str) -> str | None:
    info = session.view.run(run_id)
    return info.status if info is not None else None


def texts(session: ClientSession) -> list[str]:
    return [message_text(vm.message) for vm in session.view.messages()]


__all__ = [
    "CLIENT_CAPS",
    "SECRET",
    "Conductor",
    "client_side",
    "stack",
    "status",
    "texts",
    "token",
    "until",
]
