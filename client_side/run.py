"""``ClientRun``: a client's handle on one Run, and what steering it returns.

Theory of operation
-------------------
``session.send()`` publishes a prompt and returns a ``ClientRun`` once the
relay acknowledged it. Everything the handle reports comes from the session's
view (``transport.tree``), so it agrees with every other client: ``status`` is
the Run's status in the view (``"pending"`` until the agent starts it),
``result()`` waits until the view shows the Run ended or suspended.

``steer(message)`` returns a ``Delivery`` at once. If the view already shows
the Run ended, both of its awaitables reject with ``RUN_NOT_ACTIVE`` and
nothing is published. Otherwise the message is published in the background:
``published`` resolves with the serial the relay gave it (or rejects with the
relay's error, and ``outcome`` with it), and ``outcome`` resolves from the
view's ``DeliveryEvent`` for that message id (see ``transport.outcomes``).

The awaitables are ``PendingResult`` objects, not futures or tasks: one left
unawaited never warns, and each may be awaited any number of times.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import anyio

from transport.errors import RUN_NOT_ACTIVE, RunwireError
from transport.frames import MessageEntry, RunEndReason, RunStatus
from transport.messages import UIMessage
from transport.runs import TERMINAL

if TYPE_CHECKING:
    from .session import ClientSession

__all__ = [
    "ClientRun",
    "Delivery",
    "Outcome",
    "PendingResult",
    "Published",
    "RunResult",
]

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

    def _resolve(self, value: T) -> bool:
        if self._settled:
            return False
        self._value = value
        self._settle()
        return True

    def _reject(self, error: BaseException) -> bool:
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
    suspend. ``refused``: the input check that refused it (not used yet).
    """

    consumed: bool
    run_terminal_reason: RunEndReason | None
    refused: RunwireError | None = None


class Delivery:
    """What ``ClientRun.steer()`` returns: the message and its two awaitables."""

    __slots__ = ("message", "outcome", "published", "run_id")

    def __init__(self, message: UIMessage, run_id: str) -> None:
        self.message = message
        self.run_id = run_id
        self.published: PendingResult[Published] = PendingResult()
        self.outcome: PendingResult[Outcome] = PendingResult()

    def _fail(self, error: RunwireError) -> None:
        self.published._reject(error)
        self.outcome._reject(error)

    def __repr__(self) -> str:
        return (
            f"<Delivery message={self.message.id!r} run={self.run_id!r} "
            f"published={self.published!r} outcome={self.outcome!r}>"
        )


@dataclass(frozen=True)
class RunResult:
    """A Run that ended or suspended.

    ``undelivered``: steering messages sent through this handle that resolved
    ``consumed=False``. ``interrupts``: questions the Run waits on (none yet).
    """

    status: RunStatus
    end_reason: RunEndReason | None
    undelivered: list[UIMessage] = field(default_factory=list)
    interrupts: list[Any] = field(default_factory=list)


class ClientRun:
    """A handle on one Run of a ``ClientSession`` (made by ``send`` or ``session.run``).

    ``prompt`` is the message that started the Run (``None`` if the view has
    not loaded it). ``queued`` and the results count only steering sent
    through this handle.
    """

    def __init__(self, session: ClientSession, run_id: str, prompt: UIMessage | None) -> None:
        self._session = session
        self.run_id = run_id
        self.prompt = prompt
        self._deliveries: list[Delivery] = []

    def __repr__(self) -> str:
        return f"<ClientRun {self.run_id!r} status={self.status!r}>"

    @property
    def status(self) -> RunStatus:
        """The Run's status in the view: ``"queued"`` while it waits its turn,
        ``"pending"`` until the agent starts it, and so on."""
        info = self._session.view.run(self.run_id)
        return info.status if info is not None else "pending"

    @property
    def queued(self) -> list[UIMessage]:
        """Messages steered through this handle whose outcome has not resolved."""
        return [d.message for d in self._deliveries if not d.outcome.done()]

    @property
    def refused(self) -> list[tuple[UIMessage, RunwireError]]:
        """Messages an input check refused, with the error (input checks do not run yet)."""
        return []

    def steer(self, message: str | UIMessage) -> Delivery:
        """Send a steering message to this Run; returns at once (see the module docstring).

        Both awaitables reject with ``RUN_NOT_ACTIVE`` at once, and nothing is
        published, when the view shows the Run ended.
        """
        session = self._session
        msg = session._as_message(message)
        delivery = Delivery(msg, self.run_id)
        self._deliveries.append(delivery)
        info = session.view.run(self.run_id)
        if info is not None and info.status in TERMINAL:
            delivery._fail(
                RunwireError(
                    RUN_NOT_ACTIVE,
                    f"run {self.run_id!r} already ended ({info.status})",
                    details={"run_id": self.run_id, "status": info.status},
                )
            )
            return delivery
        entry = MessageEntry(id=msg.id, run_id=self.run_id, intent="steer", message=msg)
        session._start_delivery(delivery, entry)
        return delivery

    async def result(self) -> RunResult:
        """Wait until the Run ends or suspends.

        Raises ``RunwireError(CONNECTION_CLOSED)`` if the session closes first.
        """
        while True:
            info = self._session.view.run(self.run_id)
            if info is not None and (info.status in TERMINAL or info.status == "suspended"):
                undelivered = [
                    d.message
                    for d in self._deliveries
                    if d.outcome.done()
                    and d.outcome.error() is None
                    and not d.outcome.value().consumed
                ]
                return RunResult(
                    status=info.status,
                    end_reason=info.end_reason,
                    undelivered=undelivered,
                    interrupts=[],
                )
            await self._session._wait_change()

    async def cancel(
        self,
        reason: str | None = None,
        *,
        wait: bool = True,
        timeout: float | None = 30.0,
    ) -> list[UIMessage]:
        """Cancel this Run; return the steering messages it never took.

        Publishes the cancel (a Run that already ended is left as it is;
        ``RUN_NOT_FOUND`` or ``UNAUTHORIZED`` raise ``RunwireError``), then, with
        ``wait``, waits until the Run ends or ``timeout`` seconds pass, and
        raises ``RunwireError(CANCEL_DENIED)`` if the agent refuses it (the Run
        goes on). Returns the messages steered through this handle whose
        outcome resolved ``consumed=False`` or is still pending.
        """
        await self._session.cancel(self.run_id, reason=reason, wait=wait, timeout=timeout)
        return [
            d.message
            for d in self._deliveries
            if not d.outcome.done()
            or (d.outcome.error() is None and not d.outcome.value().consumed)
        ]
