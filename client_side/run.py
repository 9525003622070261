"""``ClientRun``: a client's handle on one Run, and what steering it returns.

``session.send()`` publishes a prompt and returns a ``ClientRun`` once the relay
acknowledged it. Everything the handle reports comes from the session's view,
so it agrees with every other client. ``status`` is the Run's status in the
view, and ``result()`` waits until the view shows the Run ended or suspended.

``steer()``, ``follow_up()`` and ``inject()`` return a ``Delivery`` at once.
Steering joins the Run's current turn at its next model call. A follow-up
starts a new turn once the current answer is done. An injected message joins
the next model call without causing one. If the view already shows the Run
ended, both awaitables reject ``RUN_NOT_ACTIVE`` and nothing is published.

Otherwise the message is published from a task, in the place it took when the
call was made. ``published`` resolves with its serial. ``outcome`` resolves
from the view's ``DeliveryEvent`` for that message id. An input check may
refuse the message: then ``outcome`` resolves with ``refused`` set, and the
Run continues without it.

``queued`` lists the messages sent through the handle that still wait.
``result().undelivered`` lists the ones the Run ended without taking.

On a write-only session the handle publishes but sees nothing: ``outcome``,
``status``, ``queued``, ``refused`` and ``result()`` raise or reject
``NOT_ATTACHED`` at once.

The awaitables are ``PendingResult`` objects. One left unawaited never warns,
and each may be awaited any number of times.

docs/explanation/steering-outcomes.md explains outcomes, refusals and suspends.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

import anyio

from transport.asyncio.view import View, write_only_error
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import Interrupt, MessageEntry, RunEndReason, RunStatus
from transport.messages import UIMessage, user_message
from transport.runs import ended_error, run_ended
from transport.tree import Refusal

__all__ = [
    "QUEUED_INTENTS",
    "ClientRun",
    "Delivery",
    "Outcome",
    "PendingResult",
    "Published",
    "Refused",
    "RunResult",
]

QueuedIntent = Literal["steer", "follow_up", "inject"]
QUEUED_INTENTS: tuple[QueuedIntent, ...] = ("steer", "follow_up", "inject")

T = TypeVar("T")


class PendingResult(Generic[T]):
    """A value that arrives later: ``await`` it (any number of times) for the value or the error.

    Settles once; later attempts to settle it are ignored. Never warns when
    nobody awaits it.
    """

    __slots__ = ("_error", "_event", "_settled", "_value")

    def __init__(self) -> None:
        self._settled = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._event: anyio.Event | None = None

    def done(self) -> bool:
        """True once it resolved or rejected."""
        return self._settled

    def value(self) -> T:
        """The value; raises the error if it rejected, ``RuntimeError`` if not settled yet."""
        if not self._settled:
            raise RuntimeError("not settled yet")
        if self._error is not None:
            raise self._error
        return cast(T, self._value)

    def error(self) -> BaseException | None:
        """The error it rejected with, or None (also while not settled)."""
        return self._error

    def resolve(self, value: T) -> bool:
        """Settle it with ``value`` (the SDK does this); False if it was settled already."""
        if self._settled:
            return False
        self._value = value
        self._settle()
        return True

    def reject(self, error: BaseException) -> bool:
        """Settle it with ``error`` (the SDK does this); False if it was settled already."""
        if self._settled:
            return False
        self._error = error
        self._settle()
        return True

    def _settle(self) -> None:
        self._settled = True
        if self._event is not None:
            self._event.set()

    async def _wait(self) -> T:
        if not self._settled:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        return self.value()

    def __await__(self) -> Generator[Any, None, T]:
        return self._wait().__await__()

    def __repr__(self) -> str:
        if not self._settled:
            return "<PendingResult pending>"
        if self._error is not None:
            return f"<PendingResult error={self._error!r}>"
        return f"<PendingResult value={self._value!r}>"


@dataclass(frozen=True)
class Published:
    """A message the relay sequenced: its ``serial`` on the session's channel."""

    serial: int


@dataclass(frozen=True)
class Outcome:
    """How a steering message settled (the seed's ``{consumed, runTerminalReason}``).

    ``consumed``: the agent saw it before it sent a response.
    ``run_terminal_reason``: how the Run ended; ``None`` when it resolved at a
    suspend or was refused. ``refused``: the error of the input check that
    refused it (``PII_DETECTED``, ``PROMPT_INJECTION_DETECTED``, or what a
    check of your own raised), ``None`` otherwise.
    """

    consumed: bool
    run_terminal_reason: RunEndReason | None
    refused: RunwireError | None = None


@dataclass(frozen=True)
class Refused:
    """A queued message an input check refused, and the error.

    ``message`` is ``None`` on a device that never had its content (the relay
    refused it, so it was never stored; only the sender holds it).
    """

    message_id: str
    run_id: str
    intent: str
    error: RunwireError
    message: UIMessage | None = None


class Delivery:
    """What ``steer()``, ``follow_up()`` and ``inject()`` return: the message and two awaitables."""

    __slots__ = ("intent", "message", "outcome", "published", "run_id")

    def __init__(self, message: UIMessage, run_id: str, intent: str = "steer") -> None:
        self.message = message
        self.run_id = run_id
        self.intent = intent
        self.published: PendingResult[Published] = PendingResult()
        self.outcome: PendingResult[Outcome] = PendingResult()

    def fail(self, error: RunwireError) -> None:
        """Reject both awaitables with ``error`` (the SDK does this)."""
        self.published.reject(error)
        self.outcome.reject(error)

    def __repr__(self) -> str:
        return (
            f"<Delivery message={self.message.id!r} run={self.run_id!r} "
            f"published={self.published!r} outcome={self.outcome!r}>"
        )


@dataclass(frozen=True)
class RunResult:
    """A Run that ended or suspended.

    ``undelivered``: messages sent through this handle (steer, follow-up,
    inject) that the Run did not take and that were not refused; empty when
    the Run ended ``error`` (they stay in ``ClientRun.queued``). At a suspend
    they are listed here and stay in ``queued`` too, outcomes pending: the
    resumed Run may still take them.
    ``interrupts``: the questions a suspended Run waits on.
    ``error``: what the Run ended with: the error of an ``error`` end, or for
    a ``cancelled`` one the abort's reason (``RUN_CANCELLED``) when it gave one.
    ``reason``: that reason's text for a ``cancelled`` Run, else ``None``.
    """

    status: RunStatus
    end_reason: RunEndReason | None
    undelivered: list[UIMessage] = field(default_factory=list)
    interrupts: list[Interrupt] = field(default_factory=list)
    error: RunwireError | None = None
    reason: str | None = None


class RunHost(Protocol):
    """What a ``ClientRun`` needs of its session (``client_side.deliveries.Deliveries``)."""

    @property
    def session_id(self) -> str: ...

    @property
    def subscribe(self) -> bool: ...

    @property
    def view(self) -> View: ...

    @property
    def resets(self) -> int: ...

    def refused(self, refusal: Refusal) -> Refused: ...

    def start(self, delivery: Delivery, entry: MessageEntry) -> None: ...

    def check_lost(self, run_id: str, resets: int) -> None: ...

    async def wait_change(self) -> None: ...

    async def cancel(
        self, run_id: str, *, reason: str | None, wait: bool, timeout: float | None
    ) -> None: ...


@runtime_checkable
class HasRunHost(Protocol):
    """A session that hands its ``RunHost`` out (``ClientSession``)."""

    @property
    def run_host(self) -> RunHost: ...


def as_message(message: str | UIMessage) -> UIMessage:
    """A ``UIMessage`` as given, or a user message with the text of a ``str``."""
    if isinstance(message, UIMessage):
        return message
    if isinstance(message, str):
        return user_message(message)
    raise RunwireError(
        VALIDATION_ERROR,
        f"a message is a str or a UIMessage, not {type(message).__name__}",
    )


class ClientRun:
    """A handle on one Run of a ``ClientSession`` (made by ``send`` or ``session.run``).

    ``prompt`` is the message that started the Run (``None`` if the view has
    not loaded it). ``queued`` and the results count only messages sent
    through this handle; ``refused`` lists every refusal of the Run.
    """

    def __init__(
        self, session: HasRunHost | RunHost, run_id: str, prompt: UIMessage | None
    ) -> None:
        self._session = session.run_host if isinstance(session, HasRunHost) else session
        self.run_id = run_id
        self.prompt = prompt
        self._deliveries: list[Delivery] = []
        self._resets = self._session.resets  # a reset after this one that loses the Run fails waits

    def __repr__(self) -> str:
        if not self._session.subscribe:
            return f"<ClientRun {self.run_id!r} write-only>"
        return f"<ClientRun {self.run_id!r} status={self.status!r}>"

    def _check_readable(self, what: str) -> None:
        if not self._session.subscribe:
            raise write_only_error(self._session.session_id, what)

    @property
    def status(self) -> RunStatus:
        """The Run's status in the view: ``"queued"`` while it waits its turn,
        ``"pending"`` until the agent starts it, and so on. Raises
        ``RunwireError(NOT_ATTACHED)`` on a write-only session."""
        self._check_readable("ClientRun.status")
        info = self._session.view.run(self.run_id)
        return info.status if info is not None else "pending"

    @property
    def queued(self) -> list[UIMessage]:
        """Messages sent through this handle that wait (see the module docstring)."""
        self._check_readable("ClientRun.queued")
        out: list[UIMessage] = []
        for d in self._untaken():
            if not d.outcome.done() or d.outcome.value().run_terminal_reason == "error":
                out.append(d.message)
        return out

    @property
    def refused(self) -> list[Refused]:
        """Queued messages of this Run an input check refused, oldest first, with the error."""
        self._check_readable("ClientRun.refused")
        return [self._session.refused(r) for r in self._session.view.tree.refusals(self.run_id)]

    def steer(self, message: str | UIMessage) -> Delivery:
        """Steer this Run: the message joins its current turn at the next model call.

        Returns at once (see the module docstring). Both awaitables reject with
        ``RUN_NOT_ACTIVE`` at once, and nothing is published, when the view
        shows the Run ended. If the relay refuses it because the Run ended
        meanwhile, ``published`` rejects with ``RUN_NOT_ACTIVE`` and ``outcome``
        resolves ``consumed=False`` with the end reason (it is undelivered).
        """
        return self._queue("steer", message)

    def follow_up(self, message: str | UIMessage) -> Delivery:
        """Queue a follow-up: once the current answer is finished it starts a new turn.

        The new turn gets the Run's iteration budget afresh. Returns at once,
        like ``steer``.
        """
        return self._queue("follow_up", message)

    def inject(self, message: str | UIMessage) -> Delivery:
        """Inject context: it joins the conversation at the next model call without causing one.

        If the Run makes no model call after it, it is saved at the Run's end
        (returned as undelivered where the Run keeps no history). Returns at
        once, like ``steer``.
        """
        return self._queue("inject", message)

    def _queue(self, intent: QueuedIntent, message: str | UIMessage) -> Delivery:
        session = self._session
        msg = as_message(message)
        if msg.metadata.get("queued") != intent:
            msg = msg.model_copy(update={"metadata": {**msg.metadata, "queued": intent}})
        delivery = Delivery(msg, self.run_id, intent)
        self._deliveries.append(delivery)
        info = session.view.run(self.run_id) if session.subscribe else None
        if info is not None and run_ended(info.status):
            delivery.fail(ended_error(self.run_id, info.status))
            return delivery
        entry = MessageEntry(id=msg.id, run_id=self.run_id, intent=intent, message=msg)
        session.start(delivery, entry)
        return delivery

    def _untaken(self) -> list[Delivery]:
        """Deliveries that went out (or are going out), were not refused and not taken in."""
        book = self._session.view.tree.outcomes
        out: list[Delivery] = []
        for d in self._deliveries:
            if d.outcome.done() and (d.outcome.error() is not None or d.outcome.value().refused):
                continue
            if book.consumed(d.message.id) or book.refused(d.message.id):
                continue
            out.append(d)
        return out

    async def result(self) -> RunResult:
        """Wait until the Run ends or suspends.

        Raises ``RunwireError(CONNECTION_CLOSED)`` if the session closes first.
        Raises ``RunwireError(EPOCH_MISMATCH)`` (``details["run_id"]``) if a reset
        rebuilt the view without the Run, because the relay lost the session's
        history: how it ends can no longer be told. Raises ``NOT_ATTACHED`` at
        once on a write-only session, which never sees the Run end.
        """
        self._check_readable("ClientRun.result()")
        while True:
            info = self._session.view.run(self.run_id)
            if info is not None and (run_ended(info.status) or info.status == "suspended"):
                undelivered = (
                    []
                    if info.status == "error"
                    else [
                        d.message
                        for d in self._untaken()
                        if d.outcome.done() or info.status == "suspended"
                    ]
                )
                error = RunwireError.from_wire(info.error) if info.error is not None else None
                return RunResult(
                    status=info.status,
                    end_reason=info.end_reason,
                    undelivered=undelivered,
                    interrupts=self._session.view.tree.interrupts(self.run_id),
                    error=error if run_ended(info.status) else None,
                    reason=error.message if error and info.status == "cancelled" else None,
                )
            self._session.check_lost(self.run_id, self._resets)
            await self._session.wait_change()

    async def cancel(
        self,
        reason: str | None = None,
        *,
        wait: bool = True,
        timeout: float | None = 30.0,
    ) -> list[UIMessage]:
        """Cancel this Run; return the messages it never took (never delivered, never saved).

        Publishes the cancel (a Run that already ended is left as it is;
        ``RUN_NOT_FOUND`` or ``UNAUTHORIZED`` raise ``RunwireError``). With
        ``wait``, it then waits until the Run ends or ``timeout`` seconds pass.
        It raises ``RunwireError(CANCEL_DENIED)`` if the agent refuses the cancel
        (the Run continues), and ``RunwireError(EPOCH_MISMATCH)`` if a reset
        loses the Run meanwhile. Returns the messages sent through this handle that the Run
        had not taken in (and that no check refused): their outcomes resolve
        ``consumed=False``. A cancel that comes after the Run's last model call
        has nothing left to stop: the Run may still complete.

        On a write-only session ``wait=True`` raises ``NOT_ATTACHED`` at once and
        publishes nothing; ``wait=False`` publishes the cancel and returns ``[]``:
        which messages the Run took cannot be seen from there.
        """
        await self._session.cancel(self.run_id, reason=reason, wait=wait, timeout=timeout)
        if not self._session.subscribe:
            return []
        return [d.message for d in self._untaken()]
