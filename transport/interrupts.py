"""Interrupts: a Run asks people and waits (no I/O).

The relay keeps what a paused Run waits on as the ``pause`` of its record (a
plain dict, so every relay node replays it the same way):

* ``version``: 1;
* ``round``: how many times the Run paused (names the relay's resume entry);
* ``interrupts``: the questions of the latest pause, as ``Interrupt`` dicts;
* ``answers``: every answer the Run got so far, by interrupt id (kept across
  pauses, so a tool that asks several times gets earlier answers back in order);
* ``expired``: ids of questions nobody answered in time (the Run went on);
* ``moved_on``: a new prompt came instead of answers;
* ``declined``: the reason a client gave for ending the pause without answers;
* ``step``: the version-1 checkpoint of the tool step that paused;
* ``due``: every question is settled, the relay owes the Run a ``run: pending``.

``check_answer`` checks one answer against its question (``VALIDATION_ERROR``,
``INTERRUPT_EXPIRED``, ``INTERRUPT_ANSWER_INVALID``); the texts a tool call
gets instead of an answer are ``expired_text``, ``MOVED_ON_TEXT``,
``NOT_STARTED_TEXT`` and ``declined_text``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import jsonschema

from .errors import INTERRUPT_ANSWER_INVALID, INTERRUPT_EXPIRED, VALIDATION_ERROR, RunwireError
from .frames import Interrupt

__all__ = [
    "MOVED_ON_TEXT",
    "NOT_STARTED_TEXT",
    "PAUSE_VERSION",
    "PausedRun",
    "check_answer",
    "declined_text",
    "expired_text",
    "format_expiry",
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


def waiting(pause: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The questions of ``pause`` not answered, expired or otherwise settled yet."""
    if not pause or pause.get("due") or pause.get("moved_on") or pause.get("declined"):
        return []
    settled = set(pause.get("answers", {})) | set(pause.get("expired", []))
    return [q for q in pause.get("interrupts", []) if q["id"] not in settled]


def check_answer(pause: dict[str, Any] | None, interrupt_id: str, answer: Any, now_ms: int) -> None:
    """Raise the ``RunwireError`` that refuses ``answer`` to ``interrupt_id``, if any."""
    pause = pause or {}
    if interrupt_id in pause.get("answers", {}):
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
