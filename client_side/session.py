"""``connect()`` and ``ClientSession``: a client attached to one session on a relay.

Theory of operation
-------------------
A ``ClientSession`` owns one ``transport.asyncio.connection.Connection``
(role ``client``). Every time the connection comes up (the first time and
after each reconnect) its ``on_connect`` hook attaches to the session: the
first time without ``from_serial`` (the newest page of ``history_limit``
entries), afterwards from the newest serial the view holds, with the epoch the
relay named. The ``attached`` entries fold into the view; ``deliver`` frames
that arrive while an attach is in flight wait until its entries folded, and
serials the view holds are skipped, so the view never has a gap or a
duplicate. ``reset: true`` (the channel's history was lost) rebuilds the view
from the page.

Publishing (``send``, ``cancel``, steering) goes through ``Connection.request``,
which re-sends after a reconnect; entry ids make that safe (the relay drops a
repeated id and acknowledges the original serial). A publish refused
``RATE_LIMITED`` or ``STORE_UNAVAILABLE`` goes again there too, in the order the
publishes were made, for up to ``rate_limit_wait`` / ``store_wait`` seconds. The
order is the user's: steering (and the cancel of an aborted ``signal``), published from a
task, takes its place with ``Connection.reserve()`` when the call is made, so a
``cancel()`` awaited right after a ``steer()`` is stored after it. The coroutines
(``send``, ``cancel``, ``resume``, ``cancel_pause``) take theirs when they start running
(awaited, or when the task made of them starts), not when the coroutine object is made:
one held unawaited must not hold up every publish after it.

Multitasking. ``send(message, multitask=...)`` names the strategy; the relay
decides atomically and refuses with ``THREAD_BUSY`` / ``THREAD_ACCESS_DENIED``
(raised by ``send``). A prompt that waits (``enqueue``, ``interrupt``,
``rollback``) names no parent unless asked: the tree places it when its turn
comes (after what the Runs before it said; beside the interrupted turn for
``rollback``). A cancel the agent refuses comes back as a ``cancel_denied``
entry; ``cancel(..., wait=True)`` and ``ClientRun.cancel()`` raise
``CANCEL_DENIED`` for it.

Refusals. ``on_refused_message(refused)`` is called with a ``Refused`` for
every ``refused`` entry that folds after the first attach (the refusals in the
history a session starts with, or pages with ``load_older``, are not news).
When the relay's check refuses a message this client published, the relay
stores the ``refused`` entry (which this client folds first) and answers the
publish with the check's error: ``published`` rejects with it and ``outcome``
resolves from the refusal.

Write-only. ``connect(..., subscribe=False)`` never attaches: it is for a token
that grants rights in the session but not ``subscribe`` (``publish`` alone, say:
a back end that posts prompts), whose publishes the relay takes unattached
(docs/protocol.md, ``publish``). ``send``, steering, ``cancel``, ``resume``
and ``cancel_pause`` publish as usual and resolve from the relay's ack (or
raise its error); a steering ``Delivery``'s ``published`` resolves with the
serial, its ``outcome`` rejects ``NOT_ATTACHED`` at once. Whatever reads the
session (the view, ``ClientRun.result()`` / ``status`` / ``queued`` /
``refused``, ``cancel(wait=True)``, ``paused_run()``) raises
``RunwireError(NOT_ATTACHED)`` at once instead of waiting for entries that
never come. Without a view a prompt names no parent (the relay places it at the
tip of the conversation) and a repeated message id cannot be told from a
re-sent publish: pass fresh message ids. A token that does grant ``subscribe``
there gets ``NOT_ATTACHED`` for its publishes (the relay wants it attached).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from ssl import SSLContext
from typing import Any

import anyio
import anyio.abc

from transport import tracing
from transport.asyncio.abort import AbortSignal
from transport.asyncio.connection import (
    CONNECTION_CLOSED,
    RATE_LIMIT_WAIT,
    STORE_WAIT,
    Connection,
    TokenProvider,
)
from transport.asyncio.tasks import Background
from transport.errors import (
    ABORTED,
    CANCEL_DENIED,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    NOT_ATTACHED,
    PROTOCOL_ERROR,
    RUN_NOT_ACTIVE,
    RUN_NOT_FOUND,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import (
    Ack,
    Attach,
    Attached,
    CancelEntry,
    Deliver,
    EntryBody,
    History,
    InterruptEntry,
    MessageEntry,
    Multitask,
    Page,
    Publish,
    RelayFrame,
    ThreadAccess,
)
from transport.frames import Error as ErrorFrame
from transport.interrupts import PausedRun
from transport.keepalive import DEFAULT_KEEPALIVE_TIMEOUT
from transport.messages import UIMessage, new_id, user_message
from transport.outcomes import OutcomeRecord, ended_before_stored
from transport.runs import MULTITASK_STRATEGIES, run_ended
from transport.tree import CancelDenial, DeliveryEvent, Refusal

from .run import ClientRun, Delivery, Outcome, Published, Refused
from .view import Event, View, _write_only_error

__all__ = ["MULTITASK_STRATEGIES", "ClientSession", "Multitask", "connect"]

log = logging.getLogger("runwire.client")

OWN_WAIT = 30.0
"""How long a duplicate ack waits for its entry to reach the view (``_is_own``)."""


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
        if not 1 <= history_limit <= 1000:
            raise RunwireError(VALIDATION_ERROR, "history_limit must be between 1 and 1000")
        if not subscribe and on_refused_message is not None:
            raise RunwireError(
                VALIDATION_ERROR,
                "a session connected with subscribe=False never sees refusals:"
                " on_refused_message is not taken (a refused publish raises its error)",
            )
        self.url = url
        self.session_id = session_id
        self.agent = agent
        self.history_limit = history_limit
        self.subscribe = subscribe
        """False for a write-only session (``connect(..., subscribe=False)``)."""
        self.view = View(session_id, self._fetch_older)
        self.view._write_only = not subscribe
        self.view._hooks.append(self._on_event)
        self._conn = Connection(
            url,
            client_id=client_id,
            role="client",
            token=token,
            token_provider=token_provider,
            on_frame=self._on_frame,
            on_connect=self._on_connect,
            rate_limit_wait=rate_limit_wait,
            store_wait=store_wait,
            keepalive_timeout=keepalive_timeout,
            ssl=ssl,
        )
        self._epoch: str | None = None
        self._resets = 0  # how many resets rebuilt the view (a Run one lost fails its waits)
        self._attaching = False
        self._held: list[dict[str, Any]] = []
        self._deliveries: dict[str, list[Delivery]] = {}
        self._state_callbacks: list[Callable[[str], None]] = []
        self._conn.on_state(self._on_conn_state)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None  # what ``async with`` entered
        self._background = Background()  # its tasks; aclose cancels them
        self._entered = False
        self._closed = False
        self._ended: RunwireError | None = None  # the relay ended the session for good
        self.on_refused_message = on_refused_message
        self._news_after: int | None = None  # refusals up to this serial are history
        self._refused_messages: dict[str, UIMessage] = {}  # what this client sent, refused

    # ------------------------------------------------------------ lifecycle --

    async def __aenter__(self) -> ClientSession:
        if self._entered:
            raise RuntimeError("a ClientSession can be entered once")
        self._entered = True
        stack = AsyncExitStack()
        try:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            await stack.enter_async_context(self._conn)
        except BaseException:
            self._tg = None
            self._closed = True
            try:
                await stack.aclose()
            finally:
                self.view._close()
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
            await self._conn.aclose()
        finally:
            error = RunwireError(CONNECTION_CLOSED, "the session was closed")
            for deliveries in self._deliveries.values():
                for delivery in deliveries:
                    delivery._fail(error)
            self._deliveries.clear()
            self.view._close()

    def _start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` in the session's task group until it ends or ``aclose()``."""
        assert self._tg is not None
        self._background.start_soon(self._tg, fn, *args)

    # -------------------------------------------------------------- state --

    @property
    def client_id(self) -> str | None:
        """The client id the relay stamps on this client's entries (known once connected)."""
        return self._conn.client_id

    @property
    def connected(self) -> bool:
        """True while the connection is up and attached (up, for a write-only session)."""
        return self._conn.connected

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

        ``multitask`` says what the Run does to Runs going on in the session
        (``None``: the relay's default, itself ``"alongside"`` unless set); a
        paused Run whose questions are settled (answered, declined, or moved on
        by this very prompt) is about to resume, and counts as going on:

        * ``"alongside"``: they go on side by side;
        * ``"reject"``: raises ``RunwireError(THREAD_BUSY)`` while one goes on;
        * ``"enqueue"``: the Run is ``queued`` until they settle, then starts;
        * ``"interrupt"``: they are cancelled, then the Run starts;
        * ``"rollback"``: as interrupt, and the interrupted turn goes onto a
          branch of its own: the conversation continues from before it.

        Any strategy but alongside raises ``THREAD_ACCESS_DENIED`` while another
        user's Run goes on, unless the session is shared (its first prompt sent
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
        if multitask is not None and multitask not in MULTITASK_STRATEGIES:
            raise RunwireError(
                VALIDATION_ERROR,
                f"unknown multitask strategy {multitask!r}; expected one of "
                + ", ".join(MULTITASK_STRATEGIES),
                details={"multitask": multitask},
            )
        if signal is not None and signal.aborted:
            raise RunwireError(ABORTED, "the send's signal was aborted; nothing was sent")
        msg = self._as_message(message)
        if self.subscribe and self.view.tree.message(msg.id) is not None:
            raise _reused(msg.id)
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
        if tracing.ENABLED:
            carried = dict(msg.metadata)
            tracing.inject(carried)
            if carried != msg.metadata:
                msg = msg.model_copy(update={"metadata": carried})
        welcome = self._conn.welcome
        effective = multitask or (welcome.multitask if welcome else None) or "alongside"
        if self.subscribe and parent_id is None and effective in ("alongside", "reject"):
            tail = self.view.messages()
            parent_id = tail[-1].message.id if tail else None
        entry = MessageEntry(
            id=msg.id,
            run_id=run_id,
            intent="prompt",
            agent=self.agent,
            message=msg,
            parent_id=parent_id,
            multitask=multitask,
            parent_run_id=parent_run_id,
            thread_access=thread_access,
            activate=activate,
        )
        ack = await self._publish(entry)
        assert ack.serial is not None  # _publish checked it
        if (
            ack.duplicate
            and self.subscribe
            and not await self._is_own(msg.id, run_id, "prompt", ack.serial)
        ):
            raise _reused(msg.id, ack.serial)
        if signal is not None:
            signal.add_callback(lambda _reason: self._cancel_soon(run_id))
        return ClientRun(self, run_id, msg)

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
            raise _write_only_error(self.session_id, "cancel(wait=True)")
        cancel = CancelEntry(id=new_id(), run_id=run_id, reason=reason)
        resets = self._resets
        try:
            await self._publish(cancel)
        except RunwireError as exc:
            if exc.code != RUN_NOT_ACTIVE:
                raise
            return
        if wait:
            await self._settled(run_id, cancel.id, timeout, resets)

    async def resume(self, run_id: str, responses: dict[str, Any]) -> None:
        """Answer questions a paused Run waits on (``{interrupt_id: answer}``).

        Returns once the relay took the answers; once every question is
        answered (or expired) the Run goes on on a worker. Questions left out
        keep it paused; ``responses={}`` once the rest expired lets it go on
        (each expired question answers its call ``Nobody answered ...``).
        Raises ``RunwireError``: ``VALIDATION_ERROR`` for a question the Run
        does not wait on or one already answered,
        ``INTERRUPT_ANSWER_INVALID`` (``details["interrupt_id"]``) for an
        answer that breaks its schema, ``INTERRUPT_EXPIRED`` after
        ``expires_at``; nothing is taken then.
        """
        entry = InterruptEntry(id=new_id(), run_id=run_id, status="resumed", responses=responses)
        await self._publish(entry)

    def paused_run(self) -> PausedRun | None:
        """The oldest Run of the session that waits on questions, with them; None if none.

        Raises ``RunwireError(NOT_ATTACHED)`` for a write-only session.
        """
        if not self.subscribe:
            raise _write_only_error(self.session_id, "paused_run()")
        for info in self.view.runs():
            questions = self.view.tree.interrupts(info.run_id)
            if questions:
                return PausedRun(info.run_id, questions)
        return None

    async def cancel_pause(self, run_id: str, *, reason: str | None = None) -> None:
        """End a pause without answers: each waiting call gets "The user declined to answer ...".

        Raises ``RunwireError(VALIDATION_ERROR)`` when the Run waits on nothing.
        """
        entry = InterruptEntry(id=new_id(), run_id=run_id, status="declined", reason=reason)
        await self._publish(entry)

    async def _settled(
        self, run_id: str, cancel_id: str, timeout: float | None, resets: int
    ) -> None:
        """Wait until the Run ends; raise ``CANCEL_DENIED`` if cancel ``cancel_id`` is refused,
        ``EPOCH_MISMATCH`` if a reset after ``resets`` lost the Run."""
        with anyio.move_on_after(timeout):
            while True:
                denial = self.view.tree.cancel_denial(cancel_id)
                if denial is not None:
                    raise _denied(denial)
                info = self.view.run(run_id)
                if info is not None and run_ended(info.status):
                    return
                self._check_lost(run_id, resets)
                await self._wait_change()

    def _check_lost(self, run_id: str, resets: int) -> None:
        """Raise ``EPOCH_MISMATCH`` if a reset since ``resets`` left the view without the Run."""
        if self._resets > resets and self.view.run(run_id) is None:
            raise RunwireError(
                EPOCH_MISMATCH,
                "the relay lost the session's history; how the Run ended is unknown",
                details={"run_id": run_id},
            )

    def _cancel_soon(self, run_id: str) -> None:
        info = self.view.run(run_id) if self.subscribe else None
        if self._closed or self._tg is None or (info is not None and run_ended(info.status)):
            return
        # In the lane now, when the signal fired: after what the user did before, before
        # what they do next.
        self._start_soon(self._cancel_quietly, run_id, self._conn.reserve())

    async def _cancel_quietly(self, run_id: str, slot: int) -> None:
        cancel = CancelEntry(id=new_id(), run_id=run_id, reason="the send's signal was aborted")
        try:
            await self._publish(cancel, slot)
        except RunwireError as exc:
            if exc.code != RUN_NOT_ACTIVE:  # it ended meanwhile: nothing to cancel
                log.warning("cancelling run %s after its signal fired failed: %s", run_id, exc)

    def run(self, run_id: str) -> ClientRun:
        """A handle on a Run the view knows (one this client or another one started).

        Steering through it works as through the handle ``send`` returned.
        Raises ``RunwireError(RUN_NOT_FOUND)`` if the view has not seen the Run.
        A write-only session has no view: it returns a handle on any id (with
        no ``prompt``), and the relay refuses what does not fit the Run.
        """
        if not self.subscribe:
            return ClientRun(self, run_id, None)
        if self.view.run(run_id) is None:
            raise RunwireError(
                RUN_NOT_FOUND, f"the view has no run {run_id!r}", details={"run_id": run_id}
            )
        # The tree's, not the active branch's: a fork above the Run may have left it on
        # another branch (and a queued Run's prompt is held out of the conversation).
        prompt = self.view.tree.prompt(run_id)
        return ClientRun(self, run_id, prompt.message if prompt is not None else None)

    # ----------------------------------------------------------- internal --

    @staticmethod
    def _as_message(message: str | UIMessage) -> UIMessage:
        if isinstance(message, UIMessage):
            return message
        if isinstance(message, str):
            return user_message(message)
        raise RunwireError(
            VALIDATION_ERROR,
            f"a message is a str or a UIMessage, not {type(message).__name__}",
        )

    async def _publish(self, entry: EntryBody, slot: int | None = None) -> Ack:
        """Publish ``entry`` in its place in the connection's lane: ``slot`` (taken with
        ``Connection.reserve()`` when the user acted, for a publish made from a task), or
        now."""
        if self._closed:
            if slot is not None:
                self._conn.release(slot)
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        try:
            reply = await self._conn.request(
                Publish(req=0, session_id=self.session_id, entry=entry), slot=slot
            )
        except RunwireError as exc:
            if exc.code == NOT_ATTACHED and not self.subscribe:
                raise _write_only_refused(self.session_id, exc) from None
            raise
        if not isinstance(reply, Ack) or reply.serial is None:
            raise RunwireError(PROTOCOL_ERROR, f"expected an ack with a serial, got {reply.type}")
        return reply

    def _start_delivery(self, delivery: Delivery, entry: MessageEntry) -> None:
        if self.closed or self._tg is None:
            delivery._fail(self._ended or RunwireError(CONNECTION_CLOSED, "the session was closed"))
            return
        if not self.subscribe:
            # The outcome is told by entries a write-only session never sees.
            delivery.outcome._reject(_write_only_error(self.session_id, "Delivery.outcome"))
        self._deliveries.setdefault(delivery.message.id, []).append(delivery)
        # Its place among this connection's publishes is taken now, as the user acts: a
        # cancel (or send, or steer) made right after is stored after it.
        self._start_soon(self._publish_delivery, delivery, entry, self._conn.reserve())

    async def _publish_delivery(self, delivery: Delivery, entry: MessageEntry, slot: int) -> None:
        try:
            ack = await self._publish(entry, slot)
        except RunwireError as exc:
            if not self.subscribe:
                delivery.published._reject(exc)
                self._forget(delivery)
                return
            record = self.view.tree.outcome(delivery.message.id)
            if record is not None and record.refused is not None:
                # The relay's check refused it: the refusal folded before this error.
                delivery.published._reject(exc)
                self._settle(delivery, record)
                return
            late = ended_before_stored(delivery.message.id, delivery.run_id, exc.code, exc.details)
            if late is not None:
                # The Run ended before the relay got it: never published, never seen.
                delivery.published._reject(exc)
                self._settle(delivery, late)
                return
            delivery._fail(exc)
            self._forget(delivery)
            return
        except Exception as exc:  # never let a bug here cancel the user's code in our task group
            log.exception("publishing a steering message failed")
            delivery._fail(RunwireError(INTERNAL_ERROR, f"publishing failed: {exc!r}"))
            self._forget(delivery)
            return
        assert ack.serial is not None
        if not self.subscribe:
            delivery.published._resolve(Published(serial=ack.serial))
            self._forget(delivery)
            return
        if ack.duplicate:
            own = await self._is_own(
                delivery.message.id, delivery.run_id, delivery.intent, ack.serial
            )
            if not own:
                delivery._fail(_reused(delivery.message.id, ack.serial))
                self._forget(delivery)
                return
            # Steered again: its outcome may have resolved before this handle existed.
            record = self.view.tree.outcome(delivery.message.id)
            if record is not None:
                self._settle(delivery, record)
        delivery.published._resolve(Published(serial=ack.serial))

    async def _is_own(self, message_id: str, run_id: str, intent: str, serial: int) -> bool:
        """After a duplicate ack: is the entry stored at ``serial`` this one (a retry)?

        The first try may be stored but not yet delivered: its ack was lost, for example
        in a Redis failover, and the retry's ack came first. So until the view holds
        ``serial`` (or ``OWN_WAIT`` seconds pass) it waits for the entry to arrive.
        """
        with anyio.move_on_after(OWN_WAIT):
            while True:
                vm = self.view.tree.message(message_id)
                if vm is not None:
                    return vm.run_id == run_id and vm.intent == intent
                newest = self.view.newest_serial
                if newest is not None and newest >= serial:
                    return False
                await self._wait_change()
        return False

    def _forget(self, delivery: Delivery) -> None:
        deliveries = self._deliveries.get(delivery.message.id)
        if deliveries is not None and delivery in deliveries:
            deliveries.remove(delivery)
            if not deliveries:
                del self._deliveries[delivery.message.id]

    def _settle(self, delivery: Delivery, record: OutcomeRecord) -> None:
        refused = RunwireError.from_wire(record.refused) if record.refused else None
        if refused is not None:
            self._refused_messages[delivery.message.id] = delivery.message
        delivery.outcome._resolve(
            Outcome(
                consumed=record.consumed,
                run_terminal_reason=record.run_terminal_reason,
                refused=refused,
            )
        )
        self._forget(delivery)

    def _on_event(self, event: Event) -> None:
        if not isinstance(event, DeliveryEvent):
            return
        record = event.outcome
        for delivery in list(self._deliveries.get(record.message_id, ())):
            if delivery.run_id == record.run_id:
                self._settle(delivery, record)
        if record.refused is not None and self.on_refused_message is not None:
            refusal = self._refusal(record.message_id)
            if refusal is not None and (
                self._news_after is None or refusal.serial > self._news_after
            ):
                try:
                    self.on_refused_message(self._refused(refusal))
                except Exception:
                    log.exception("on_refused_message failed")

    def _refusal(self, message_id: str) -> Refusal | None:
        for refusal in reversed(self.view.tree.refusals()):
            if refusal.message_id == message_id:
                return refusal
        return None

    def _refused(self, refusal: Refusal) -> Refused:
        """The client's record of a refusal, with the message if this device has it."""
        message = self._refused_messages.get(refusal.message_id)
        if message is None:
            vm = self.view.tree.message(refusal.message_id)
            message = vm.message if vm is not None else None
        return Refused(
            message_id=refusal.message_id,
            run_id=refusal.run_id,
            intent=refusal.intent,
            error=RunwireError.from_wire(refusal.error),
            message=message,
        )

    async def _wait_change(self) -> None:
        if self.closed:
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        await self.view._wait_change()
        if self.closed:
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")

    async def _fetch_older(self, before: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        if self._closed:
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        reply = await self._conn.request(
            History(req=0, session_id=self.session_id, before=before, limit=limit)
        )
        if not isinstance(reply, Page):
            raise RunwireError(PROTOCOL_ERROR, f"expected a page, got {reply.type}")
        return reply.entries, reply.has_older

    async def _on_connect(self, conn: Connection) -> None:
        if not self.subscribe:
            return  # write-only: publishes go unattached
        first = self._epoch is None
        attach = Attach(
            req=0,
            session_id=self.session_id,
            limit=self.history_limit,
            from_serial=None if first else self.view.newest_serial,
            epoch=self._epoch,
        )
        self._attaching = True
        self._held = []
        try:
            reply = await conn.request(attach, wait_ready=False)
            if not isinstance(reply, Attached):
                raise RunwireError(PROTOCOL_ERROR, f"expected attached, got {reply.type}")
            # No await from here on: deliver frames read meanwhile are held, then folded.
            if first:
                self._news_after = reply.head
                self.view._attached(reply.entries, reply.head, reply.has_older)
            elif reply.reset:
                log.warning("session %s: the relay lost history; rebuilding", self.session_id)
                self._news_after = reply.head
                self._resets += 1
                self.view._reset(reply.entries, reply.head, reply.has_older)
                self._after_reset()
            else:
                self.view._resumed(reply.entries, reply.head)
            self._epoch = reply.epoch
            self.view._fold_live(self._held)
        finally:
            self._attaching = False
            self._held = []

    def _after_reset(self) -> None:
        """Settle the outcomes a rebuilt view can tell; reject those it never can.

        A message whose publish was acknowledged and whose Run the rebuilt view
        does not know (the relay lost the history, or the Run is older than
        the page it sent) would never resolve: its outcome rejects
        ``EPOCH_MISMATCH``, as the seed's clients reject pending outcomes when
        continuity is lost. A publish still in flight is re-sent and answered.
        """
        for deliveries in list(self._deliveries.values()):
            for delivery in list(deliveries):
                if not delivery.published.done():
                    continue
                record = self.view.tree.outcome(delivery.message.id)
                if record is not None:
                    self._settle(delivery, record)
                elif self.view.run(delivery.run_id) is None:
                    delivery.outcome._reject(_continuity_lost(delivery))
                    self._forget(delivery)

    def _on_frame(self, frame: RelayFrame) -> None:
        try:
            if isinstance(frame, Deliver):
                if frame.session_id != self.session_id:
                    return
                if self._attaching:
                    self._held.extend(frame.entries)
                else:
                    self.view._fold_live(frame.entries)
            elif isinstance(frame, ErrorFrame):
                log.warning(
                    "relay reported on session %s: %s %s",
                    frame.session_id,
                    frame.error.code,
                    frame.error.message,
                )
        except Exception:  # a bug here must not take the connection's reader down
            log.exception("handling a %s frame failed", frame.type)

    def _on_conn_state(self, state: str) -> None:
        error = self._conn.error
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
        for deliveries in self._deliveries.values():
            for delivery in deliveries:
                delivery._fail(error)
        self._deliveries.clear()
        self.view._close()

    def __repr__(self) -> str:
        mode = "" if self.subscribe else " write-only"
        return f"<ClientSession {self.session_id!r}{mode} connected={self.connected}>"


def _reused(message_id: str, serial: int | None = None) -> RunwireError:
    details: dict[str, Any] = {"message_id": message_id}
    if serial is not None:
        details["serial"] = serial
    return RunwireError(
        VALIDATION_ERROR,
        f"message id {message_id!r} is already used in this session; send a new message",
        details=details,
    )


def _write_only_refused(session_id: str, exc: RunwireError) -> RunwireError:
    """The relay wants a write-only session's publish attached: say why."""
    return RunwireError(
        NOT_ATTACHED,
        f"the relay refused a publish to {session_id!r} without an attach: a session"
        " connected with subscribe=False needs a token that grants rights in that session"
        " but not 'subscribe' (a token that may read it must attach: subscribe=True)",
        details={**exc.details, "session_id": session_id, "subscribe": False},
    )


def _continuity_lost(delivery: Delivery) -> RunwireError:
    return RunwireError(
        EPOCH_MISMATCH,
        "the relay lost the session's history; whether the agent saw this message is unknown",
        details={"run_id": delivery.run_id, "message_id": delivery.message.id},
    )


def _denied(denial: CancelDenial) -> RunwireError:
    return RunwireError(
        CANCEL_DENIED,
        denial.reason or "the agent refused the cancel",
        details={
            "run_id": denial.run_id,
            "cancel_id": denial.cancel_id,
            "client_id": denial.client_id,
            "user_id": denial.user_id,
        },
    )
