"""``Deliveries``: the steering a client published, and the outcomes still to settle.

A ``ClientRun`` talks to its session through this object (the ``RunHost``
interface of ``client_side._run``). It publishes each steering message from a
task in the place it took when the user acted. It settles each ``Delivery``
from the view's ``DeliveryEvent`` for its message id, or fails it when the
relay refuses it or the session closes.

It also keeps what refusals need: which refusals are news (those folded after
the first attach) and the content of this client's refused messages.

After a reset it settles what the rebuilt view can tell. It rejects
``EPOCH_MISMATCH`` for an acknowledged message whose Run the rebuilt view does
not know, because that outcome can never resolve.

docs/explanation/steering-outcomes.md explains the outcomes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from transport._mirror import Attachment
from transport._outcomes import OutcomeRecord, ended_before_stored
from transport._tree import DeliveryEvent, Refusal
from transport.asyncio._connection import CONNECTION_CLOSED
from transport.asyncio._view import Event, View, ViewFeed, write_only_error
from transport.errors import (
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    NOT_ATTACHED,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import Ack, EntryBody, MessageEntry
from transport.messages import UIMessage

from ._run import Delivery, Outcome, Published, Refused

__all__ = ["Deliveries", "reused_error", "write_only_refused"]

log = logging.getLogger("runwire.client")

OWN_WAIT = 30.0
"""How long a duplicate ack waits for its entry to reach the view (``is_own``)."""

Publish = Callable[[EntryBody, "int | None"], Awaitable[Ack]]
Spawn = Callable[..., None]
Cancel = Callable[..., Awaitable[None]]


class Deliveries:
    """A session's steering deliveries, refusals and resets (a ``ClientRun``'s ``RunHost``)."""

    def __init__(
        self,
        feed: ViewFeed,
        *,
        subscribe: bool,
        publish: Publish,
        spawn: Spawn,
        running: Callable[[], bool],
        reserve: Callable[[], int],
        cancel: Cancel,
        closed: Callable[[], RunwireError | None],
        on_refused_message: Callable[[Refused], object] | None,
    ) -> None:
        self._feed = feed
        self._subscribe = subscribe
        self._publish = publish
        self._spawn = spawn
        self._running = running
        self._reserve = reserve
        self._cancel = cancel
        self._closed = closed
        self.on_refused_message = on_refused_message
        self._pending: dict[str, list[Delivery]] = {}
        self._resets = 0  # how many resets rebuilt the view (a Run one lost fails its waits)
        self._news_after: int | None = None  # refusals up to this serial are history
        self._refused_messages: dict[str, UIMessage] = {}  # what this client sent, refused
        feed.event_hooks.append(self._on_event)

    # ----------------------------------------------------- the RunHost side --

    @property
    def session_id(self) -> str:
        return self._feed.mirror.session_id

    @property
    def subscribe(self) -> bool:
        return self._subscribe

    @property
    def view(self) -> View:
        return self._feed.view

    @property
    def resets(self) -> int:
        """How many resets rebuilt the view so far."""
        return self._resets

    async def cancel(
        self, run_id: str, *, reason: str | None, wait: bool, timeout: float | None
    ) -> None:
        await self._cancel(run_id, reason=reason, wait=wait, timeout=timeout)

    def start(self, delivery: Delivery, entry: MessageEntry) -> None:
        """Publish a steering message from a task, in the place it takes now."""
        error = self._closed()
        if error is None and not self._running():
            error = RunwireError(CONNECTION_CLOSED, "the session was closed")
        if error is not None:
            delivery.fail(error)
            return
        if not self._subscribe:
            # The outcome is told by entries a write-only session never sees.
            delivery.outcome.reject(write_only_error(self.session_id, "Delivery.outcome"))
        self._pending.setdefault(delivery.message.id, []).append(delivery)
        # Its place among this connection's publishes is taken now, as the user acts: a
        # cancel (or send, or steer) made right after is stored after it.
        self._spawn(self._publish_delivery, delivery, entry, self._reserve())

    def check_lost(self, run_id: str, resets: int) -> None:
        """Raise ``EPOCH_MISMATCH`` if a reset since ``resets`` left the view without the Run."""
        if self._resets > resets and self._feed.view.run(run_id) is None:
            raise RunwireError(
                EPOCH_MISMATCH,
                "the relay lost the session's history; how the Run ended is unknown",
                details={"run_id": run_id},
            )

    async def wait_change(self) -> None:
        """Wait for the view's next change; raise the session's error once it is closed."""
        error = self._closed()
        if error is not None:
            raise error
        await self._feed.wait_change()
        error = self._closed()
        if error is not None:
            raise error

    def refused(self, refusal: Refusal) -> Refused:
        """The client's record of a refusal, with the message if this device has it."""
        message = self._refused_messages.get(refusal.message_id)
        if message is None:
            vm = self._feed.mirror.tree.message(refusal.message_id)
            message = vm.message if vm is not None else None
        return Refused(
            message_id=refusal.message_id,
            run_id=refusal.run_id,
            intent=refusal.intent,
            error=RunwireError.from_wire(refusal.error),
            message=message,
        )

    # ---------------------------------------------------- the session side --

    async def is_own(self, message_id: str, run_id: str, intent: str, serial: int) -> bool:
        """After a duplicate ack: is the entry stored at ``serial`` this one (a retry)?

        The first try may be stored but not yet delivered: its ack was lost, for example
        in a Redis failover, and the retry's ack came first. So until the view holds
        ``serial`` (or ``OWN_WAIT`` seconds pass) it waits for the entry to arrive.
        """
        mirror = self._feed.mirror
        with anyio.move_on_after(OWN_WAIT):
            while True:
                vm = mirror.tree.message(message_id)
                if vm is not None:
                    return vm.run_id == run_id and vm.intent == intent
                newest = mirror.newest_serial
                if newest is not None and newest >= serial:
                    return False
                await self.wait_change()
        return False

    def attached(self, attachment: Attachment) -> None:
        """Report an attach to the view's listeners (``ViewFeed.request_attach``).

        Refusals in its page are history, not news. After a reset, the
        deliveries the rebuilt view can tell settle before the held entries fold.
        """
        if attachment.first or attachment.reset:
            self._news_after = attachment.head
        if attachment.reset:
            self._resets += 1
        self._feed.take(attachment.folded)
        self._feed.dispatch(attachment.removed)
        if attachment.reset:
            self._after_reset()
        self._feed.take(attachment.held)

    def _after_reset(self) -> None:
        """Settle the outcomes a rebuilt view can tell; reject those it never can.

        A message whose publish was acknowledged and whose Run the rebuilt view
        does not know would never resolve: its outcome rejects
        ``EPOCH_MISMATCH``. A publish still in flight is re-sent and answered.
        """
        tree = self._feed.mirror.tree
        for deliveries in list(self._pending.values()):
            for delivery in list(deliveries):
                if not delivery.published.done():
                    continue
                record = tree.outcome(delivery.message.id)
                if record is not None:
                    self._settle(delivery, record)
                elif tree.run(delivery.run_id) is None:
                    delivery.outcome.reject(_continuity_lost(delivery))
                    self._forget(delivery)

    def fail_all(self, error: RunwireError) -> None:
        """The session closed or ended: every delivery still waiting fails with ``error``."""
        for deliveries in self._pending.values():
            for delivery in deliveries:
                delivery.fail(error)
        self._pending.clear()

    # ------------------------------------------------------------ internal --

    async def _publish_delivery(self, delivery: Delivery, entry: MessageEntry, slot: int) -> None:
        try:
            ack = await self._publish(entry, slot)
        except RunwireError as exc:
            self._publish_failed(delivery, exc)
            return
        except Exception as exc:  # never let a bug here cancel the user's code in our task group
            log.exception("publishing a steering message failed")
            delivery.fail(RunwireError(INTERNAL_ERROR, f"publishing failed: {exc!r}"))
            self._forget(delivery)
            return
        assert ack.serial is not None
        if not self._subscribe:
            delivery.published.resolve(Published(serial=ack.serial))
            self._forget(delivery)
            return
        if ack.duplicate:
            own = await self.is_own(
                delivery.message.id, delivery.run_id, delivery.intent, ack.serial
            )
            if not own:
                delivery.fail(reused_error(delivery.message.id, ack.serial))
                self._forget(delivery)
                return
            # Steered again: its outcome may have resolved before this handle existed.
            record = self._feed.mirror.tree.outcome(delivery.message.id)
            if record is not None:
                self._settle(delivery, record)
        delivery.published.resolve(Published(serial=ack.serial))

    def _publish_failed(self, delivery: Delivery, exc: RunwireError) -> None:
        if not self._subscribe:
            delivery.published.reject(exc)
            self._forget(delivery)
            return
        record = self._feed.mirror.tree.outcome(delivery.message.id)
        if record is not None and record.refused is not None:
            # The relay's check refused it: the refusal folded before this error.
            delivery.published.reject(exc)
            self._settle(delivery, record)
            return
        late = ended_before_stored(delivery.message.id, delivery.run_id, exc.code, exc.details)
        if late is not None:
            # The Run ended before the relay got it: never published, never seen.
            delivery.published.reject(exc)
            self._settle(delivery, late)
            return
        delivery.fail(exc)
        self._forget(delivery)

    def _forget(self, delivery: Delivery) -> None:
        deliveries = self._pending.get(delivery.message.id)
        if deliveries is not None and delivery in deliveries:
            deliveries.remove(delivery)
            if not deliveries:
                del self._pending[delivery.message.id]

    def _settle(self, delivery: Delivery, record: OutcomeRecord) -> None:
        refused = RunwireError.from_wire(record.refused) if record.refused else None
        if refused is not None:
            self._refused_messages[delivery.message.id] = delivery.message
        delivery.outcome.resolve(
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
        for delivery in list(self._pending.get(record.message_id, ())):
            if delivery.run_id == record.run_id:
                self._settle(delivery, record)
        if record.refused is not None and self.on_refused_message is not None:
            refusal = self._refusal(record.message_id)
            if refusal is not None and (
                self._news_after is None or refusal.serial > self._news_after
            ):
                try:
                    self.on_refused_message(self.refused(refusal))
                except Exception:
                    log.exception("on_refused_message failed")

    def _refusal(self, message_id: str) -> Refusal | None:
        for refusal in reversed(self._feed.mirror.tree.refusals()):
            if refusal.message_id == message_id:
                return refusal
        return None


def reused_error(message_id: str, serial: int | None = None) -> RunwireError:
    """The error for a message id this session already holds for another message."""
    details: dict[str, Any] = {"message_id": message_id}
    if serial is not None:
        details["serial"] = serial
    return RunwireError(
        VALIDATION_ERROR,
        f"message id {message_id!r} is already used in this session; send a new message",
        details=details,
    )


def _continuity_lost(delivery: Delivery) -> RunwireError:
    return RunwireError(
        EPOCH_MISMATCH,
        "the relay lost the session's history; whether the agent saw this message is unknown",
        details={"run_id": delivery.run_id, "message_id": delivery.message.id},
    )


def write_only_refused(session_id: str, exc: RunwireError) -> RunwireError:
    """The relay wants a write-only session's publish attached: say why."""
    return RunwireError(
        NOT_ATTACHED,
        f"the relay refused a publish to {session_id!r} without an attach: a session"
        " connected with subscribe=False needs a token that grants rights in that session"
        " but not 'subscribe' (a token that may read it must attach: subscribe=True)",
        details={**exc.details, "session_id": session_id, "subscribe": False},
    )
