"""``Link``: one agent connection to a relay and the sessions attached over it.

A worker's ``Agent`` and an explicit-mode ``connect()`` each own one ``Link``.
It owns the ``Connection`` with role ``agent`` and routes each ``deliver``
frame to its session. After every reconnect it attaches each session again.
The driver keeps the client id the relay gave it, so the relay still knows this
agent as the owner of the Runs it started.

Worker mode shares one attachment per session among its Runs: ``acquire()``
attaches a session for its first user and ``release()`` detaches it after the
last. A session whose attach is refused ``UNAUTHORIZED`` after a reconnect is
lost alone, and the connection stays up for the others.

When the connection stays down longer than the relay's ``agent_grace``, the
relay ends this agent's active Runs ``AGENT_LOST``. The link then fires each
started Run's abort signal with that error.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from ssl import SSLContext
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.abc

from transport._keepalive import DEFAULT_KEEPALIVE_TIMEOUT
from transport.asyncio._connection import RATE_LIMIT_WAIT, STORE_WAIT, Connection, TokenProvider
from transport.errors import AGENT_LOST, UNAUTHORIZED, RunwireError
from transport.frames import Deliver, Detach, Dispatch, Error, RelayFrame

__all__ = ["Link", "LinkedSession", "SessionPort"]

log = logging.getLogger("runwire.agent")


class SessionPort:
    """The part of a session its ``Link`` drives: attaching, delivering, use count, loss.

    ``attach(wait_ready=...)`` attaches (or attaches again) and folds the backlog;
    ``deliver(entries)`` takes a ``deliver`` frame's entries; ``lose(error, started)``
    tells the session's live Runs the attachment is gone (only the started ones
    when ``started`` is true).
    """

    def __init__(
        self,
        session_id: str,
        *,
        owns_link: bool,
        attach: Callable[..., Awaitable[None]],
        deliver: Callable[[list[dict[str, Any]]], None],
        lose: Callable[[RunwireError, bool], None],
    ) -> None:
        self.session_id = session_id
        self.owns_link = owns_link
        self.attach = attach
        self.deliver = deliver
        self.lose = lose
        self.attached = anyio.Event()
        self.attach_error: RunwireError | None = None
        self.error: RunwireError | None = None
        self.refs = 0  # worker mode: how many Runs use this attachment
        self.closing = False
        self.closed = anyio.Event()


class LinkedSession(Protocol):
    """What the link needs of a session (``agent_side._session.AgentSession``)."""

    @property
    def session_id(self) -> str: ...

    @property
    def port(self) -> SessionPort: ...


S = TypeVar("S", bound=LinkedSession)


class Link(Generic[S]):
    """One agent connection and the sessions attached over it."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_provider: TokenProvider | None = None,
        client_id: str | None = None,
        on_dispatch: Callable[[Dispatch], None] | None = None,
        after_connect: Callable[[Connection], Awaitable[None]] | None = None,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        store_wait: float = STORE_WAIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        ssl: SSLContext | None = None,
    ) -> None:
        self.sessions: dict[str, S] = {}
        self.conn = Connection(
            url,
            client_id=client_id,
            role="agent",
            token=token,
            token_provider=token_provider,
            on_frame=self._on_frame,
            on_connect=self._on_connect,
            rate_limit_wait=rate_limit_wait,
            store_wait=store_wait,
            keepalive_timeout=keepalive_timeout,
            ssl=ssl,
        )
        self.conn.on_state(self._on_state)
        self._downs = 0  # how many times the connection dropped
        self._on_dispatch = on_dispatch
        self._after_connect = after_connect
        self._tg: anyio.abc.TaskGroup | None = None
        self.closing = False
        """Set (by ``shut()``) when the owner shuts down: releases skip the detach round trip."""
        self._detaches: set[anyio.CancelScope] = set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Link[S]]:
        """Connect (attaching the sessions registered so far) until the block exits.

        The background task group is exited with no exception info, so an error
        raised in the caller's block propagates as itself, not in a group.
        """
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            async with self.conn:
                yield self
        finally:
            self._tg = None
            self.shut()
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close the connection (from any task or cancel scope); the ``running()`` block
        ends its tasks and leaves its task groups on exit, where it entered them."""
        self.shut()
        await self.conn.aclose()

    def shut(self) -> None:
        """The owner shuts down: releases from now on skip the detach, and those waiting
        on one stop waiting (its reply may never come: the connection is closing, or
        down, and its reader may be cancelled already)."""
        self.closing = True
        for scope in list(self._detaches):
            scope.cancel()

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> bool:
        """Run ``fn(*args)`` in the background while the link runs; its errors are logged.

        False (and nothing runs) when the link does not run."""
        if self._tg is None:
            return False

        async def guarded() -> None:
            try:
                await fn(*args)
            except Exception:
                log.exception("background task failed")

        self._tg.start_soon(guarded)
        return True

    async def acquire(self, session_id: str, make: Callable[[], S]) -> S:
        """The session's attachment, attaching it if this is its first user."""
        while True:
            session = self.sessions.get(session_id)
            if session is None:
                session = make()
                port = session.port
                port.refs = 1
                self.sessions[session_id] = session
                try:
                    await port.attach()
                except BaseException as exc:
                    port.attach_error = (
                        exc if isinstance(exc, RunwireError) else RunwireError("CANCELLED")
                    )
                    port.attached.set()
                    await self.release(session)
                    raise
                return session
            port = session.port
            if port.closing:
                await port.closed.wait()
                continue
            port.refs += 1
            await port.attached.wait()
            if port.attach_error is not None:
                await self.release(session)
                raise port.attach_error
            return session

    async def release(self, session: S) -> None:
        """One user of the session is done; the last one detaches it."""
        port = session.port
        port.refs -= 1
        if port.refs > 0 or self.sessions.get(session.session_id) is not session:
            return
        port.closing = True
        try:
            if self.closing:
                return
            with anyio.CancelScope(shield=True) as scope, anyio.move_on_after(10):
                self._detaches.add(scope)
                try:
                    await self.conn.request(Detach(req=0, session_id=session.session_id))
                finally:
                    self._detaches.discard(scope)
        except RunwireError as exc:
            log.debug("detach of %s failed: %s", session.session_id, exc)
        finally:
            if self.sessions.get(session.session_id) is session:
                del self.sessions[session.session_id]
            port.closed.set()

    async def _on_connect(self, conn: Connection) -> None:
        for session in list(self.sessions.values()):
            try:
                await session.port.attach(wait_ready=False)
            except RunwireError as exc:
                if exc.code != UNAUTHORIZED or session.port.owns_link:
                    raise  # explicit mode: the session is the connection's reason to be
                # A worker's fresh token that no longer covers this session: lose it
                # alone, and keep the connection for the others (and new Runs).
                self._lose(session, exc)
        if self._after_connect is not None:
            await self._after_connect(conn)

    def _on_state(self, state: str) -> None:
        if state == "disconnected":
            self._downs += 1
            self.spawn(self._lost_after_grace, self._downs)

    async def _lost_after_grace(self, down: int) -> None:
        """The connection dropped: act if it is still down after the relay's ``agent_grace``.

        The welcome tells the grace; without one this acts at once. By then the relay has
        ended this agent's active Runs ``AGENT_LOST``, or passed them to another worker.
        Each started Run's ``abort_signal`` fires with that error, so its model stops."""
        welcome = self.conn.welcome
        grace = welcome.agent_grace if welcome is not None else None
        await anyio.sleep(grace or 0)
        if self.conn.connected or self._downs != down:
            return
        error = RunwireError(
            AGENT_LOST,
            "the connection to the relay was lost for longer than its agent_grace",
            details={"grace_seconds": grace},
        )
        for session in list(self.sessions.values()):
            session.port.lose(error, True)

    def _lose(self, session: S, error: RunwireError) -> None:
        """End ``session``'s attachment (the relay refused it ``error``): its live Runs are
        told (``Run._attachment_lost``) and its publishes fail with ``error`` from now on."""
        log.warning("session %s is lost to this worker: %s", session.session_id, error)
        port = session.port
        port.error = error
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
        port.attached.set()
        port.closed.set()
        port.lose(error, False)

    def _on_frame(self, frame: RelayFrame) -> None:
        if isinstance(frame, Deliver):
            session = self.sessions.get(frame.session_id)
            if session is not None:
                session.port.deliver(frame.entries)
        elif isinstance(frame, Dispatch):
            if self._on_dispatch is not None:
                self._on_dispatch(frame)
        elif isinstance(frame, Error):
            log.warning("relay error (session %s): %s", frame.session_id, frame.error.message)
