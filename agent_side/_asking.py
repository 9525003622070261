"""Asking a person from a tool call or a Run: questions, answers and approvals.

``ToolContext.interrupt()`` asks a question and ``ToolContext.approval()``
asks to approve a call. Each reads the ``Pause`` the relay kept for the Run.
An answer returns at once. A question nobody answered yet stops the call with
``Paused``, and one that can no longer be answered stops it with
``Unanswered``. The explanation page docs/explanation/agent-runs.md tells
the whole story.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from transport._interrupts import MOVED_ON_TEXT, PauseRecord, declined_text, expired_text
from transport.frames import Interrupt, InterruptKind

__all__ = ["APPROVAL_SCHEMA", "Approval", "Pause", "Paused", "ToolContext", "Unanswered"]

M = TypeVar("M", bound=BaseModel)


class Approval(BaseModel):
    """The answer to an ``approval`` interrupt."""

    approved: bool
    reason: str | None = None
    updated_arguments: dict[str, Any] | None = None
    remember: bool | None = None


APPROVAL_SCHEMA: dict[str, Any] = Approval.model_json_schema(mode="validation")


@dataclass
class Pause:
    """What a paused Run knows on resume (the relay's ``pause``, see ``transport._interrupts``)."""

    answers: dict[str, Any] = field(default_factory=dict)
    asked: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The questions of the latest pause, by id (their ``expires_at`` stays what it was)."""
    expired: set[str] = field(default_factory=set)
    moved_on: bool = False
    declined: str | None = None
    """Set (the reason, maybe empty) when the user ended the pause without answers."""
    step: dict[str, Any] | None = None
    remembered: set[str] = field(default_factory=set)
    """Tools a person approved with ``remember: true``: their later calls in the Run do not ask."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Pause:
        """Read the relay's ``pause`` (a dispatch's ``checkpoint["pause"]``)."""
        record = PauseRecord.from_dict(data) if data else None
        if record is None:
            return cls()
        declined = record.declined
        return cls(
            answers=dict(record.answers or {}),
            asked={q["id"]: q for q in record.interrupts or []},
            expired=set(record.expired or []),
            moved_on=bool(record.moved_on),
            declined=(declined.get("reason") or "") if isinstance(declined, dict) else None,
            step=record.step,
        )

    @property
    def settled(self) -> bool:
        """The pause ended without answers (moved on or declined)."""
        return self.moved_on or self.declined is not None


class Paused(Exception):
    def __init__(self, question: Interrupt) -> None:
        super().__init__(question.message)
        self.question = question


class Unanswered(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _schema_of(schema: type[BaseModel] | dict[str, Any] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    return schema.model_json_schema(mode="validation")


def _ms(value: datetime | int | float | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(value)


class ToolContext:
    """What a tool call gets besides its arguments: ``interrupt()`` to ask a person."""

    def __init__(
        self, tool_call_id: str, tool_name: str | None, pause: Pause, *, asked: int = 0
    ) -> None:
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self._pause = pause
        self._n = asked

    @property
    def asked(self) -> int:
        """How many questions ``interrupt()`` asked so far (they number the next id)."""
        return self._n

    @overload
    async def interrupt(
        self,
        *,
        message: str,
        response_schema: type[M],
        reason: str = "",
        expires_at: datetime | int | None = None,
        kind: InterruptKind = "input",
        details: dict[str, Any] | None = None,
    ) -> M: ...

    @overload
    async def interrupt(
        self,
        *,
        message: str,
        response_schema: dict[str, Any] | None = None,
        reason: str = "",
        expires_at: datetime | int | None = None,
        kind: InterruptKind = "input",
        details: dict[str, Any] | None = None,
    ) -> Any: ...

    async def interrupt(
        self,
        *,
        message: str,
        response_schema: type[BaseModel] | dict[str, Any] | None = None,
        reason: str = "",
        expires_at: datetime | int | None = None,
        kind: InterruptKind = "input",
        details: dict[str, Any] | None = None,
    ) -> Any:
        """Ask a person; returns the answer (parsed by ``response_schema`` when a model).

        ``expires_at`` is a ``datetime`` or ms since the epoch. The first time
        it is asked the call stops and the Run pauses; on resume the call runs
        again and this returns the answer.
        """
        while True:
            question = Interrupt(
                id=f"{self.tool_call_id}#{self._n}",
                kind=kind,
                reason=reason,
                message=message,
                response_schema=_schema_of(response_schema),
                expires_at=_ms(expires_at),
                tool_call_id=self.tool_call_id if self.tool_name is not None else None,
                tool_name=self.tool_name,
                details=details,
            )
            self._n += 1
            answer = self._settle(question)
            if isinstance(response_schema, type):
                try:
                    return response_schema.model_validate(answer)
                except ValidationError:
                    continue  # the JSON Schema let it through, the model refuses it: ask again
            return answer

    async def approval(
        self, message: str, arguments: Any, details: dict[str, Any] | None = None
    ) -> Approval:
        """Ask to approve this call (``kind="approval"``, id = the tool call id)."""
        question = Interrupt(
            id=self.tool_call_id,
            kind="approval",
            reason="approval",
            message=message,
            response_schema=APPROVAL_SCHEMA,
            tool_call_id=self.tool_call_id,
            tool_name=self.tool_name,
            details={"arguments": arguments, **(details or {})},
        )
        if self.tool_name in self._pause.remembered:
            return Approval(approved=True, reason="remembered")
        decision = Approval.model_validate(self._settle(question))
        if decision.approved and decision.remember and self.tool_name is not None:
            self._pause.remembered.add(self.tool_name)
        return decision

    def _settle(self, question: Interrupt) -> Any:
        pause = self._pause
        if question.id in pause.answers:
            return pause.answers[question.id]
        asked = pause.asked.get(question.id, {})
        expires_at = asked.get("expires_at", question.expires_at)
        if question.id in pause.expired and expires_at is not None:
            raise Unanswered(expired_text(question.message, expires_at))
        if pause.declined is not None:
            raise Unanswered(declined_text(question.message, pause.declined or None))
        if pause.moved_on:
            raise Unanswered(MOVED_ON_TEXT)
        if asked:
            question = question.model_copy(update={"expires_at": expires_at})
        raise Paused(question)
