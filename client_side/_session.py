"""``connect()`` and ``ClientSession``: a client attached to one session on a relay.

A ``ClientSession`` owns one ``Connection`` with role ``client`` and a
``ViewFeed`` for its ``View``. Its ``RelayLink`` (``client_side._relay_link``)
attaches each time the connection comes up: the first time for the newest
page, later from the newest serial the view holds. The feed's
``SessionMirror`` keeps the view free of gaps and duplicates, and rebuilds it
when the relay lost the history.

Publishing goes through ``Connection.request``, which sends again after a
reconnect and while the relay refuses ``RATE_LIMITED`` or
``STORE_UNAVAILABLE``. Entry ids make that safe. Each publish takes its place
in the connection's lane when the user acts, so a ``cancel()`` awaited right
after a ``steer()`` is stored after it.

Steering, its outcomes and refusals are kept by ``client_side._deliveries``.
A prompt that waits (``enqueue``, ``interrupt``, ``rollback``) names no parent
unless asked: the tree places it when its turn comes.

``connect(..., subscribe=False)`` makes a write-only session. It never
attaches and publishes without a view. Whatever reads the session raises
``RunwireError(NOT_ATTACHED)`` at once instead of waiting for entries that
never come.

docs/explanation/views.md explains attaching and resuming;
docs/howto/double-texting.md explains the multitask strategies.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from ssl import SSLContext
from typing import Any

import anyio
import anyio.abc

from transport import _tracing as tracing
from transport._interrupts import PausedRun, paused_run
from transport._keepalive import DEFAULT_KEEPALIVE_TIMEOUT
from transport._runs import MULTITASK_STRATEGIES, run_ended
from transport.asyncio._abort import AbortSignal
from transport.asyncio._connection import (
    CONNECTION_CLOSED,
    RATE_LIMIT_WAIT,
    STORE_WAIT,
    Connection,
    TokenProvider,
)
from transport.asyncio._tasks import Background
from transport.asyncio._view import ViewFeed, write_only_error
from transport.errors import (
    ABORTED,
    RUN_NOT_FOUND,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import (
    InterruptEntry,
    Multitask,
    ThreadAccess,
)
from transport.messages import UIMessage, new_id

from ._cancels import cancel_quietly, cancel_run
from ._deliveries import Deliveries, reused_error
from ._prompts import check_strategy, prompt_entry
from ._relay_link import RelayLink
from ._run import ClientRun, Refused, as_message

__all__ = ["MULTITASK_STRATEGIES", "ClientSession", "Multitask", "connect"]

log = logging.getLogger("runwire.client")


def connect(
    url: str,
    session_id: str,
    *,
    token: str | None = None,
    token_provider: TokenProvider | None = None,
    client_id: str | None = None,
    agent: str = "default",
    history_limit: int = 100,
    on_refused_message: Callable[[Refused], object] | None = None,
    subscribe: bool = True,
    rate_limit_wait: float = RATE_LIMIT_WAIT,
    store_wait: float = STORE_WAIT,
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
    ssl: SSLContext | None = None,
) -> ClientSession:
    """A client session on ``session_id``; use it as ``async with connect(...) as session:``.

    Entering it connects and attaches (raising ``RunwireError``, for example
    ``CONNECTION_CLOSED`` when the relay cannot be reached, ``UNAUTHORIZED`` or
    ``TOKEN_EXPIRED``); afterwards it reconnects by itself. ``token_provider``
    (a plain or async callable returning a token) is asked for a fresh token on
    every reconnect (and first, without ``token``), so a token that expires
    (close 4003) is replaced and the session resumes. ``agent`` names the agent
    that Runs started by ``send`` go to; ``history_limit`` is the size of the
    first page; ``on_refused_message(refused)`` is called the moment an input
    check (the relay's or the agent's) refuses a queued message of the session.

    ``subscribe=False`` makes a write-only session (see the module docstring):
    entering it connects without attaching, for a token with rights in the
    session but not ``subscribe``; it publishes, and whatever reads the session
    raises ``RunwireError(NOT_ATTACHED)`` at once. It takes no
    ``on_refused_message`` (``VALIDATION_ERROR``): it never sees refusals.

    A publish (``send``, steering, ``cancel``, ...) the relay refuses ``RATE_LIMITED``
    or ``STORE_UNAVAILABLE`` goes again, in the order they were made, for up to
    ``rate_limit_wait`` (30) or ``store_wait`` (60) seconds since its first such
    refusal; then it raises that error. A relay that answers no ping for
    ``keepalive_timeout`` (10) seconds counts as gone: the session reconnects.
    ``ssl`` is the TLS context of a ``wss://`` URL, for a relay whose certificate
    the system does not trust (``ssl.create_default_context(cafile=...)``); None uses
    the system's.
    """
    return ClientSession(
        url,
        session_id,
        token=token,
        token_provider=token_provider,
        client_id=client_id,
        agent=agent,
        history_limit=history_limit,
        on_refused_message=on_refused_message,
        subscribe=subscribe,
        rate_limit_wait=rate_limit_wait,
        store_wait=store_wait,
        keepalive_timeout=keepalive_timeout,
        ssl=ssl,
    )


class ClientSession:
    """One session on a relay, seen and driven by a client (see ``connect``)."""

    def __init__(
        self,
        url: str,
        session_id: str,
        *,
        token: str | None = None,
        token_provider: TokenProvider | None = None,
        client_id: str | None = None,
        agent: str = "default",
        history_limit: int = 100,
        on_refused_message: Callable[[Refused], object] | None = None,
        subscribe: bool = True,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        store_wait: float = STORE_WAIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        ssl: SSLContext | None = None,
    ) -> None:
        _check_options(history_limit, subscribe, on_refused_message)
        self.url = url
        self.session_id = session_id
        self.agent = agent
        self.history_limit = history_limit
        self.subscribe = subscribe
        """False for a write-only session (``connect(..., subscribe=False)``)."""
        self._feed = ViewFeed(
            session_id,
            lambda request: self.link.fetch_older(request),
            readable=subscribe,
            logger=log,
        )
        self.view = self._feed.view
        conn = Connection(
            url,
            client_id=client_id,
            role="client",
            token=token,
            token_provider=token_provider,
            on_frame=lambda frame: self.link.on_frame(frame),
            on_connect=lambda conn: self.link.on_connect(conn),
            rate_limit_wait=rate_limit_wait,
            store_wait=store_wait,
            keepalive_timeout=keepalive_timeout,
            ssl=ssl,
        )
        self.link = RelayLink(
            conn,
            self._feed,
            subscribe=subscribe,
            history_limit=history_limit,
            attached=lambda attachment: self._runs.attached(attachment),
            closed=lambda: self._closed,
        )
        """How the session talks to the relay (``client_side._relay_link``; internal to the SDK)."""
        self._runs = Deliveries(
            self._feed,
            subscribe=subscribe,
            publish=self.link.publish,
            spawn=self._start_soon,
            running=lambda: self._tg is not None,
            reserve=conn.reserve,
            cancel=self.cancel,
            closed=self._closed_error,
            on_refused_message=on_refused_message,
        )
        self._state_callbacks: list[Callable[[str], None]] = []
        conn.on_state(self._on_conn_state)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None  # what ``async with`` entered
        self._background = Background()  # its tasks; aclose cancels them
        self._entered = False
        self._closed = False
        self._ended: RunwireError | None = None  # the relay ended the session for good

    # ------------------------------------------------------------ lifecycle --

    async def __aenter__(self) -> ClientSession:
        if self._entered:
            raise RuntimeError("a ClientSession can be entered once")
        self._entered = True
        stack = AsyncExitStack()
        try:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            await stack.enter_async_context(self.link.conn)
        except BaseException:
            self._tg = None
            self._closed = True
            try:
                await stack.aclose()
            finally:
                self._feed.close()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.aclose()
        finally:
            # The block that entered the task groups leaves them, in its own scope.
            self._tg = None
            stack, self._stack = self._stack, None
            if stack is not None:
                await stack.aclose()

    async def aclose(self) -> None:
        """Close the connection; pending steering outcomes reject with ``CONNECTION_CLOSED``.

        Safe from any task or cancel scope (a caller's ``fail_after``, say): the
        ``async with`` block leaves the session's task groups when it exits. A close
        cancelled midway (its timeout fired) still leaves the session closed."""
        if self._closed:
            return
        self._closed = True
        self._background.cancel()  # not the task group: it covers the body of ``async with``
        try:
            await self.link.conn.aclose()
        finally:
            self._runs.fail_all(RunwireError(CONNECTION_CLOSED, "the session was closed"))
            self._feed.close()

    def _start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` in the session's task group until it ends or ``aclose()``."""
        assert self._tg is not None
        self._background.start_soon(self._tg, fn, *args)

    def _closed_error(self) -> RunwireError | None:
        """Why nothing more can be waited on (the session closed), or None."""
        if self.closed:
            return self._ended or RunwireError(CONNECTION_CLOSED, "the session was closed")
        return None

    # -------------------------------------------------------------- state --

    @property
    def run_host(self) -> Deliveries:
        """What this session's ``ClientRun`` handles talk to (``client_side._run.RunHost``)."""
        return self._runs

    @property
    def on_refused_message(self) -> Callable[[Refused], object] | None:
        """Called with a ``Refused`` for each refusal folded after the first attach."""
        return self._runs.on_refused_message

    @on_refused_message.setter
    def on_refused_message(self, fn: Callable[[Refused], object] | None) -> None:
        self._runs.on_refused_message = fn

    @property
    def client_id(self) -> str | None:
        """The client id the relay stamps on this client's entries (known once connected)."""
        return self.link.conn.client_id

    @property
    def connected(self) -> bool:
        """True while the connection is up and attached (up, for a write-only session)."""
        return self.link.conn.connected

    @property
    def closed(self) -> bool:
        """True once the session was closed (by ``aclose``, or for good by the relay:
        credentials refused, or an expired token without a ``token_provider``)."""
        return self._closed or self._ended is not None

    def on_state(self, fn: Callable[[str], None]) -> Callable[[], None]:
        """Call ``fn(state)`` on each change of the connection; returns a remover.

        ``state`` is ``"connected"``, ``"disconnected"`` or ``"closed"``.
        """
        self._state_callbacks.append(fn)

        def remove() -> None:
            try:
                self._state_callbacks.remove(fn)
            except ValueError:
                pass

        return remove

    # ------------------------------------------------------------ actions --

    async def send(
        self,
        message: str | UIMessage,
        *,
        multitask: Multitask | None = None,
        parent_id: str | None = None,
        parent_run_id: str | None = None,
        thread_access: ThreadAccess | None = None,
        signal: AbortSignal | None = None,
        activate: bool | None = None,
    ) -> ClientRun:
        """Start a Run with ``message``; returns once the relay acknowledged the prompt.

        ``multitask`` says what the Run does to the Runs already running in the
        session. With ``None``, the relay's default applies, which is
        ``"alongside"`` unless set. A paused Run counts as running when its
        questions are settled, since it is about to resume. They are settled
        when answered, declined, or moved on by this very prompt. The strategies:

        * ``"alongside"``: they run side by side;
        * ``"reject"``: raises ``RunwireError(THREAD_BUSY)`` while one runs;
        * ``"enqueue"``: the Run is ``queued`` until they settle, then starts;
        * ``"interrupt"``: they are cancelled, then the Run starts;
        * ``"rollback"``: as interrupt, and the interrupted turn goes onto a
          branch of its own: the conversation continues from before it.

        Any strategy but alongside raises ``THREAD_ACCESS_DENIED`` while another
        user's Run is running, unless the session is shared (its first prompt sent
        ``thread_access="shared"``, or the relay shares sessions by default).
        ``parent_id`` names the message to continue from (by default the
        view's tail for alongside and reject; the relay's placement for the
        others); ``parent_run_id`` the Run whose tool call starts this one
        (never held back). With ``signal`` already aborted nothing is sent and
        ``RunwireError(ABORTED)`` is raised; aborted later, it cancels the Run.
        ``activate=False`` (with ``parent_id``: a Run on a branch that leaves the
        active leaf where it is) makes the Run count for no strategy: it runs
        alongside, and later prompts neither wait for nor interrupt it.
        Raises ``VALIDATION_ERROR`` for an unknown strategy, and the relay's
        ``RunwireError`` if it refuses the prompt.
        """
        check_strategy(multitask)
        if signal is not None and signal.aborted:
            raise RunwireError(ABORTED, "the send's signal was aborted; nothing was sent")
        msg = as_message(message)
        if self.subscribe and self.view.tree.message(msg.id) is not None:
            raise reused_error(msg.id)
        run_id = new_id()
        attributes = {"runwire.session_id": self.session_id, "runwire.run_id": run_id}
        with tracing.span("runwire.send", kind="producer", attributes=attributes):
            return await self._send(
                msg, run_id, multitask, parent_id, parent_run_id, thread_access, signal, activate
            )

    async def _send(
        self,
        msg: UIMessage,
        run_id: str,
        multitask: Multitask | None,
        parent_id: str | None,
        parent_run_id: str | None,
        thread_access: ThreadAccess | None,
        signal: AbortSignal | None,
        activate: bool | None,
    ) -> ClientRun:
        """``send`` once its span is open: the prompt carries the span's ``traceparent``."""
        entry = prompt_entry(
            msg,
            run_id,
            agent=self.agent,
            view=self.view if self.subscribe else None,
            welcome=self.link.conn.welcome,
            multitask=multitask,
            parent_id=parent_id,
            parent_run_id=parent_run_id,
            thread_access=thread_access,
            activate=activate,
        )
        ack = await self.link.publish(entry)
        assert ack.serial is not None  # RelayLink.publish checked it
        if (
            ack.duplicate
            and self.subscribe
            and not await self._runs.is_own(msg.id, run_id, "prompt", ack.serial)
        ):
            raise reused_error(msg.id, ack.serial)
        if signal is not None:
            signal.add_callback(lambda _reason: self._cancel_soon(run_id))
        return ClientRun(self._runs, run_id, msg)

    async def cancel(
        self,
        run_id: str,
        *,
        reason: str | None = None,
        wait: bool = False,
        timeout: float | None = 30.0,
    ) -> None:
        """Ask the agent of ``run_id`` to stop; returns once the relay acknowledged it.

        Cancelling a Run that has already ended does nothing (cancel-and-re-prompt
        races the Run's own end; that is not an error); a queued Run stops
        waiting. With ``wait``, also waits (up to ``timeout`` seconds) until the
        Run ends, and raises ``RunwireError(CANCEL_DENIED)`` if its agent
        refuses this cancel, ``RunwireError(EPOCH_MISMATCH)`` (``details["run_id"]``)
        if a reset meanwhile rebuilt the view without the Run. Raises
        ``RunwireError`` (``RUN_NOT_FOUND``, ``UNAUTHORIZED`` without the right,
        ...) when the relay refuses it. A write-only session cannot wait: with
        ``wait`` it raises ``NOT_ATTACHED`` at once and publishes nothing.
        """
        if wait and not self.subscribe:
            raise write_only_error(self.session_id, "cancel(wait=True)")
        await cancel_run(
            self.link.publish, self._runs, run_id, reason=reason, wait=wait, timeout=timeout
        )

    async def resume(self, run_id: str, responses: dict[str, Any]) -> None:
        """Answer questions a paused Run waits on (``{interrupt_id: answer}``).

        Returns once the relay took the answers; once every question is
        answered (or expired) the Run continues on a worker. Questions left out
        keep it paused; ``responses={}`` once the rest expired lets it continue
        (each expired question answers its call ``Nobody answered ...``).
        Raises ``RunwireError``: ``VALIDATION_ERROR`` for a question the Run
        does not wait on or one already answered,
        ``INTERRUPT_ANSWER_INVALID`` (``details["interrupt_id"]``) for an
        answer that breaks its schema, ``INTERRUPT_EXPIRED`` after
        ``expires_at``; nothing is taken then.
        """
        entry = InterruptEntry(id=new_id(), run_id=run_id, status="resumed", responses=responses)
        await self.link.publish(entry)

    def paused_run(self) -> PausedRun | None:
        """The oldest Run of the session that waits on questions, with them; None if none.

        Raises ``RunwireError(NOT_ATTACHED)`` for a write-only session.
        """
        if not self.subscribe:
            raise write_only_error(self.session_id, "paused_run()")
        return paused_run(self.view.tree)

    async def cancel_pause(self, run_id: str, *, reason: str | None = None) -> None:
        """End a pause without answers: each waiting call gets "The user declined to answer ...".

        Raises ``RunwireError(VALIDATION_ERROR)`` when the Run waits on nothing.
        """
        entry = InterruptEntry(id=new_id(), run_id=run_id, status="declined", reason=reason)
        await self.link.publish(entry)

    def _cancel_soon(self, run_id: str) -> None:
        info = self.view.run(run_id) if self.subscribe else None
        if self._closed or self._tg is None or (info is not None and run_ended(info.status)):
            return
        # In the lane now, when the signal fired: after what the user did before, before
        # what they do next.
        self._start_soon(cancel_quietly, self.link.publish, run_id, self.link.conn.reserve())

    def run(self, run_id: str) -> ClientRun:
        """A handle on a Run the view knows (one this client or another one started).

        Steering through it works as through the handle ``send`` returned.
        Raises ``RunwireError(RUN_NOT_FOUND)`` if the view has not seen the Run.
        A write-only session has no view: it returns a handle on any id (with
        no ``prompt``), and the relay refuses what does not fit the Run.
        """
        if not self.subscribe:
            return ClientRun(self._runs, run_id, None)
        if self.view.run(run_id) is None:
            raise RunwireError(
                RUN_NOT_FOUND, f"the view has no run {run_id!r}", details={"run_id": run_id}
            )
        # The tree's, not the active branch's: a fork above the Run may have left it on
        # another branch (and a queued Run's prompt is held out of the conversation).
        prompt = self.view.tree.prompt(run_id)
        return ClientRun(self._runs, run_id, prompt.message if prompt is not None else None)

    # ----------------------------------------------------------- internal --

    async def _wait_change(self) -> None:
        """Wait for the view's next change; ``CONNECTION_CLOSED`` once the session closed."""
        await self._runs.wait_change()

    def _on_conn_state(self, state: str) -> None:
        error = self.link.conn.error
        if state == "closed" and error is not None and not self.closed:
            self._end(error)
        for fn in list(self._state_callbacks):
            try:
                fn(state)
            except Exception:
                log.exception("state callback failed")

    def _end(self, error: RunwireError) -> None:
        """The relay ended the session for good: fail what waits, as ``aclose`` does."""
        self._ended = error
        self._runs.fail_all(error)
        self._feed.close()

    def __repr__(self) -> str:
        mode = "" if self.subscribe else " write-only"
        return f"<ClientSession {self.session_id!r}{mode} connected={self.connected}>"


def _check_options(
    history_limit: int, subscribe: bool, on_refused_message: Callable[[Refused], object] | None
) -> None:
    """Raise ``VALIDATION_ERROR`` for options ``connect`` does not take."""
    if not 1 <= history_limit <= 1000:
        raise RunwireError(VALIDATION_ERROR, "history_limit must be between 1 and 1000")
    if not subscribe and on_refused_message is not None:
        raise RunwireError(
            VALIDATION_ERROR,
            "a session connected with subscribe=False never sees refusals:"
            " on_refused_message is not taken (a refused publish raises its error)",
        )
