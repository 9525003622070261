"""Explicit mode: ``connect()`` and ``AgentSession``, one session attached by an agent.

An ``AgentSession`` is one session attached over an agent connection
(``agent_side._link.Link``), shared by all its Runs. Its ``view`` is the
``View`` both SDKs share: a ``ViewFeed`` folds every delivered entry into the
session's ``SessionMirror``, in serial order and each serial once. After every
reconnect the link attaches the session again from the newest serial held, so
a drop loses and repeats nothing.

Each entry folded is also told to the live ``Run`` it concerns: steering that
arrived (``on_steer``), a cancel (``on_cancel``), or an end the Run did not
publish itself. The session keeps each Run's cancel requests for that.

A worker's session whose attach is refused ``UNAUTHORIZED`` is lost alone:
its ``error`` says why, and its live Runs' abort signals fire with that error.
In explicit mode the session is the connection, so the refusal ends it.

docs/explanation/views.md explains attaching and resuming.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from ssl import SSLContext
from typing import Any

import anyio
from pydantic import ValidationError

from transport._interrupts import PausedRun, paused_run
from transport._keepalive import DEFAULT_KEEPALIVE_TIMEOUT
from transport._mirror import Folded
from transport._tree import ConversationTree, MessageEvent
from transport.asyncio._abort import AbortSignal
from transport.asyncio._connection import RATE_LIMIT_WAIT, STORE_WAIT, TokenProvider
from transport.asyncio._view import View, ViewFeed
from transport.checks import Check
from transport.errors import PROTOCOL_ERROR, VALIDATION_ERROR, RunwireError
from transport.frames import Attach, EntryBody, History, Page, Publish, RunEntry

from ._link import Link, SessionPort
from ._options import (
    CancelHook,
    CancelRequest,
    EndReason,
    Invocation,
    IterationLimit,
    QueueOptions,
    RunOptions,
    SteerHook,
)
from ._run import Run
from ._run_link import RunLink
from ._view import RunView

__all__ = ["AgentSession", "View", "connect"]

log = logging.getLogger("runwire.agent")

_END_REASONS: dict[str, EndReason] = {
    "complete": "complete",
    "cancelled": "cancelled",
    "error": "error",
}

ATTACH_LIMIT = 200
"""Entries of the newest page a first attach asks for."""


class AgentSession:
    """One session attached by an agent; ``create_run()`` takes its Runs."""

    def __init__(
        self,
        link: Link[AgentSession],
        session_id: str,
        *,
        queue: QueueOptions | None = None,
        max_in_flight: int = 1,
        owns_link: bool = False,
        options: RunOptions | None = None,
        rollup_window: float = 0.0,
    ) -> None:
        try:
            Attach(req=0, session_id=session_id)
        except ValidationError:
            raise RunwireError(VALIDATION_ERROR, f"invalid session id {session_id!r}") from None
        self.session_id = session_id
        self._feed = ViewFeed(session_id, self._fetch_older, logger=log)
        self._feed.entry_hooks.append(self._index)
        self.view: View = self._feed.view
        """The whole conversation of the session (``run.view`` is one Run's)."""
        self.port = SessionPort(
            session_id,
            owns_link=owns_link,
            attach=self._attach,
            deliver=self._feed.deliver,
            lose=self._lose,
        )
        """What the session's ``Link`` drives (``agent_side._link``)."""
        self._link = link
        self.options = (options or RunOptions()).merge(queue=queue)
        self._max_in_flight = max_in_flight
        if not 0 <= rollup_window <= 10:
            raise ValueError(f"rollup_window must be 0 to 10 seconds, not {rollup_window}")
        self._rollup_window = rollup_window
        self._owns_link = owns_link
        self._runs: dict[str, Run] = {}
        self._cancels: dict[str, dict[str, CancelRequest]] = {}  # run id -> entry id -> it
        self._started: set[str] = set()  # Runs seen going active (an adopter knows by it)
        self._own: set[str] = set()

    @property
    def client_id(self) -> str | None:
        """The client id the relay knows this agent connection by."""
        return self._link.conn.client_id

    @property
    def attached(self) -> anyio.Event:
        """Set once the first attach ended, in success or failure."""
        return self.port.attached

    @property
    def error(self) -> RunwireError | None:
        """Why the attachment ended for good while the connection stayed up (``UNAUTHORIZED``:
        a worker's fresh token no longer covers the session), or None."""
        return self.port.error

    @property
    def tree(self) -> ConversationTree:
        """The session's conversation tree, as folded so far (read it; do not fold into it)."""
        return self._feed.mirror.tree

    @property
    def epoch(self) -> str | None:
        """The epoch the relay named at the last attach (None before the first)."""
        return self._feed.mirror.epoch

    @property
    def last_serial(self) -> int | None:
        """The newest serial folded (what a re-attach resumes after)."""
        return self._feed.mirror.newest_serial

    # ------------------------------------------------------------- Runs --

    def create_run(
        self,
        invocation: Invocation | str,
        *,
        on_steer: SteerHook | None = None,
        on_cancel: CancelHook | None = None,
        queue: Mapping[str, str] | QueueOptions | None = None,
        input_checks: Sequence[Check] | None = None,
        max_iterations: int | None = None,
        on_iteration_limit: IterationLimit | None = None,
        history: bool | None = None,
        save_interrupted_reply: bool | None = None,
        durable: bool | None = None,
        timeout: float | None = None,
        adopted: bool | None = None,
        checkpoint: dict[str, Any] | None = None,
        signal: AbortSignal | None = None,
    ) -> Run:
        """A ``Run`` for a Run of this session (an ``Invocation`` or a run id).

        The options default to the session's, as ``RunOptions`` describes:
        ``queue``, ``input_checks``, ``max_iterations``, ``on_iteration_limit``,
        ``history``, ``save_interrupted_reply``, ``durable`` and ``timeout``.
        ``max_iterations`` counts model calls per turn. ``on_iteration_limit`` is
        ``"stop"`` or ``"error"``. With ``history=False`` the Run keeps no
        history, so injects it had no model call for stay undelivered.
        ``timeout`` is how many seconds the Run may stay active from each start.
        At that deadline the relay ends it ``cancelled``, ``RUN_TIMEOUT``.
        ``adopted`` (default: the view shows the Run was started before)
        makes the Run continue from its last ``checkpoint`` (default: the
        newest in the view). ``signal``, an outside ``AbortSignal`` (a
        request's), feeds the Run's ``abort_signal``: when it fires the Run is
        cancelled as by a cancel (``Run.link_signal``). Raises ``ValueError``
        for another session's invocation, a bad option, or a run id that
        already has a live ``Run``.
        """
        if isinstance(invocation, str):
            invocation = Invocation(self.session_id, invocation)
        if invocation.session_id != self.session_id:
            raise ValueError(
                f"invocation of session {invocation.session_id!r}, not {self.session_id!r}"
            )
        if invocation.run_id in self._runs:
            raise ValueError(f"run {invocation.run_id!r} already has a live Run")
        options = self.options.merge(
            queue=queue,
            input_checks=input_checks,
            max_iterations=max_iterations,
            on_iteration_limit=on_iteration_limit,
            history=history,
            save_interrupted_reply=save_interrupted_reply,
            durable=durable,
            timeout=timeout,
        )
        if adopted is None:
            adopted = invocation.run_id in self._started or bool(
                self.tree.responses(invocation.run_id)
            )
        run = Run(
            self,
            invocation,
            on_steer=on_steer,
            on_cancel=on_cancel,
            max_in_flight=self._max_in_flight,
            rollup_window=self._rollup_window,
            options=options,
            adopted=adopted,
            checkpoint=checkpoint,
            signal=signal,
        )
        self._runs[invocation.run_id] = run
        return run

    def invocations(self) -> list[Invocation]:
        """Invocations for the Runs in the view that wait for an agent (``pending``)."""
        return [
            Invocation(self.session_id, info.run_id)
            for info in self.tree.runs()
            if info.status == "pending"
        ]

    async def aclose(self) -> None:
        """Close the connection (explicit mode); Runs not ended stay as they are on the relay.

        The seed's ``session.detach()``: another process may continue them
        (a Run nobody ends is ended ``AGENT_LOST`` after the relay's
        ``agent_grace``). Raises ``RuntimeError`` for a worker's session: that
        closes with its ``Agent``.
        """
        if not self._owns_link:
            raise RuntimeError("a worker's session closes with its Agent")
        await self._link.aclose()

    async def end(self) -> None:
        """End ``cancelled`` every active Run this session started, then close.

        The seed's ``session.end()``: a handler that forgot ``run.end()`` (or
        raised before it) leaves no Run streaming on every device until
        ``agent_grace`` runs out. Runs created here but never started stay
        ``pending`` for another agent, and suspended ones stay suspended (they
        wait on a person; any worker resumes them). An end the relay refuses
        is logged.
        Raises ``RuntimeError`` for a worker's session, as ``aclose()`` does.
        """
        if not self._owns_link:
            raise RuntimeError("a worker's session closes with its Agent")
        try:
            for run in list(self._runs.values()):
                if run.status == "active":
                    # One whose end the store refused ends as its code asked, not cancelled.
                    reason, error = run.inbox.end_asked or ("cancelled", None)
                    try:
                        await run.end(reason, error=error)
                    except RunwireError as exc:
                        log.warning(
                            "could not end run %s at the session's end: %s", run.run_id, exc
                        )
        finally:
            # Cancelled midway (the caller's timeout fired): the session still closes.
            await self.aclose()

    # ---------------------------------------------------------- internal --

    async def _attach(self, *, wait_ready: bool = True) -> None:
        """Attach (or re-attach from ``last_serial``) and fold the backlog."""
        attachment = await self._feed.request_attach(
            ATTACH_LIMIT, lambda frame: self._link.conn.request(frame, wait_ready=wait_ready)
        )
        self._feed.take_attachment(attachment)
        self.attached.set()

    def _deliver(self, entries: list[dict[str, Any]]) -> None:
        self._feed.deliver(entries)

    async def _fetch_older(self, request: History) -> Page:
        reply = await self._link.conn.request(request)
        if not isinstance(reply, Page):
            raise RunwireError(PROTOCOL_ERROR, f"expected page, got {reply.type}")
        older: dict[str, dict[str, CancelRequest]] = {}
        for data in reply.entries:
            if data.get("kind") == "cancel" and isinstance(data.get("run_id"), str):
                request_ = _cancel_request(data)
                older.setdefault(request_.run_id, {})[str(request_.cancel_id)] = request_
        for run_id, requests in older.items():  # before the newer ones, oldest first
            self._cancels[run_id] = {**requests, **self._cancels.get(run_id, {})}
        return reply

    def _index(self, folded: Folded) -> None:
        """Tell the live Runs what an entry changed for them (the tree is already folded)."""
        if not folded.read:
            return
        data = folded.entry
        for event in folded.events:
            if isinstance(event, MessageEvent) and event.op == "added":
                vm = event.message
                run = self._runs.get(vm.run_id)
                if vm.intent not in (None, "prompt") and run is not None:
                    run.inbox.input_folded(vm)
        kind, run_id = data.get("kind"), data.get("run_id")
        if not isinstance(run_id, str):
            return
        run = self._runs.get(run_id)
        if kind == "cancel":
            request = _cancel_request(data)
            self._cancels.setdefault(run_id, {})[str(request.cancel_id)] = request
            if run is not None:
                run.inbox.cancel_folded(request)
        elif kind == "run":
            status = data.get("status")
            if status == "active":
                self._started.add(run_id)
            if run is None or data.get("id") in self._own:
                return
            if status == "pending":
                if run.started:  # not a queued Run's turn: the relay handed it on
                    run.inbox.passed_on()
                return
            reason = _END_REASONS.get(status) if isinstance(status, str) else None
            if reason is not None:
                error = data.get("error")
                err = RunwireError.from_wire(error) if isinstance(error, dict) else None
                run.inbox.ended_elsewhere(reason, err)

    def _cancels_of(self, run_id: str) -> list[CancelRequest]:
        """The Run's standing cancel requests, oldest first (none once the agent refused).

        Several devices may have cancelled the Run before its agent started it: each
        is a request of its own (who asked, why), refused or accepted on its own.
        """
        if not self.tree.cancel_requested(run_id):
            return []
        tree = self.tree
        standing = [
            request
            for request in self._cancels.get(run_id, {}).values()
            if request.cancel_id is None or tree.cancel_denial(request.cancel_id) is None
        ]
        return standing or [CancelRequest(run_id=run_id)]

    def paused_run(self) -> PausedRun | None:
        """The oldest Run of the session that waits on questions, with them; None if none."""
        return paused_run(self.tree)

    def _lose(self, error: RunwireError, started_only: bool) -> None:
        """The attachment is gone (``error``): tell the live Runs (only started ones if asked)."""
        for run in list(self._runs.values()):
            if not started_only or (run.started and not run.ended):
                run.inbox.attachment_lost(error)

    def run_link(self) -> RunLink:
        """The interface this session's Runs talk to it through (internal to the SDK)."""
        # Each looks the session's method up when called, so a test may swap one in.
        return RunLink(
            tree=lambda: self.tree,
            owns_link=self._owns_link,
            frame_bytes=lambda: self._frame_bytes(),
            publish=lambda entry, slot: (
                self._publish(entry) if slot is None else self._publish(entry, slot)
            ),
            spawn=lambda fn, *args: self._spawn(fn, *args),
            reserve=lambda: self._reserve(),
            release=lambda slot: self._release(slot),
            forget=lambda run: self._forget(run),
            cancels_of=lambda run_id: self._cancels_of(run_id),
            view_of=self._view_of,
        )

    def _view_of(self, run: Run) -> RunView:
        """The Run's view: a filter over the session's (``agent_side._view.RunView``)."""
        return RunView(
            self.view,
            run.run_id,
            tail=lambda: run.inbox.input_tail(),
            visible=lambda: run.inbox.visible_inputs(),
            retry=lambda: run.inbox.retry_id,
        )

    def _frame_bytes(self) -> int:
        """The relay's ``max_frame_bytes`` (as its welcome said; 1 MiB before one came)."""
        welcome = self._link.conn.welcome
        return welcome.max_frame_bytes if welcome else 1024 * 1024

    def _forget(self, run: Run) -> None:
        run.inbox.unlink_signals()
        if self._runs.get(run.run_id) is run:
            del self._runs[run.run_id]

    def _reserve(self) -> int:
        """Take the next place among the connection's publishes now (``Connection.reserve``),
        for an entry decided now and published from a task (``_publish(entry, slot)``)."""
        return self._link.conn.reserve()

    async def _publish(self, entry: EntryBody, slot: int | None = None) -> None:
        """Publish one entry; returns once the relay acknowledged it.

        ``slot``: its place among the connection's publishes, taken with ``_reserve()``
        when it was decided (none: now); it is used, or given back, either way.

        The relay's store may refuse a publish with ``STORE_UNAVAILABLE``, when
        Redis is away or out of memory. The entry may or may not have been stored.
        It is sent again with the same id, which the relay de-duplicates, and
        before anything published after it. It is retried for up to the
        connection's ``store_wait`` seconds, as ``Connection.request`` does.
        Then that error is raised, so a Run never hangs on a store that does
        not come back.
        """
        if isinstance(entry, RunEntry):
            self._own.add(entry.id)
        if self.error is not None:
            if slot is not None:
                self._release(slot)
            raise self.error
        frame = Publish(req=0, session_id=self.session_id, entry=entry)
        await self._link.conn.request(frame, slot=slot)

    def _spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> bool:
        return self._link.spawn(fn, *args)

    def _release(self, slot: int) -> None:
        """Give back a place ``_reserve()`` took that no publish will use."""
        self._link.conn.release(slot)

    def __repr__(self) -> str:
        return f"AgentSession(session_id={self.session_id!r}, last_serial={self.last_serial})"


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _cancel_request(data: dict[str, Any]) -> CancelRequest:
    return CancelRequest(
        run_id=str(data.get("run_id")),
        reason=_str_or_none(data.get("reason")),
        client_id=_str_or_none(data.get("client_id")),
        user_id=_str_or_none(data.get("user_id")),
        cancel_id=_str_or_none(data.get("id")),
        interrupted_by=_str_or_none(data.get("interrupted_by")),
    )


@asynccontextmanager
async def connect(
    url: str,
    session_id: str,
    *,
    token: str | None = None,
    token_provider: TokenProvider | None = None,
    client_id: str | None = None,
    queue: Mapping[str, str] | QueueOptions | None = None,
    max_in_flight: int = 1,
    rollup_window: float = 0.0,
    input_checks: Sequence[Check] | None = None,
    max_iterations: int | None = None,
    on_iteration_limit: IterationLimit | None = None,
    history: bool | None = None,
    save_interrupted_reply: bool | None = None,
    durable: bool | None = None,
    rate_limit_wait: float = RATE_LIMIT_WAIT,
    store_wait: float = STORE_WAIT,
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
    ssl: SSLContext | None = None,
) -> AsyncIterator[AgentSession]:
    """Attach to one session as an agent until the block exits (explicit mode).

    ``queue``, ``input_checks``, ``max_iterations``, ``on_iteration_limit``,
    ``history``, ``save_interrupted_reply`` and ``durable`` are the defaults
    of the session's Runs, as ``RunOptions`` describes; ``create_run`` may
    override each. ``max_in_flight`` is how many appends a ``pipe()`` may have
    unacknowledged. ``rollup_window`` is how many seconds a ``pipe()`` may hold
    tokens before it publishes them, so several ride one append; the default 0
    turns it off. Raises
    ``RunwireError`` if the relay cannot be reached or refuses, ``ValueError`` for a
    bad option. ``token_provider`` (plain or async) gives a fresh token on each
    reconnect. A publish the relay refuses ``RATE_LIMITED`` or ``STORE_UNAVAILABLE``
    goes again, in order, for up to ``rate_limit_wait`` (30) or ``store_wait`` (60)
    seconds since its first such refusal; then the error is raised (``pipe()``
    returns ``reason="error"``). A relay that answers no ping for ``keepalive_timeout``
    seconds counts as gone (the connection reconnects); still gone after the relay's
    ``agent_grace``, the session's started Runs end here too: ``abort_signal`` fires
    with ``AGENT_LOST``.
    ``ssl`` is the TLS context of a ``wss://`` URL, for a relay whose certificate the
    system does not trust (``ssl.create_default_context(cafile=...)``).
    """
    link: Link[AgentSession] = Link(
        url,
        token=token,
        token_provider=token_provider,
        client_id=client_id,
        rate_limit_wait=rate_limit_wait,
        store_wait=store_wait,
        keepalive_timeout=keepalive_timeout,
        ssl=ssl,
    )
    options = RunOptions().merge(
        queue=queue,
        input_checks=input_checks,
        max_iterations=max_iterations,
        on_iteration_limit=on_iteration_limit,
        history=history,
        save_interrupted_reply=save_interrupted_reply,
        durable=durable,
    )
    session = AgentSession(
        link,
        session_id,
        max_in_flight=max_in_flight,
        owns_link=True,
        options=options,
        rollup_window=rollup_window,
    )
    link.sessions[session_id] = session
    async with link.running():
        yield session
