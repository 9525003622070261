"""Run records and the rules for what may happen to a Run (no I/O).

A Run is created ``pending`` by the prompt that names it, becomes ``active``
when its agent starts it, may go ``suspended`` and back to ``active``, and ends
``complete``, ``cancelled`` or ``error``. ``RunRegistry`` holds the records of
one session and decides, entry by entry, whether a publish is allowed and how
it changes the records. The relay runs it before storing anything; a store
writes the changed records in the same transaction as the entry.

Rules (each refusal is a ``RunwireError`` with the code named):

* a prompt names a new run id (``DUPLICATE_RUN`` otherwise);
* steer / follow-up / inject / cancel / response entries need the Run
  (``RUN_NOT_FOUND``) and that it has not ended (``RUN_NOT_ACTIVE``);
* lifecycle entries come from agents only (``UNAUTHORIZED``), follow the
  transitions table (``VALIDATION_ERROR``), and once a Run has an owner (the
  agent client that started it) only that client may move it or stream into
  it (``UNAUTHORIZED``); the relay itself may end any Run (``AGENT_LOST``);
* a cancel on a pending Run is kept (``cancel_requested``) so that the agent
  applies it when it starts the Run;
* ``refused`` and ``checkpoint`` entries need a live Run and come from its
  agent (the owner, once it has one) or the relay (``UNAUTHORIZED`` for
  clients); a checkpoint becomes the record's ``checkpoint``;
* ``run: active`` with ``durable`` marks the Run ``durable``; only the relay
  may put an active or suspended Run back to ``pending`` (its agent went
  away): the owner is cleared and ``adoptions`` counts the hand-over, so the
  dispatcher hands the Run to another worker, which adopts it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from .errors import (
    DUPLICATE_RUN,
    RUN_NOT_ACTIVE,
    RUN_NOT_FOUND,
    UNAUTHORIZED,
    VALIDATION_ERROR,
    RunwireError,
)
from .frames import (
    CancelEntry,
    CheckpointEntry,
    EntryBody,
    MessageEntry,
    RefusedEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEndReason,
    RunEntry,
    RunStatus,
)

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "RunRecord",
    "RunRegistry",
    "Sender",
    "end_reason",
]

TERMINAL: frozenset[str] = frozenset({"complete", "cancelled", "error"})
TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"active", "cancelled", "error"}),
    "active": frozenset({"suspended", "complete", "cancelled", "error"}),
    "suspended": frozenset({"active", "complete", "cancelled", "error"}),
    "complete": frozenset(),
    "cancelled": frozenset(),
    "error": frozenset(),
}


def end_reason(status: str) -> RunEndReason | None:
    """The ``RunEndReason`` of a terminal status, None otherwise."""
    if status == "complete":
        return "complete"
    if status == "cancelled":
        return "cancelled"
    if status == "error":
        return "error"
    return None


@dataclass(frozen=True)
class Sender:
    """Who publishes: stamped from the connection, never from the frame."""

    client_id: str
    user_id: str | None = None
    role: Literal["client", "agent", "relay"] = "client"


@dataclass(frozen=True)
class RunRecord:
    """What the relay keeps about one Run."""

    session_id: str
    run_id: str
    agent: str
    status: RunStatus = "pending"
    prompt_id: str = ""
    user_id: str | None = None
    client_id: str | None = None
    owner: str | None = None
    cancel_requested: bool = False
    error: dict[str, Any] | None = None
    created_ts: int = 0
    updated_ts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    durable: bool = False
    """The agent keeps checkpoints: if it goes away the relay hands the Run on."""
    checkpoint: dict[str, Any] | None = None
    """The fields of the Run's latest ``checkpoint`` entry (without ids and stamps)."""
    adoptions: int = 0
    """How many times the relay handed the Run to another worker."""

    @property
    def terminal(self) -> bool:
        """True once the Run has ended."""
        return self.status in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a store."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild from ``to_dict()`` output."""
        return cls(**data)


class RunRegistry:
    """The Runs of one session and the publish rules over them."""

    def __init__(self, session_id: str, records: list[RunRecord] | None = None) -> None:
        self.session_id = session_id
        self.runs: dict[str, RunRecord] = {r.run_id: r for r in records or ()}

    def get(self, run_id: str) -> RunRecord | None:
        """The record of a Run, if the session has it."""
        return self.runs.get(run_id)

    def active(self) -> list[RunRecord]:
        """Runs that have not ended."""
        return [r for r in self.runs.values() if not r.terminal]

    def plan(self, entry: EntryBody, sender: Sender, now_ms: int) -> list[RunRecord]:
        """Check ``entry`` against the rules; return the records it changes (not applied).

        Raises ``RunwireError`` when the entry is not allowed.
        """
        if isinstance(entry, MessageEntry):
            if entry.intent == "prompt":
                if entry.run_id in self.runs:
                    raise RunwireError(
                        DUPLICATE_RUN,
                        f"run {entry.run_id!r} already exists",
                        details={"run_id": entry.run_id},
                    )
                return [
                    RunRecord(
                        session_id=self.session_id,
                        run_id=entry.run_id,
                        agent=entry.agent or "default",
                        prompt_id=entry.message.id,
                        user_id=sender.user_id,
                        client_id=sender.client_id,
                        created_ts=now_ms,
                        updated_ts=now_ms,
                    )
                ]
            self._live(entry.run_id)
            return []
        if isinstance(entry, CancelEntry):
            record = self._live(entry.run_id)
            if record.cancel_requested:
                return []
            return [replace(record, cancel_requested=True, updated_ts=now_ms)]
        if isinstance(entry, RunEntry):
            record = self._require(entry.run_id)
            if sender.role == "client":
                raise RunwireError(UNAUTHORIZED, "only agents change a Run's status")
            if entry.status == "pending":
                return [self._release(record, sender, now_ms)]
            if entry.status not in TRANSITIONS[record.status]:
                if record.terminal:
                    raise RunwireError(
                        RUN_NOT_ACTIVE,
                        f"run {record.run_id!r} already ended ({record.status})",
                        details={"run_id": record.run_id, "status": record.status},
                    )
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run {record.run_id!r} cannot go from {record.status} to {entry.status}",
                    details={"run_id": record.run_id, "status": record.status},
                )
            self._check_owner(record, sender)
            owner = record.owner
            if sender.role == "agent" and owner is None:
                owner = sender.client_id
            return [
                replace(
                    record,
                    status=entry.status,
                    owner=owner,
                    error=entry.error.model_dump() if entry.error else None,
                    durable=record.durable or bool(entry.status == "active" and entry.durable),
                    updated_ts=now_ms,
                )
            ]
        if isinstance(entry, ResponseOpen | ResponseAppend | ResponseClose):
            record = self._live(entry.run_id)
            if sender.role == "client":
                raise RunwireError(UNAUTHORIZED, "only agents stream responses")
            self._check_owner(record, sender)
            return []
        if isinstance(entry, RefusedEntry | CheckpointEntry):
            record = self._live(entry.run_id)
            if sender.role == "client":
                raise RunwireError(UNAUTHORIZED, f"only agents publish {entry.kind} entries")
            self._check_owner(record, sender)
            if isinstance(entry, RefusedEntry):
                return []
            checkpoint = entry.model_dump(
                include={"step", "turn", "iterations", "seen", "state"}, mode="json"
            )
            return [replace(record, checkpoint=checkpoint, updated_ts=now_ms)]
        raise RunwireError(VALIDATION_ERROR, "unknown entry kind")  # pragma: no cover

    def apply(self, records: list[RunRecord]) -> None:
        """Make planned changes current (after the store wrote them)."""
        for record in records:
            self.runs[record.run_id] = record

    @staticmethod
    def _release(record: RunRecord, sender: Sender, now_ms: int) -> RunRecord:
        """The relay puts a Run whose agent went away back to ``pending`` for another worker."""
        if sender.role != "relay":
            raise RunwireError(UNAUTHORIZED, "only the relay hands a Run back to pending")
        if record.status not in ("active", "suspended"):
            raise RunwireError(
                RUN_NOT_ACTIVE if record.terminal else VALIDATION_ERROR,
                f"run {record.run_id!r} cannot go from {record.status} to pending",
                details={"run_id": record.run_id, "status": record.status},
            )
        return replace(
            record,
            status="pending",
            owner=None,
            adoptions=record.adoptions + 1,
            updated_ts=now_ms,
        )

    def _require(self, run_id: str) -> RunRecord:
        record = self.runs.get(run_id)
        if record is None:
            raise RunwireError(
                RUN_NOT_FOUND, f"no run {run_id!r} in this session", details={"run_id": run_id}
            )
        return record

    def _live(self, run_id: str) -> RunRecord:
        record = self._require(run_id)
        if record.terminal:
            raise RunwireError(
                RUN_NOT_ACTIVE,
                f"run {run_id!r} already ended ({record.status})",
                details={"run_id": run_id, "status": record.status},
            )
        return record

    @staticmethod
    def _check_owner(record: RunRecord, sender: Sender) -> None:
        if sender.role == "relay" or record.owner is None:
            return
        if record.owner != sender.client_id:
            raise RunwireError(
                UNAUTHORIZED,
                f"run {record.run_id!r} belongs to another agent connection",
                details={"run_id": record.run_id},
            )
