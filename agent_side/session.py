"""Explicit mode: ``connect()``, ``AgentSession`` and the agent's ``View``.

Theory of operation
-------------------
A ``_Link`` owns one ``Connection(role="agent")`` and the sessions attached
over it (one ``AgentSession`` per session id, shared by all its Runs). After
every (re)connect it re-attaches each session from the newest serial it
holds, so a drop loses and repeats nothing; the driver keeps the client id
the relay gave it, so the relay still knows this agent as the owner of the
Runs it started.

A worker's session whose re-attach is refused ``UNAUTHORIZED`` (a fresh token
from the ``token_provider`` no longer covers it) is lost alone
(``_Link._lose``): its ``error`` says why, its live Runs' abort signals fire
with that error and their publishes raise it; the connection and the other
sessions go on. (In explicit mode the session is the connection: the
refusal ends it, as a refused token at connect does.)

An ``AgentSession`` folds every delivered entry into a ``ConversationTree``
(in serial order, each serial once; the tree answers which steering each Run
has and which its responses stamped as seen), keeps each Run's cancel
requests, and tells the live ``Run`` of that run id (``on_steer`` when a steer
message is added, ``on_cancel``, an end it did not publish itself). Deliveries that arrive while an
attach is in flight wait until its backlog has been folded.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from ssl import SSLContext
from typing import Any

import anyio
import anyio.abc
from pydantic import ValidationError

from transport.asyncio.abort import AbortSignal
from transport.asyncio.connection import RATE_LIMIT_WAIT, STORE_WAIT, Connection, TokenProvider
from transport.checks import Check
from transport.errors import AGENT_LOST, UNAUTHORIZED, VALIDATION_ERROR, RunwireError
from transport.frames import (
    Attach,
    Attached,
    Deliver,
    Detach,
    Dispatch,
    EntryBody,
    Error,
    History,
    Page,
    Publish,
    RelayFrame,
    RunEntry,
)
from transport.interrupts import PausedRun
from transport.keepalive import DEFAULT_KEEPALIVE_TIMEOUT
from transport.tree import ConversationTree, MessageEvent, RunInfo, TreeEvent, ViewMessage

from ._run_link import RunLink
from .options import (
    CancelHook,
    CancelRequest,
    EndReason,
    Invocation,
    IterationLimit,
    QueueOptions,
    RunOptions,
    SteerHook,
)
from .run import Run

__all__ = ["AgentSession", "View", "connect"]

log = logging.getLogger("runwire.agent")

_END_REASONS: dict[str, EndReason] = {
    "complete": "complete",
    "cancelled": "cancelled",
    "error": "error",
}

ATTACH_LIMIT = 200
"""Entries of the newest page a first attach asks for."""

EventCallback = Callable[[Any], object]


class View:
    """The whole conversation of a session, as this agent folded it.

    A ``Run``'s view is that Run's conversation, on the branch the Run is on
    (the active one, unless a prompt forked above the Run or a rollback left
    it on a branch of its own while it went on or waited): everything before
    its prompt, then its own turn (its prompt, responses and the queued
    messages it took in), leaving out what Runs streaming alongside it added
    after its prompt; and it puts this Run's unanswered input last, so a
    prompt built from it never ends on an assistant message, nor on another
    Run's message. Queued messages are in it only once taken in (or about to
    be at the next call: steering in ``all`` mode and injects, once they
    passed the checks); a queued message of an earlier Run only if that Run
    took it in (the others never reached the conversation). A step being
    retried after an adoption is left out until it is published again.
    """

    def __init__(self, session: AgentSession, *, run: Run | None = None) -> None:
        self._session = session
        self._run = run

    def messages(self) -> list[ViewMessage]:
        """The active branch, oldest first (for a Run: its conversation, see above)."""
        if self._run is None:
            return self._session.tree.messages()
        run = self._run
        run_id = run.run_id
        tree = self._session.tree
        branch = tree.messages(tail=run.inbox.input_tail(), run_id=run_id)
        start = next(
            (i for i, vm in enumerate(branch) if vm.run_id == run_id and vm.intent == "prompt"),
            len(branch),
        )
        visible = run.inbox.visible_inputs()
        retry = run.inbox.retry_id

        def keep(vm: ViewMessage) -> bool:
            if vm.intent in (None, "prompt"):  # prompts and responses
                return vm.message.id != retry
            if vm.run_id == run_id:
                return vm.message.id in visible
            return tree.outcomes.consumed(vm.message.id)

        before = [vm for vm in branch[:start] if keep(vm)]
        own = [vm for vm in branch[start:] if vm.run_id == run_id and keep(vm)]
        return before + own

    def runs(self) -> list[RunInfo]:
        """Every Run the view knows of."""
        return self._session.tree.runs()

    def has_older(self) -> bool:
        """True while the relay holds entries older than the view's."""
        return self._session._has_older

    async def load_older(self, limit: int = 50) -> int:
        """Fold the next older page into the view; returns how many entries it had."""
        return await self._session._load_older(limit)

    def branches(self, message_id: str) -> list[str]:
        """Ids of the message and its siblings at a fork, in serial order."""
        return self._session.tree.branches(message_id)

    def select_branch(self, message_id: str) -> None:
        """Make the branch through ``message_id`` the active one.

        Reports ``MessageEvent(op="removed")`` for what leaves ``messages()``,
        then ``op="added"`` for what joins it.
        """
        self._session._emit(self._session.tree.select_branch(message_id))

    def on(self, event: str, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` on each ``message``/``run``/``delivery`` event.

        Returns a function that removes the callback.
        """
        if event not in ("message", "run", "delivery"):
            raise ValueError(f"unknown event {event!r}")
        listeners = self._session._listeners.setdefault(event, [])
        listeners.append(callback)

        def remove() -> None:
            if callback in listeners:
                listeners.remove(callback)

        return remove


class AgentSession:
    """One session attached by an agent; ``create_run()`` takes its Runs."""

    def __init__(
        self,
        link: _Link,
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
        self.tree = ConversationTree()
        self.view = View(self)
        self.epoch: str | None = None
        self.last_serial: int | None = None
        self.attached = anyio.Event()
        self._link = link
        self.options = (options or RunOptions()).merge(queue=queue)
        self._max_in_flight = max_in_flight
        if not 0 <= rollup_window <= 10:
            raise ValueError(f"rollup_window must be 0 to 10 seconds, not {rollup_window}")
        self._rollup_window = rollup_window
        self._owns_link = owns_link
        self._has_older = False
        self._oldest: int | None = None
        self._buffer: list[list[dict[str, Any]]] | None = None
        self._attach_error: RunwireError | None = None
        self.error: RunwireError | None = None
        """Why the attachment ended for good while the connection went on (``UNAUTHORIZED``:
        a worker's fresh token no longer covers the session), or None."""
        self._runs: dict[str, Run] = {}
        self._cancels: dict[str, dict[str, CancelRequest]] = {}  # run id -> entry id -> it
        self._started: set[str] = set()  # Runs seen going active (an adopter knows by it)
        self._own: set[str] = set()
        self._listeners: dict[str, list[EventCallback]] = {}
        # Worker mode: how many Runs use this attachment, and its detaching state.
        self._refs = 0
        self._closing = False
        self._closed = anyio.Event()

    @property
    def client_id(self) -> str | None:
        """The client id the relay knows this agent connection by."""
        return self._link.conn.client_id

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

        The options default to the session's (``RunOptions``; see there):
        ``queue``, ``input_checks``, ``max_iterations`` (model calls per turn),
        ``on_iteration_limit`` (``"stop"`` or ``"error"``), ``history``
        (``False``: the Run keeps no history, so injects it had no model call
        for stay undelivered), ``save_interrupted_reply``, ``durable``,
        ``timeout`` (seconds the Run may stay active from each start: the relay
        ends it ``cancelled``, ``RUN_TIMEOUT``, at that deadline).
        ``adopted`` (default: the view shows the Run was started before)
        makes the Run go on from its last ``checkpoint`` (default: the
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

        The seed's ``session.detach()``: another process may go on with them
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
        if self._buffer is None:
            self._buffer = []
        resume = self.last_serial is not None
        frame = Attach(
            req=0,
            session_id=self.session_id,
            from_serial=self.last_serial if resume else None,
            epoch=self.epoch if resume else None,
            limit=ATTACH_LIMIT,
        )
        reply = await self._link.conn.request(frame, wait_ready=wait_ready)
        if not isinstance(reply, Attached):
            raise RunwireError("PROTOCOL_ERROR", f"expected attached, got {reply.type}")
        if reply.reset:
            log.warning("session %s: history was lost (new epoch); rebuilding", self.session_id)
            self.tree = ConversationTree()
            self.last_serial = None
            self._oldest = None
        if not resume or reply.reset:
            self._has_older = reply.has_older
        self.epoch = reply.epoch
        self._fold_live(reply.entries)
        buffered, self._buffer = self._buffer or [], None
        for entries in buffered:
            self._fold_live(entries)
        self.attached.set()

    def _deliver(self, entries: list[dict[str, Any]]) -> None:
        if self._buffer is not None:
            self._buffer.append(entries)
        else:
            self._fold_live(entries)

    def _fold_live(self, entries: list[dict[str, Any]]) -> None:
        for data in entries:
            serial = data.get("serial")
            if not isinstance(serial, int):
                continue
            if self.last_serial is not None and serial <= self.last_serial:
                continue
            self.last_serial = serial
            if self._oldest is None:
                self._oldest = serial
            try:
                events = self.tree.fold(data)
            except Exception:  # bad data from the other end must not end the connection
                log.exception("session %s: cannot fold entry %s", self.session_id, serial)
                continue
            self._index(data, events)
            self._emit(events)

    async def _load_older(self, limit: int) -> int:
        if not self._has_older or self._oldest is None:
            return 0
        reply = await self._link.conn.request(
            History(req=0, session_id=self.session_id, before=self._oldest, limit=limit)
        )
        if not isinstance(reply, Page):
            raise RunwireError("PROTOCOL_ERROR", f"expected page, got {reply.type}")
        entries = [e for e in reply.entries if isinstance(e.get("serial"), int)]
        events = self.tree.fold_older(entries)
        older: dict[str, dict[str, CancelRequest]] = {}
        for data in entries:
            self._oldest = min(self._oldest, data["serial"])
            if data.get("kind") == "cancel" and isinstance(data.get("run_id"), str):
                request = _cancel_request(data)
                older.setdefault(request.run_id, {})[str(request.cancel_id)] = request
        for run_id, requests in older.items():  # before the newer ones, oldest first
            self._cancels[run_id] = {**requests, **self._cancels.get(run_id, {})}
        self._has_older = reply.has_older
        self._emit(events)
        return len(entries)

    def _index(self, data: dict[str, Any], events: list[TreeEvent]) -> None:
        """Tell the live Runs what an entry changed for them (the tree is already folded)."""
        for event in events:
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

    def _emit(self, events: list[Any]) -> None:
        for event in events:
            for callback in list(self._listeners.get(getattr(event, "kind", ""), ())):
                try:
                    callback(event)
                except Exception:
                    log.exception("view listener failed")

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
        for info in self.tree.runs():
            questions = self.tree.interrupts(info.run_id)
            if questions:
                return PausedRun(info.run_id, questions)
        return None

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
            view_of=lambda run: View(self, run=run),
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

        A publish the relay's store refused (``STORE_UNAVAILABLE``: Redis away or out of
        memory; it may or may not have been stored) goes again with the same id (the
        relay de-duplicates it), before anything published after it, for up to the
        connection's ``store_wait`` seconds (``Connection.request``); then that error is
        raised, so a Run never hangs on a store that does not come back.
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


class _Link:
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
        self.sessions: dict[str, AgentSession] = {}
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
    async def running(self) -> AsyncIterator[_Link]:
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

    async def acquire(self, session_id: str, make: Callable[[], AgentSession]) -> AgentSession:
        """The session's attachment, attaching it if this is its first user."""
        while True:
            session = self.sessions.get(session_id)
            if session is None:
                session = make()
                session._refs = 1
                self.sessions[session_id] = session
                try:
                    await session._attach()
                except BaseException as exc:
                    session._attach_error = (
                        exc if isinstance(exc, RunwireError) else RunwireError("CANCELLED")
                    )
                    session.attached.set()
                    await self.release(session)
                    raise
                return session
            if session._closing:
                await session._closed.wait()
                continue
            session._refs += 1
            await session.attached.wait()
            if session._attach_error is not None:
                await self.release(session)
                raise session._attach_error
            return session

    async def release(self, session: AgentSession) -> None:
        """One user of the session is done; the last one detaches it."""
        session._refs -= 1
        if session._refs > 0 or self.sessions.get(session.session_id) is not session:
            return
        session._closing = True
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
            session._closed.set()

    async def _on_connect(self, conn: Connection) -> None:
        for session in list(self.sessions.values()):
            try:
                await session._attach(wait_ready=False)
            except RunwireError as exc:
                if exc.code != UNAUTHORIZED or session._owns_link:
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
        """The connection dropped: if it is still down once the relay's ``agent_grace`` has
        passed (told in its welcome; at once if it told none), the relay has ended (or
        handed on) this agent's active Runs ``AGENT_LOST``. Each one's ``abort_signal``
        fires with that error, so its model stops instead of generating into the void."""
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
            for run in list(session._runs.values()):
                if run.started and not run.ended:
                    run.inbox.attachment_lost(error)

    def _lose(self, session: AgentSession, error: RunwireError) -> None:
        """End ``session``'s attachment (the relay refused it ``error``): its live Runs are
        told (``Run._attachment_lost``) and its publishes fail with ``error`` from now on."""
        log.warning("session %s is lost to this worker: %s", session.session_id, error)
        session.error = error
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
        session.attached.set()
        session._closed.set()
        for run in list(session._runs.values()):
            run.inbox.attachment_lost(error)

    def _on_frame(self, frame: RelayFrame) -> None:
        if isinstance(frame, Deliver):
            session = self.sessions.get(frame.session_id)
            if session is not None:
                session._deliver(frame.entries)
        elif isinstance(frame, Dispatch):
            if self._on_dispatch is not None:
                self._on_dispatch(frame)
        elif isinstance(frame, Error):
            log.warning("relay error (session %s): %s", frame.session_id, frame.error.message)


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
    of the session's Runs (``RunOptions``; ``create_run`` may override each);
    ``max_in_flight`` is how many appends a ``pipe()`` may have
    unacknowledged; ``rollup_window`` (seconds, default 0: off) how long a ``pipe()``
    may hold tokens before it publishes them, so several ride one append. Raises
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
    link = _Link(
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
