"""Which right each kind of entry needs, and the checks of who may move a Run (no I/O).

``ENTRY_RIGHTS`` is the one table of which entry kinds need which right. The
relay's rules, its repeat check and its HTTP surface all read it through
``needed_right`` and ``rights_refusal``. The other checks here look at one
Run's record: its owner, and whether an agent started it.
docs/explanation/run-rules.md tells the reasons.
"""

from __future__ import annotations

from ._policy import AGENT, CANCEL, CANCEL_ANY, PUBLISH, STEER, Sender
from ._run_record import RunRecord
from .errors import RUN_NOT_ACTIVE, UNAUTHORIZED, RunwireError
from .frames import CancelEntry, EntryBody, InterruptEntry, MessageEntry

__all__ = [
    "ENTRY_RIGHTS",
    "check_not_passed_on",
    "check_owner",
    "check_right",
    "check_started",
    "need",
    "need_cancel",
    "needed_right",
    "rights_refusal",
]

ENTRY_RIGHTS: dict[str, str] = {
    "message:prompt": PUBLISH,
    "message:steer": STEER,
    "message:follow_up": STEER,
    "message:inject": STEER,
    "cancel": CANCEL,
    "interrupt:resumed": PUBLISH,
    "interrupt:declined": PUBLISH,
    "interrupt:paused": AGENT,
    "run": AGENT,
    "response_open": AGENT,
    "response_append": AGENT,
    "response_close": AGENT,
    "cancel_denied": AGENT,
    "refused": AGENT,
    "checkpoint": AGENT,
}
"""The right each kind of entry needs. ``cancel`` needs ``cancel-any`` for a Run of
another user. An entry that needs ``agent`` comes from agent connections only."""


def _right_key(entry: EntryBody) -> str:
    if isinstance(entry, MessageEntry):
        return f"message:{entry.intent}"
    if isinstance(entry, InterruptEntry):
        return f"interrupt:{entry.status}"
    return entry.kind


def needed_right(entry: EntryBody) -> str:
    """The right ``entry``'s kind needs, from ``ENTRY_RIGHTS``."""
    return ENTRY_RIGHTS[_right_key(entry)]


def need(sender: Sender, capability: str) -> None:
    """Refuse (``UNAUTHORIZED``, ``details.needs``) a sender without ``capability``."""
    if not sender.can(capability):
        raise RunwireError(
            UNAUTHORIZED,
            f"the token does not grant {capability!r} in this session",
            details={"needs": capability},
        )


def check_right(entry: EntryBody, sender: Sender, what: str | None = None) -> None:
    """Refuse a sender that may not publish ``entry``'s kind. ``what`` names the act in
    the refusal of a client that sent an entry for agents only."""
    needs = needed_right(entry)
    if needs == AGENT and sender.role == "client":
        raise RunwireError(UNAUTHORIZED, f"only agents {what or f'publish {entry.kind} entries'}")
    need(sender, needs)


def rights_refusal(entry: EntryBody, sender: Sender) -> RunwireError | None:
    """Why ``sender`` may never publish an entry like ``entry`` in the session, whatever its
    Runs (``UNAUTHORIZED``), or None.

    The relay acknowledges a repeated entry id as a duplicate without storing anything.
    It does so only for a sender that may publish that kind of entry. Otherwise any
    token could learn which ids a session holds.
    """
    if sender.role == "relay":
        return None
    needs = needed_right(entry)
    if isinstance(entry, CancelEntry) and sender.can(CANCEL_ANY):
        needs = CANCEL_ANY
    if needs == AGENT and sender.role == "client":
        return RunwireError(UNAUTHORIZED, f"only agents publish {entry.kind} entries")
    try:
        need(sender, needs)
    except RunwireError as exc:
        return exc
    return None


def need_cancel(sender: Sender, record: RunRecord) -> None:
    """Refuse a cancel of ``record`` by a sender without ``cancel`` (its own user's Run)
    or ``cancel-any`` (another user's)."""
    if sender.can(CANCEL_ANY):
        return
    own = record.user_id == sender.user_id
    if own and sender.can(CANCEL):
        return
    needs = CANCEL if own else CANCEL_ANY
    raise RunwireError(
        UNAUTHORIZED,
        f"the token does not grant {needs!r} for run {record.run_id!r}",
        details={"run_id": record.run_id, "needs": needs},
    )


def check_not_passed_on(record: RunRecord, sender: Sender) -> None:
    """A Run the relay passed to another worker takes an agent's output only once a
    worker started it."""
    if sender.role == "relay" or record.status != "pending" or record.adoptions == 0:
        return
    raise RunwireError(
        RUN_NOT_ACTIVE,
        f"run {record.run_id!r} was handed to another worker; it is pending until one starts it",
        details={"run_id": record.run_id, "status": record.status},
    )


def check_started(record: RunRecord, sender: Sender, what: str) -> None:
    """Only the agent that started a Run (its owner) refuses its cancels or checkpoints it.

    A queued or pending Run has no owner yet. Without this check any agent could
    clear the cancel it waits for, or plant its checkpoint.
    """
    if sender.role == "relay" or record.owner is not None:
        return
    raise RunwireError(
        UNAUTHORIZED,
        f"run {record.run_id!r} has not been started; only the agent that starts it may {what}",
        details={"run_id": record.run_id, "status": record.status},
    )


def check_owner(record: RunRecord, sender: Sender) -> None:
    """Once a Run has an owner, only that agent connection may move it."""
    if sender.role == "relay" or record.owner is None:
        return
    if record.owner != sender.client_id:
        raise RunwireError(
            UNAUTHORIZED,
            f"run {record.run_id!r} belongs to another agent connection",
            details={"run_id": record.run_id},
        )
