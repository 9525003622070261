"""What the relay keeps about one Run, and its deadline (no I/O).

A ``RunRecord`` is plain data. The relay's rules (``transport.runs``) make new
records from old ones, and a store writes ``to_dict()`` in the same
transaction as the entry that changed it. docs/explanation/run-rules.md tells
what each field is for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ._run_state import GOING_ON, TERMINAL, relay_entry_id
from .errors import RUN_TIMEOUT
from .frames import ErrorBody, Multitask, RunEntry, RunStatus, ThreadAccess
from .interrupts import PauseRecord

__all__ = ["RunRecord", "deadline_at", "effective_timeout", "timed_out", "timeout_entry"]


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
    durable: bool = False
    """The agent keeps checkpoints: if it goes away the relay passes the Run to another worker."""
    checkpoint: dict[str, Any] | None = None
    """The fields of the Run's latest ``checkpoint`` entry (without ids and stamps)."""
    adoptions: int = 0
    """How many times the relay passed the Run to another worker."""
    seq: int = 0
    """Order of creation within the session (queued Runs take turns by it)."""
    multitask: Multitask = "alongside"
    """The strategy in effect for this Run's prompt."""
    parent_run_id: str | None = None
    thread_access: ThreadAccess | None = None
    """What the prompt asked for; the session's first Run decides for the session."""
    interrupts: list[str] = field(default_factory=list)
    """For ``interrupt``/``rollback``: the Runs it cancels before it starts."""
    interrupted_by: str | None = None
    """The Run whose interrupt cancelled this one (set when the relay's cancel is stored)."""
    pause: PauseRecord | None = None
    """What the Run waits on, once it paused on questions."""
    off_thread: bool = False
    """Its prompt said ``activate: false``: a Run on a branch that leaves the active leaf
    where it is. It runs alongside and counts for no strategy."""
    timeout: float | None = None
    """Seconds the Run may stay active from its latest start (None: no deadline)."""
    deadline_ms: int | None = None
    """While active with a ``timeout``: when the relay ends it ``RUN_TIMEOUT`` (wall clock)."""

    def __post_init__(self) -> None:
        if isinstance(self.pause, dict):  # plain data from a store or an older caller
            object.__setattr__(self, "pause", PauseRecord.from_dict(self.pause))

    def waiting(self) -> list[dict[str, Any]]:
        """The questions this Run waits on (none unless it paused)."""
        return [] if self.pause is None else self.pause.waiting()

    @property
    def terminal(self) -> bool:
        """True once the Run has ended."""
        return self.status in TERMINAL

    @property
    def going_on(self) -> bool:
        """True while ``pending`` or ``active``."""
        return self.status in GOING_ON

    @property
    def unstarted(self) -> bool:
        """True while ``pending`` and never started: no agent ever took it."""
        return self.status == "pending" and self.owner is None and self.adoptions == 0

    @property
    def resume_owed(self) -> bool:
        """True while suspended with every question settled.

        The relay has still to publish ``run: pending`` for it then.
        """
        return self.status == "suspended" and self.pause is not None and self.pause.due

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a store."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild from ``to_dict()`` output (keys this version does not know are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def effective_timeout(asked: float | None, most: float | None) -> float | None:
    """The deadline the relay enforces: the agent's ``timeout``, at most ``most`` seconds."""
    if asked is None:
        return most
    return asked if most is None else min(asked, most)


def deadline_at(status: str, timeout: float | None, now_ms: int) -> int | None:
    """When a Run that goes to ``status`` at ``now_ms`` ends ``RUN_TIMEOUT`` (None: never)."""
    if status != "active" or timeout is None:
        return None
    return now_ms + round(timeout * 1000)


def timed_out(record: RunRecord, entry: RunEntry, now_ms: int) -> bool:
    """True if ``entry`` is the relay's timeout end of ``record``, due at ``now_ms``."""
    return (
        record.status == "active"
        and record.deadline_ms is not None
        and now_ms >= record.deadline_ms
        and entry.error is not None
        and entry.error.code == RUN_TIMEOUT
    )


def timeout_entry(record: RunRecord) -> RunEntry:
    """The relay's end of an active Run whose deadline passed: ``cancelled``, ``RUN_TIMEOUT``.

    Its id names the deadline, so every node that ends it stores it once."""
    assert record.deadline_ms is not None and record.timeout is not None
    return RunEntry(
        id=relay_entry_id(record.run_id, "timeout", str(record.deadline_ms)),
        run_id=record.run_id,
        status="cancelled",
        error=ErrorBody(
            code=RUN_TIMEOUT,
            message=f"the Run was still active at its deadline ({record.timeout:g} s)",
            details={"timeout_seconds": record.timeout},
        ),
    )
