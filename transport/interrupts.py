"""Interrupts: a Run asks people and waits (no I/O).

The relay keeps what a paused Run waits on as the ``pause`` of its record, a
``PauseRecord``. Every relay node replays it the same way, and a store keeps
it as the plain data of ``PauseRecord.to_dict()``.

``check_answer`` checks one answer against its question. The texts a tool
call gets instead of an answer are ``expired_text``, ``MOVED_ON_TEXT``,
``NOT_STARTED_TEXT`` and ``declined_text``. The explanation page
docs/explanation/run-rules.md tells how a pause is settled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import jsonschema

from .errors import INTERRUPT_ANSWER_INVALID, INTERRUPT_EXPIRED, VALIDATION_ERROR, RunwireError
from .events import RunInfo
from .frames import Interrupt

__all__ = [
    "MOVED_ON_TEXT",
    "NOT_STARTED_TEXT",
    "PAUSE_VERSION",
    "PauseRecord",
    "PausedRun",
    "check_answer",
    "declined_text",
    "expired_text",
    "format_expiry",
    "paused_run",
    "pending_questions",
    "waiting",
]

PAUSE_VERSION = 1
MOVED_ON_TEXT = "The user moved on without answering"
NOT_STARTED_TEXT = "Not started"


@dataclass(frozen=True)
class PausedRun:
    """A Run that waits on people: its id and the questions not answered yet."""

    run_id: str
    interrupts: list[Interrupt] = field(default_factory=list)


class _RunQuestions(Protocol):
    """What ``paused_run`` reads: a ``ConversationTree``, or anything with its two methods."""

    def runs(self) -> list[RunInfo]: ...

    def interrupts(self, run_id: str) -> list[Interrupt]: ...


def paused_run(tree: _RunQuestions) -> PausedRun | None:
    """The oldest Run of ``tree`` that waits on questions, with them; None if none.

    Both SDKs' ``session.paused_run()`` answer with it.
    """
    for info in tree.runs():
        questions = tree.interrupts(info.run_id)
        if questions:
            return PausedRun(info.run_id, questions)
    return None


class _Paused(Protocol):
    @property
    def interrupts(self) -> list[Interrupt]: ...


def pending_questions(
    result: _Paused | Iterable[Interrupt] | None, *, approvals: bool = False
) -> list[Interrupt]:
    """The questions a paused Run waits on (the seed's ``pendingQuestions(result)``).

    ``result`` is anything with ``interrupts``: a client ``RunResult``, a
    ``PausedRun`` (``session.paused_run()``), the agent's ``RunPaused`` or
    ``Run``; or the interrupts themselves. ``None`` (nothing paused) gives
    ``[]``, as does a Run that is not paused. Approvals are left out, since
    code that decides approvals answers those itself; ``approvals=True``
    keeps them. Order is kept.
    """
    if result is None:
        return []
    found = result.interrupts if hasattr(result, "interrupts") else result
    asked = list(found)
    return [q for q in asked if approvals or q.kind != "approval"]


def format_expiry(expires_at: int) -> str:
    """``expires_at`` (ms since the epoch) as ISO 8601 in UTC."""
    return datetime.fromtimestamp(expires_at / 1000, UTC).isoformat().replace("+00:00", "Z")


def expired_text(message: str, expires_at: int) -> str:
    """What a tool call gets for a question nobody answered in time."""
    return f'Nobody answered "{message}" before it expired at {format_expiry(expires_at)}'


def declined_text(message: str, reason: str | None = None) -> str:
    """What a tool call gets when the user ended the pause without answering."""
    text = f'The user declined to answer "{message}"'
    return f"{text}: {reason}" if reason else text


@dataclass(frozen=True)
class PauseRecord:
    """What a paused Run waits on, as the relay keeps it in the Run's record."""

    version: int = PAUSE_VERSION
    round: int = 0
    """How many times the Run paused (names the relay's resume entry)."""
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    """The questions of the latest pause, as ``Interrupt`` dicts."""
    answers: dict[str, Any] = field(default_factory=dict)
    """Every answer the Run got so far, by interrupt id (kept across pauses)."""
    expired: list[str] = field(default_factory=list)
    """Ids of questions nobody answered in time (the Run went on)."""
    moved_on: bool = False
    """A new prompt came instead of answers."""
    declined: dict[str, Any] | None = None
    """``{"reason": ...}`` once a client ended the pause without answers."""
    step: dict[str, Any] | None = None
    """The version-1 checkpoint of the tool step that paused."""
    due: bool = False
    """Every question is settled: the relay owes the Run a ``run: pending``."""

    def waiting(self) -> list[dict[str, Any]]:
        """The questions not answered, expired or otherwise settled yet."""
        if self.due or self.moved_on or self.declined:
            return []
        settled = set(self.answers) | set(self.expired)
        return [q for q in self.interrupts if q["id"] not in settled]

    def settle(self, **changes: Any) -> PauseRecord:
        """A copy with ``changes`` applied (``due=True`` and the like)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a store or a dispatch's checkpoint."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | PauseRecord | None) -> PauseRecord | None:
        """Rebuild from ``to_dict()`` output; keys this version does not know are ignored."""
        if data is None or isinstance(data, PauseRecord):
            return data
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def waiting(pause: PauseRecord | None) -> list[dict[str, Any]]:
    """The questions of ``pause`` not answered, expired or otherwise settled yet."""
    return [] if pause is None else pause.waiting()


def check_answer(pause: PauseRecord | None, interrupt_id: str, answer: Any, now_ms: int) -> None:
    """Raise the ``RunwireError`` that refuses ``answer`` to ``interrupt_id``, if any."""
    if pause is not None and interrupt_id in pause.answers:
        raise RunwireError(
            VALIDATION_ERROR,
            f"interrupt {interrupt_id!r} was already answered",
            details={"interrupt_id": interrupt_id},
        )
    question = next((q for q in waiting(pause) if q["id"] == interrupt_id), None)
    if question is None:
        raise RunwireError(
            VALIDATION_ERROR,
            f"the Run does not wait on interrupt {interrupt_id!r}",
            details={"interrupt_id": interrupt_id},
        )
    expires_at = question.get("expires_at")
    if expires_at is not None and now_ms > expires_at:
        raise RunwireError(
            INTERRUPT_EXPIRED,
            f"interrupt {interrupt_id!r} expired at {format_expiry(expires_at)}",
            details={"interrupt_id": interrupt_id, "expires_at": expires_at},
        )
    schema = question.get("response_schema")
    if schema is None:
        return
    try:
        jsonschema.validate(answer, schema)
    except jsonschema.ValidationError as exc:
        raise RunwireError(
            INTERRUPT_ANSWER_INVALID,
            f"the answer to {interrupt_id!r} does not fit its schema: {exc.message}",
            details={"interrupt_id": interrupt_id, "path": list(exc.absolute_path)},
        ) from None
    except jsonschema.SchemaError as exc:  # pragma: no cover - the agent sent a bad schema
        raise RunwireError(
            VALIDATION_ERROR,
            f"interrupt {interrupt_id!r} has an invalid schema: {exc.message}",
            details={"interrupt_id": interrupt_id},
        ) from None
