"""The client SDK: attach to a session, start and steer Runs, watch the conversation.

``async with client_side.connect(url, session_id) as session:`` yields a ``ClientSession``.
``await session.send(message)`` starts a Run and returns a ``ClientRun``. ``run.steer()``,
``run.follow_up()`` and ``run.inject()`` each return a ``Delivery``, whose ``published`` and
``outcome`` are awaitable. ``session.view`` is the live conversation, with ``messages()``,
``runs()``, ``on()`` and ``events()``.
"""

from transport._interrupts import pending_questions
from transport._runs import MULTITASK_STRATEGIES
from transport.frames import Multitask

from ._run import (
    QUEUED_INTENTS,
    ClientRun,
    Delivery,
    Outcome,
    PendingResult,
    Published,
    Refused,
    RunResult,
)
from ._session import ClientSession, connect
from ._view import EVENT_KINDS, Event, EventStream, View

__all__ = [
    "EVENT_KINDS",
    "MULTITASK_STRATEGIES",
    "QUEUED_INTENTS",
    "ClientRun",
    "ClientSession",
    "Delivery",
    "Event",
    "EventStream",
    "Multitask",
    "Outcome",
    "PendingResult",
    "Published",
    "Refused",
    "RunResult",
    "View",
    "connect",
    "pending_questions",
]
