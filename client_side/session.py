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
repeated id and acknowledges the original serial).

Refusals. ``on_refused_message(refused)`` is called with a ``Refused`` for
every ``refused`` entry that folds after the first attach (the refusals in the
history a session starts with, or pages with ``load_older``, are not news).
When the relay's check refuses a message this client published, the relay
stores the ``refused`` entry (which this client folds first) and answers the
publish with the check's error: ``published`` rejects with it and ``outcome``
resolves from the refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import anyio
import anyio.abc

from transport.asyncio.connection import CONNECTION_CLOSED, Connection
from transport.errors import (
    INTERNAL_ERROR,
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
    MessageEntry,
    Page,
    Publish,
    RelayFrame,
)
from transport.frames import Error as ErrorFrame
from transport.messages import UIMessage, new_id, user_message
from transport.outcomes import OutcomeRecord
from transport.tree import DeliveryEvent, Refusal

from .run import ClientRun, Delivery, Outcome, Published, Refused
from .view import Event, View

__all__ = ["MULTITASK_STRATEGIES", "ClientSession", "Multitask", "connect"]

log = logging.getLogger("runwire.client")

Multitask = Literal["alongside", "reject", "enqueue", "interrupt", "rollback"]
MULTITASK_STRATEGIES: tuple[str, ...] = ("alongside", "reject", "enqueue", "interrupt", "rollback")


def connect(
    url: str,
    session_id: str,
    *,
    token: str | None = None,
    client_id: str | None = None,
    agent: str = "default",
    history_limit: int = 100,
    on_refused_message: Callable[[Refused], object] | None = None,
) -> ClientSession:
    """A client session on ``session_id``; use it as ``async with connect(...) as session:``.

    Entering it connects and attaches (raising ``RunwireError``, for example
    ``CONNECTION_CLOSED`` when the relay cannot be reached or ``UNAUTHORIZED``);
    afterwards it reconnects by itself. ``agent`` names the agent that Runs
    started by ``send`` go to; ``history_limit`` is the size of the first page;
    ``on_refused_message(refused)`` is called the moment an input check (the
    relay's or the agent's) refuses a queued message of the session.
    """
    return ClientSession(
        url,
        session_id,
        token=token,
        client_id=client_id,
        agent=agent,
        history_limit=history_limit,
        on_refused_message=on_refused_message,
    )


class ClientSession:
    """One session on a relay, seen and driven by a client (see ``connect``)."""

    def __init__(
        self,
        url: str,
        session_id: str,
        *,
        token: str | None = None,
        client_id: str | None = None,
        agent: str = "default",
        history_limit: int = 100,
        on_refused_message: Callable[[Refused], object] | None = None,
    ) -> None:
        if not 1 <= history_limit <= 1000:
            raise RunwireError(VALIDATION_ERROR, "history_limit must be between 1 and 1000")
        self.url = url
        self.session_id = session_id
        self.agent = agent
        self.history_limit = history_limit
        self.view = View(session_id, self._fetch_older)
        self.view._hooks.append(self._on_event)
        self._conn = Connection(
            url,
            client_id=client_id,
            role="client",
            token=token,
            on_frame=self._on_frame,
            on_connect=self._on_connect,
        )
        self._epoch: str | None = None
        self._attaching = False
        self._held: list[dict[str, Any]] = []
        self._deliveries: dict[str, list[Delivery]] = {}
        self._state_callbacks: list[Callable[[str], None]] = []
        self._conn.on_state(self._on_conn_state)
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._closed = False
        self.on_refused_message = on_refused_message
        self._news_after: int | None = None  # refusals up to this serial are history
        self._refused_messages: dict[str, UIMessage] = {}  # what this client sent, refused

    # ------------------------------------------------------------ lifecycle --

    async def __aenter__(self) -> ClientSession:
        if self._entered:
            raise RuntimeError("a ClientSession can be entered once")
        self._entered = True
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self._conn.__aenter__()
        except BaseException:
            self._tg = None
            self._closed = True
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            self.view._close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; pending steering outcomes reject with ``CONNECTION_CLOSED``."""
        if self._closed:
            return
        self._closed = True
        await self._conn.aclose()
        error = RunwireError(CONNECTION_CLOSED, "the session was closed")
        for deliveries in self._deliveries.values():
            for delivery in deliveries:
                delivery._fail(error)
        self._deliveries.clear()
        self.view._close()
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    # -------------------------------------------------------------- state --

    @property
    def client_id(self) -> str | None:
        """The client id the relay stamps on this client's entries (known once connected)."""
        return self._conn.client_id

    @property
    def connected(self) -> bool:
        """True while the connection is up and attached."""
        return self._conn.connected

    @property
    def closed(self) -> bool:
        """True once the session was closed."""
        return self._closed

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

    async def send(self, message: str | UIMessage, *, multitask: str | None = None) -> ClientRun:
        """Start a Run with ``message``; returns once the relay acknowledged the prompt.

        ``multitask`` is ``"alongside"`` (the default: other active Runs go on);
        the other strategies are not supported yet and raise
        ``RunwireError(VALIDATION_ERROR)``, as does an unknown one. Raises the
        relay's ``RunwireError`` if it refuses the publish.
        """
        if multitask is not None and multitask != "alongside":
            if multitask in MULTITASK_STRATEGIES:
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"multitask={multitask!r} is not supported yet; "
                    "only 'alongside' (the default) is",
                    details={"multitask": multitask},
                )
            raise RunwireError(
                VALIDATION_ERROR,
                f"unknown multitask strategy {multitask!r}; expected one of "
                + ", ".join(MULTITASK_STRATEGIES),
                details={"multitask": multitask},
            )
        msg = self._as_message(message)
        if self.view.tree.message(msg.id) is not None:
            raise _reused(msg.id)
        run_id = new_id()
        tail = self.view.messages()
        entry = MessageEntry(
            id=msg.id,
            run_id=run_id,
            intent="prompt",
            agent=self.agent,
            message=msg,
            parent_id=tail[-1].message.id if tail else None,
        )
        ack = await self._publish(entry)
        if ack.duplicate and not self._is_own(msg.id, run_id, "prompt"):
            raise _reused(msg.id, ack.serial)
        return ClientRun(self, run_id, msg)

    async def cancel(self, run_id: str, *, reason: str | None = None) -> None:
        """Ask the agent of ``run_id`` to stop; returns once the relay acknowledged it.

        Cancelling a Run that has already ended does nothing (cancel-and-re-prompt
        races the Run's own end; that is not an error). Raises ``RunwireError``
        (``RUN_NOT_FOUND``, ...) when the relay refuses for another reason.
        """
        try:
            await self._publish(CancelEntry(id=new_id(), run_id=run_id, reason=reason))
        except RunwireError as exc:
            if exc.code != RUN_NOT_ACTIVE:
                raise

    def run(self, run_id: str) -> ClientRun:
        """A handle on a Run the view knows (one this client or another one started).

        Steering through it works as through the handle ``send`` returned.
        Raises ``RunwireError(RUN_NOT_FOUND)`` if the view has not seen the Run.
        """
        if self.view.run(run_id) is None:
            raise RunwireError(
                RUN_NOT_FOUND, f"the view has no run {run_id!r}", details={"run_id": run_id}
            )
        prompt = next(
            (
                vm.message
                for vm in self.view.messages()
                if vm.run_id == run_id and vm.intent == "prompt"
            ),
            None,
        )
        return ClientRun(self, run_id, prompt)

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

    async def _publish(self, entry: EntryBody) -> Ack:
        if self._closed:
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        reply = await self._conn.request(Publish(req=0, session_id=self.session_id, entry=entry))
        if not isinstance(reply, Ack) or reply.serial is None:
            raise RunwireError(PROTOCOL_ERROR, f"expected an ack with a serial, got {reply.type}")
        return reply

    def _start_delivery(self, delivery: Delivery, entry: MessageEntry) -> None:
        if self._closed or self._tg is None:
            delivery._fail(RunwireError(CONNECTION_CLOSED, "the session was closed"))
            return
        self._deliveries.setdefault(delivery.message.id, []).append(delivery)
        self._tg.start_soon(self._publish_delivery, delivery, entry)

    async def _publish_delivery(self, delivery: Delivery, entry: MessageEntry) -> None:
        try:
            ack = await self._publish(entry)
        except RunwireError as exc:
            record = self.view.tree.outcome(delivery.message.id)
            if record is not None and record.refused is not None:
                # The relay's check refused it: the refusal folded before this error.
                delivery.published._reject(exc)
                self._settle(delivery, record)
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
        if ack.duplicate:
            if not self._is_own(delivery.message.id, delivery.run_id, delivery.intent):
                delivery._fail(_reused(delivery.message.id, ack.serial))
                self._forget(delivery)
                return
            # Steered again: its outcome may have resolved before this handle existed.
            record = self.view.tree.outcome(delivery.message.id)
            if record is not None:
                self._settle(delivery, record)
        delivery.published._resolve(Published(serial=ack.serial))

    def _is_own(self, message_id: str, run_id: str, intent: str) -> bool:
        """After a duplicate ack: is the entry on the channel this one (a retry)?"""
        vm = self.view.tree.message(message_id)
        return vm is not None and vm.run_id == run_id and vm.intent == intent

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
        if self._closed:
            raise RunwireError(CONNECTION_CLOSED, "the session was closed")
        await self.view._wait_change()
        if self._closed:
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
                self.view._reset(reply.entries, reply.head, reply.has_older)
            else:
                self.view._resumed(reply.entries, reply.head)
            self._epoch = reply.epoch
            self.view._fold_live(self._held)
        finally:
            self._attaching = False
            self._held = []

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
        for fn in list(self._state_callbacks):
            try:
                fn(state)
            except Exception:
                log.exception("state callback failed")

    def __repr__(self) -> str:
        return f"<ClientSession {self.session_id!r} connected={self.connected}>"


def _reused(message_id: str, serial: int | None = None) -> RunwireError:
    details: dict[str, Any] = {"message_id": message_id}
    if serial is not None:
        details["serial"] = serial
    return RunwireError(
        VALIDATION_ERROR,
        f"message id {message_id!r} is already used in this session; send a new message",
        details=details,
    )
