"""Run records and the rules for what may happen to a Run (no I/O).

A Run is created by the prompt that names it: ``pending`` (waiting for its
agent to start it) or, when its multitask strategy makes it wait, ``queued``.
A queued Run becomes ``pending`` when its turn comes, or ends ``cancelled``
when its sender cancels it. A pending Run becomes ``active`` when its agent
starts it, may go ``suspended`` and back to ``active``, and ends ``complete``,
``cancelled`` or ``error``. ``RunRegistry`` holds the records of one session
and decides, entry by entry, whether a publish is allowed and how it changes
the records. The relay runs it before storing anything; a store writes the
changed records in the same transaction as the entry. Every rule lives here,
so a relay node that replays a session's records decides exactly as the node
that wrote them.

Rules (each refusal is a ``RunwireError`` with the code named):

* rights: a sender's capabilities for the session (``Sender.caps``; ``None``
  means every right, as on an anonymous relay) must include ``publish`` for a
  prompt, ``steer`` for steer / follow-up / inject, ``cancel`` to cancel a Run
  of its own user or ``cancel-any`` for anyone's, and ``agent`` for lifecycle,
  response and ``cancel_denied`` entries (``UNAUTHORIZED``); a client's
  message entries carry ``role: "user"`` messages only (``UNAUTHORIZED``:
  system and assistant messages are the app's and the agent's to write);
* a prompt names a new run id (``DUPLICATE_RUN`` otherwise);
* steer / follow-up / inject / cancel / response entries need the Run
  (``RUN_NOT_FOUND``) and that it has not ended (``RUN_NOT_ACTIVE``);
* lifecycle entries come from agents only (``UNAUTHORIZED``), follow the
  transitions table (``VALIDATION_ERROR``), and once a Run has an owner (the
  agent client that started it) only that client may move it, stream into it
  or refuse its cancels (``UNAUTHORIZED``); the relay itself may end any Run
  (``AGENT_LOST``); a queued Run is moved by the relay only;
* a cancel on a pending Run that no agent has started yet (never handed over)
  ends it: the relay owes it ``run: cancelled`` (``due()``), as for a queued Run,
  since no agent could refuse it; a cancel on a pending Run handed over (its
  agent went away, or its pause was settled) is kept (``cancel_requested``) so
  that the worker that adopts it applies it; a ``cancel_denied`` clears it;
* the relay's cancel for an ``interrupt`` (``interrupted_by``) needs the
  interrupting Run still queued, uncancelled, and naming the target
  (``RUN_NOT_ACTIVE``: a cancel worked out before the interrupting prompt was
  cancelled is stale); likewise the relay's ``run: cancelled`` for a pending
  Run needs a waiting interrupt that names it or a standing cancel of a Run no
  agent started, and for a queued Run a standing cancel (``VALIDATION_ERROR``);
* ``refused`` and ``checkpoint`` entries need a live Run and come from its
  agent (the owner, once it has one) or the relay (``UNAUTHORIZED`` for
  clients); a checkpoint becomes the record's ``checkpoint``;
* an agent's ``cancel_denied`` or ``checkpoint`` needs a Run its owner started:
  on a queued or pending Run nobody started yet (no owner) it is
  ``UNAUTHORIZED`` for every agent (only the relay may checkpoint it);
* ``interrupt`` entries (see ``transport.interrupts``): ``paused`` comes from
  the Run's agent while the Run is active and becomes the record's ``pause``;
  ``resumed`` needs ``publish`` and a Run that waits on every interrupt it
  answers (``VALIDATION_ERROR``), before ``expires_at`` (``INTERRUPT_EXPIRED``),
  fitting its JSON Schema (``INTERRUPT_ANSWER_INVALID``, details name the
  interrupt); ``declined`` needs ``publish`` and a Run that waits. A prompt
  while a Run waits settles that Run's pause (``moved_on``), a cancel settles
  it as declined (a worker takes the Run and applies the cancel: it may run
  ``on_cancel`` and refuse it, so the relay does not end the Run itself). Once
  every question is settled the relay owes the suspended Run a ``run: pending``
  (``due()``: once a slot is free for it, or at once while a cancel stands, see
  below), so a worker adopts it with the pause in its checkpoint; its owner
  may instead resume it itself (``run: active``), which takes up the settled
  pause: the resume is no longer owed, and the relay's resume worked out before
  is refused (``RUN_NOT_ACTIVE``);
* ``run: active`` with ``durable`` marks the Run ``durable``; only the relay
  may put an active or suspended Run back to ``pending`` (its agent went
  away): the owner is cleared and ``adoptions`` counts the hand-over, so the
  dispatcher hands the Run to another worker, which adopts it. Replay applies
  the same hand-over (owner cleared, ``adoptions`` counted). Until a worker
  starts a handed-over Run again (``run: active``), no agent may stream into
  it, checkpoint it or refuse its cancels (``RUN_NOT_ACTIVE``): the worker
  that went away may come back and send what it held, and with no owner to
  check that would land in a Run another worker is about to adopt.

Multitask strategies (the strategy of a prompt is its ``multitask``, else the
relay's ``Policy.multitask``). Runs *going on* are those ``pending`` or
``active``, and, for a strategy, those ``suspended`` and owed their resume
(every question settled, by this very prompt's move on too: a prompt moves on
every Run waiting on questions, which then goes on again). A suspended Run that
still waits on a person does not count, nor does a queued one (it waits its
turn).

* ``alongside``: the Run starts at once, whatever goes on.
* ``reject``: ``THREAD_BUSY`` while a Run is going on (``details.run_ids``);
  refused, it moves nothing on.
* ``enqueue``: queued while a Run goes on (or an older enqueued Run waits);
  its turn comes when none goes on (none is owed its resume), oldest first.
* ``interrupt`` / ``rollback``: the Runs going on are cancelled (the relay
  publishes the cancels, see ``due()``; the sender needs the cancel right for
  each); the new Run is queued until they settle, and goes before enqueued Runs.
  A Run owed its resume gets the cancel while suspended: it is resumed (at
  once, free slot or not), and the worker that adopts it applies the cancel (as
  for any cancel of a paused Run), then the new Run's turn comes.
* Any strategy but ``alongside``: while a Run of another user goes on, the
  prompt fails with ``THREAD_ACCESS_DENIED`` before anything else, unless the
  session is shared (its first prompt said ``thread_access="shared"``, else
  ``Policy.thread_access``).
* A prompt whose ``parent_run_id`` names a Run going on (a tool call of that
  Run started it) is never held back: it runs alongside, and takes a slot even
  when none is free.
* A prompt with ``activate: false`` (a Run on a branch that leaves the active
  leaf where it is) does not count as the session's Run: it runs alongside,
  whatever its strategy, and no later prompt's strategy counts it (nor waits
  for, interrupts or is refused for it). It still takes a slot like any Run.
* With a ``SlotBook`` (the relay's ``max_concurrent_runs``), a Run that would
  start while no slot is free is queued instead; a queued Run holds no slot.
  Nor does a suspended Run: going on again (the relay's resume or hand-over
  ``run: pending``, or its owner's ``run: active``) takes a slot, and is
  refused while none is free (``VALIDATION_ERROR``), unless a cancel stands
  (below). A resume is owed (``due()``) only while a slot is free for it; the
  session's owed resumes take free slots oldest first, before its queued Runs
  (they started first), so a resume is never lost, only held until a slot
  frees. A resume with a cancel standing (the Run was cancelled, or
  interrupted, while paused) is not held: the Run goes on only to end, so a
  cancel takes effect promptly at the limit too. It is owed at once and, like
  a tool call's Run, takes a slot even when none is free (a free one before
  the session's other owed resumes do), so the count stays truthful; it gives
  the slot back when it ends (should its worker refuse the cancel,
  ``cancel_denied``, it goes on holding it).

``due()`` lists what the relay owes the session after a change (interrupt
cancels, ends of cancelled queued Runs, the next queued Run's turn), as
entries with deterministic ids, so however many times or on however many
relay nodes they are published, they happen once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from .errors import (
    DUPLICATE_RUN,
    RUN_NOT_ACTIVE,
    RUN_NOT_FOUND,
    RUN_TIMEOUT,
    THREAD_ACCESS_DENIED,
    THREAD_BUSY,
    UNAUTHORIZED,
    VALIDATION_ERROR,
    RunwireError,
)
from .frames import (
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    EntryBody,
    ErrorBody,
    Interrupt,
    InterruptEntry,
    MessageEntry,
    Multitask,
    RefusedEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEndReason,
    RunEntry,
    RunStatus,
    ThreadAccess,
)
from .interrupts import PAUSE_VERSION, check_answer, waiting
from .policy import (
    AGENT,
    CANCEL,
    CANCEL_ANY,
    CAPABILITIES,
    PUBLISH,
    RELAY,
    STEER,
    SUBSCRIBE,
    Policy,
    Sender,
    SlotBook,
)

__all__ = [
    "AGENT",
    "CANCEL",
    "CANCEL_ANY",
    "CAPABILITIES",
    "GOING_ON",
    "MULTITASK_STRATEGIES",
    "PUBLISH",
    "STEER",
    "SUBSCRIBE",
    "TERMINAL",
    "TRANSITIONS",
    "Policy",
    "RunRecord",
    "RunRegistry",
    "Sender",
    "SlotBook",
    "effective_timeout",
    "end_reason",
    "relay_entry_id",
    "rights_refusal",
    "timeout_entry",
]

MULTITASK_STRATEGIES: tuple[Multitask, ...] = (
    "alongside",
    "reject",
    "enqueue",
    "interrupt",
    "rollback",
)
_WAITING: frozenset[str] = frozenset({"enqueue", "interrupt", "rollback"})
_INTERRUPTING: frozenset[str] = frozenset({"interrupt", "rollback"})

TERMINAL: frozenset[str] = frozenset({"complete", "cancelled", "error"})
GOING_ON: frozenset[str] = frozenset({"pending", "active"})
"""Statuses of Runs that count as going on (and hold a slot)."""
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"pending", "cancelled", "error"}),
    "pending": frozenset({"active", "cancelled", "error"}),
    "active": frozenset({"suspended", "complete", "cancelled", "error"}),
    "suspended": frozenset({"active", "complete", "cancelled", "error"}),
    "complete": frozenset(),
    "cancelled": frozenset(),
    "error": frozenset(),
}


RELAY_CLIENT_ID = "relay"
"""The client id stamped on entries the relay itself publishes (no peer may claim it)."""


def end_reason(status: str) -> RunEndReason | None:
    """The ``RunEndReason`` of a terminal status, None otherwise."""
    if status == "complete":
        return "complete"
    if status == "cancelled":
        return "cancelled"
    if status == "error":
        return "error"
    return None


def relay_entry_id(*parts: str) -> str:
    """A deterministic id for an entry the relay publishes (at most 200 characters)."""
    text = "relay:" + ":".join(parts)
    if len(text) <= 200:
        return text
    return "relay:" + hashlib.sha256(text.encode()).hexdigest()


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
    pause: dict[str, Any] | None = None
    """What the Run waits on (see ``transport.interrupts``), once it paused on questions."""
    off_thread: bool = False
    """Its prompt said ``activate: false``: a Run on a branch that leaves the active leaf
    where it is. It runs alongside and counts for no strategy."""
    timeout: float | None = None
    """Seconds the Run may stay active from its latest start (None: no deadline)."""
    deadline_ms: int | None = None
    """While active with a ``timeout``: when the relay ends it ``RUN_TIMEOUT`` (wall clock)."""

    def waiting(self) -> list[dict[str, Any]]:
        """The questions this Run waits on (none unless it paused)."""
        return waiting(self.pause)

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
        """True while ``pending`` and never started: no agent ever took it (not handed over)."""
        return self.status == "pending" and self.owner is None and self.adoptions == 0

    @property
    def resume_owed(self) -> bool:
        """True while suspended with every question settled (the relay owes ``run: pending``)."""
        return self.status == "suspended" and bool(self.pause and self.pause.get("due"))

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a store."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild from ``to_dict()`` output (keys this version does not know are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class RunRegistry:
    """The Runs of one session and the publish rules over them."""

    __slots__ = ("policy", "runs", "session_id", "slots")  # one per loaded session

    def __init__(
        self,
        session_id: str,
        records: list[RunRecord] | None = None,
        *,
        policy: Policy | None = None,
        slots: SlotBook | None = None,
    ) -> None:
        self.session_id = session_id
        self.policy = policy or Policy()
        self.slots = slots
        self.runs: dict[str, RunRecord] = {}
        self.reload(records or [])

    # --------------------------------------------------------------- reading

    def get(self, run_id: str) -> RunRecord | None:
        """The record of a Run, if the session has it."""
        return self.runs.get(run_id)

    def active(self) -> list[RunRecord]:
        """Runs that have not ended."""
        return [r for r in self.runs.values() if not r.terminal]

    def going_on(self) -> list[RunRecord]:
        """Runs ``pending`` or ``active``, oldest first."""
        return self._ordered(r for r in self.runs.values() if r.going_on)

    def queued(self) -> list[RunRecord]:
        """Runs waiting their turn, oldest first."""
        return self._ordered(r for r in self.runs.values() if r.status == "queued")

    def thread_access(self, entry: MessageEntry | None = None) -> ThreadAccess:
        """Whether the session is shared: its first Run's prompt decides, else the policy.

        ``entry`` is a prompt about to be the session's first.
        """
        if self.runs:
            first = min(self.runs.values(), key=lambda r: r.seq)
            return first.thread_access or self.policy.thread_access
        if entry is not None and entry.thread_access is not None:
            return entry.thread_access
        return self.policy.thread_access

    def promotable(self) -> RunRecord | None:
        """The queued Run whose turn has come, if any.

        Interrupting Runs go first, then the rest by age. An ``enqueue`` /
        ``interrupt`` / ``rollback`` Run waits until no Run goes on, nor is owed
        a resume (a suspended Run whose questions are settled is about to go on,
        however late its ``run: pending`` is published); any queued Run waits
        for a free slot.
        """
        going = any((r.going_on or r.resume_owed) and not r.off_thread for r in self.runs.values())
        if not self._slot_left():
            return None
        waiting = sorted(
            (r for r in self.runs.values() if r.status == "queued" and not r.cancel_requested),
            key=lambda r: (r.multitask not in _INTERRUPTING, r.seq),
        )
        for record in waiting:
            if record.multitask in _WAITING and going:
                continue
            return record
        return None

    def resumes_owed(self) -> list[RunRecord]:
        """Suspended Runs owed their resume (every question settled), oldest first.

        A suspended Run holds no slot: its resume takes one, so it is owed
        (``due()``) only while a slot is free, and the session's owed resumes take
        free slots before its queued Runs do (they started first). Until then the
        Run waits, suspended, like a queued one. One whose cancel stands is owed at
        once, free slot or not: it goes on only to end.
        """
        return self._ordered(r for r in self.runs.values() if r.resume_owed)

    def _resumable(self) -> list[RunRecord]:
        """The owed resumes that go on now, oldest first: every one whose cancel stands
        (it goes on only to end, and is not held for a slot), then as many of the others,
        oldest first, as the free slots those leave let go on."""
        owed = self.resumes_owed()
        free = self.slots.available() if self.slots is not None else None
        if free is None:
            return owed
        ending = [r for r in owed if r.cancel_requested]
        held = [r for r in owed if not r.cancel_requested]
        return self._ordered([*ending, *held[: max(0, free - len(ending))]])

    def _slot_left(self, owed: int | None = None) -> bool:
        """True if a slot is free for a Run that was not going on, once the session's
        owed resumes (``owed`` of them; by default those of the records) took theirs."""
        free = self.slots.available() if self.slots is not None else None
        if free is None:
            return True
        if owed is None:
            owed = len(self.resumes_owed())
        return free > owed

    # ---------------------------------------------------------------- rules

    def plan(self, entry: EntryBody, sender: Sender, now_ms: int) -> list[RunRecord]:
        """Check ``entry`` against the rules; return the records it changes (not applied).

        Raises ``RunwireError`` when the entry is not allowed. A prompt that
        starts a Run at once holds a slot of the ``SlotBook`` until ``apply``
        or ``abandon`` settles it.
        """
        if isinstance(entry, MessageEntry):
            if sender.role == "client" and entry.message.role != "user":
                # A system or assistant message from a client would reach the model as the
                # app's instructions or the agent's own words: only agents write those.
                raise RunwireError(
                    UNAUTHORIZED,
                    f"a client's message must have role 'user', not {entry.message.role!r}",
                    details={"role": entry.message.role},
                )
            if entry.intent == "prompt":
                return self._plan_prompt(entry, sender, now_ms)
            self._need(sender, STEER)
            self._live(entry.run_id)
            return []
        if isinstance(entry, CancelEntry):
            return self._plan_cancel(entry, sender, now_ms)
        if isinstance(entry, CancelDenied):
            record = self._live(entry.run_id)
            self._agent_only(sender, "refuse cancels")
            self._not_handed_over(record, sender)
            self._started(record, sender, "refuse its cancels")
            self._check_owner(record, sender)
            if not record.cancel_requested:
                return []
            return [replace(record, cancel_requested=False, updated_ts=now_ms)]
        if isinstance(entry, RunEntry):
            return self._plan_status(entry, sender, now_ms)
        if isinstance(entry, ResponseOpen | ResponseAppend | ResponseClose):
            record = self._live(entry.run_id)
            self._agent_only(sender, "stream responses")
            if record.status == "queued":
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run {record.run_id!r} is queued; it has not started",
                    details={"run_id": record.run_id, "status": record.status},
                )
            self._not_handed_over(record, sender)
            self._check_owner(record, sender)
            return []
        if isinstance(entry, InterruptEntry):
            return self._plan_interrupt(entry, sender, now_ms)
        if isinstance(entry, RefusedEntry | CheckpointEntry):
            record = self._live(entry.run_id)
            self._agent_only(sender, f"publish {entry.kind} entries")
            self._check_owner(record, sender)
            if isinstance(entry, RefusedEntry):
                return []
            self._not_handed_over(record, sender)
            self._started(record, sender, "checkpoint it")
            checkpoint = entry.model_dump(
                include={"step", "turn", "iterations", "seen", "state"}, mode="json"
            )
            return [replace(record, checkpoint=checkpoint, updated_ts=now_ms)]
        raise RunwireError(VALIDATION_ERROR, "unknown entry kind")  # pragma: no cover

    def stamp(
        self, entry: EntryBody, sender: Sender, now_ms: int, changes: list[RunRecord]
    ) -> EntryBody:
        """The entry as the channel stores it: the sender's identity, the time, and what
        the relay decided (for a prompt: strategy in effect, ``queued``, ``interrupts``).

        Whatever the publisher put in these fields is overwritten.
        """
        update: dict[str, Any] = {
            "serial": None,
            "ts": now_ms,
            "user_id": sender.user_id,
            "client_id": sender.client_id,
        }
        if isinstance(entry, MessageEntry):
            record = next((r for r in changes if r.run_id == entry.run_id), None)
            if entry.intent == "prompt" and record is not None:
                update["multitask"] = record.multitask
                update["queued"] = True if record.status == "queued" else None
                update["interrupts"] = list(record.interrupts) or None
            else:
                update.update(multitask=None, queued=None, interrupts=None)
        elif isinstance(entry, CancelEntry) and sender.role != "relay":
            update["interrupted_by"] = None
        elif isinstance(entry, RunEntry):
            record = next((r for r in changes if r.run_id == entry.run_id), None)
            active = entry.status == "active" and record is not None
            update["timeout"] = record.timeout if active and record is not None else None
        elif isinstance(entry, InterruptEntry) and entry.status != "paused":
            record = next((r for r in changes if r.run_id == entry.run_id), None)
            pause = (record.pause if record is not None else None) or {}
            answers = pause.get("answers", {})
            update["interrupts"] = [
                Interrupt.model_validate({**q, "response": answers.get(q["id"])})
                for q in pause.get("interrupts", [])
                if entry.status == "declined" or q["id"] in (entry.responses or {})
            ]
            update["checkpoint"] = None
        return entry.model_copy(update=update)

    def replay(self, entry: EntryBody) -> list[RunRecord]:
        """Take in an entry the channel already holds; returns (and applies) what it changed.

        Every relay node replays every entry of a session in serial order, so
        all hold the same records. The entry passed the rules when it was
        published, so its effect is taken as it was decided then: a Run's
        status change is applied as it stands, a prompt is queued or not as its
        stamp says (nodes may differ in free slots), and who sent an entry is
        read from its stamps without checking rights again. An entry that no
        longer applies returns ``[]``.
        """
        ts = entry.ts or 0
        client_id = entry.client_id or ""
        if isinstance(entry, RunEntry):
            record = self.runs.get(entry.run_id)
            if record is None or record.terminal or record.status == entry.status:
                return []
            owner = record.owner
            adoptions = record.adoptions
            pause = record.pause
            if entry.status == "pending" and record.status in ("active", "suspended"):
                # The relay handed a Run whose agent went away to another worker.
                owner = None
                adoptions += 1
                if pause is not None:
                    pause = {**pause, "due": False}
            else:
                pause = _taken_up(record, entry.status)
            if (
                owner is None
                and client_id != RELAY.client_id
                and entry.status != "pending"
                and not self._ends_for_interrupt(record, entry)
            ):
                # An agent's first move makes it the owner; the relay's never does.
                owner = client_id
            timeout = entry.timeout if entry.status == "active" else record.timeout
            changes = [
                replace(
                    record,
                    status=entry.status,
                    owner=owner,
                    error=entry.error.model_dump() if entry.error else None,
                    durable=record.durable or bool(entry.status == "active" and entry.durable),
                    adoptions=adoptions,
                    pause=pause,
                    updated_ts=ts,
                    timeout=timeout,
                    deadline_ms=_deadline(entry.status, timeout, ts),
                )
            ]
        else:
            role: Literal["client", "agent", "relay"] = "agent"
            if client_id == RELAY.client_id or (
                isinstance(entry, CancelEntry) and entry.interrupted_by
            ):
                role = "relay"
            elif isinstance(entry, MessageEntry | CancelEntry) or (
                isinstance(entry, InterruptEntry) and entry.status != "paused"
            ):
                role = "client"
            sender = Sender(client_id=client_id, user_id=entry.user_id, role=role)
            try:
                changes = self.plan(entry, sender, ts)
            except RunwireError:
                return []
            if isinstance(entry, MessageEntry) and entry.intent == "prompt" and changes:
                record = changes[0]
                changes = [
                    replace(
                        record,
                        status="queued" if entry.queued else "pending",
                        multitask=entry.multitask or record.multitask,
                        interrupts=list(entry.interrupts or record.interrupts),
                    ),
                    *changes[1:],
                ]
        self.apply(changes)
        return changes

    def _ends_for_interrupt(self, record: RunRecord, entry: RunEntry) -> bool:
        """True if ``entry`` is the relay's ``run: cancelled`` for a pending Run that a
        waiting interrupt names: ``due()`` publishes it under the interrupting sender's
        identity, so its stamps name a client, not the relay, and it makes no owner."""
        return (
            entry.status == "cancelled"
            and record.status == "pending"
            and any(
                r.status == "queued"
                and not r.cancel_requested
                and record.run_id in r.interrupts
                and r.client_id == entry.client_id
                and r.user_id == entry.user_id
                for r in self.runs.values()
            )
        )

    def apply(self, records: list[RunRecord]) -> None:
        """Make planned changes current (after the store wrote them)."""
        for record in records:
            self.runs[record.run_id] = record
        if self.slots is not None:
            self.slots.sync(records)

    def abandon(self, records: list[RunRecord]) -> None:
        """Planned changes that were not written: give back the slots they held."""
        if self.slots is None:
            return
        self.slots.sync(self.runs.get(r.run_id, replace(r, status="error")) for r in records)

    def reload(self, records: list[RunRecord]) -> None:
        """Replace every record (read back from the store after a failed write)."""
        self.runs = {r.run_id: r for r in records}
        if self.slots is not None:
            self.slots.replace_session(self.session_id, records)

    def due(self) -> list[tuple[EntryBody, Sender]]:
        """What the relay owes the session now, with the identity to publish it under.

        In order: ``run: cancelled`` for each pending Run no agent started whose
        cancel stands; for each queued interrupting Run, a ``cancel`` (stamped with
        the interrupting sender's identity and ``interrupted_by``) for each Run
        it interrupts that goes on, or ``run: cancelled`` for one no agent has
        started; ``run: cancelled`` for each queued Run whose sender cancelled
        it; ``run: pending`` for each suspended Run whose questions are settled
        (its resume); ``run: pending`` for the queued Run whose turn came. Ids are
        deterministic; publishing them goes through ``plan`` like any entry,
        which refuses what is no longer due.
        """
        out: list[tuple[EntryBody, Sender]] = []
        for record in self._ordered(self.runs.values()):
            if record.unstarted and record.cancel_requested:
                out.append((_status(record.run_id, "cancelled"), RELAY))
        for record in self.queued():
            if record.cancel_requested:
                out.append((_status(record.run_id, "cancelled"), RELAY))
                continue
            if record.multitask not in _INTERRUPTING:
                continue
            asker = Sender(
                client_id=record.client_id or RELAY.client_id,
                user_id=record.user_id,
                role="relay",
            )
            for target_id in record.interrupts:
                target = self.runs.get(target_id)
                if (
                    target is None
                    or not (target.going_on or target.resume_owed)
                    or target.interrupted_by is not None
                ):
                    continue
                if target.status == "pending":
                    out.append((_status(target_id, "cancelled"), asker))
                elif not target.cancel_requested:
                    cancel = CancelEntry(
                        id=relay_entry_id(record.run_id, "interrupt", target_id),
                        run_id=target_id,
                        reason="interrupted by a newer Run",
                        interrupted_by=record.run_id,
                    )
                    out.append((cancel, asker))
        for record in self._resumable():
            assert record.pause is not None
            entry = RunEntry(
                id=_resume_id(record.run_id, int(record.pause.get("round", 0))),
                run_id=record.run_id,
                status="pending",
            )
            out.append((entry, RELAY))
        turn = self.promotable()
        if turn is not None:
            out.append((_status(turn.run_id, "pending"), RELAY))
        return out

    # ------------------------------------------------------------- internal

    def _plan_prompt(self, entry: MessageEntry, sender: Sender, now_ms: int) -> list[RunRecord]:
        self._need(sender, PUBLISH)
        if entry.run_id in self.runs:
            raise RunwireError(
                DUPLICATE_RUN,
                f"run {entry.run_id!r} already exists",
                details={"run_id": entry.run_id},
            )
        parent = self.runs.get(entry.parent_run_id) if entry.parent_run_id else None
        child = parent is not None and parent.going_on
        off_thread = entry.activate is False
        strategy: Multitask = (
            "alongside" if child or off_thread else entry.multitask or self.policy.multitask
        )
        moved_on = [
            replace(r, pause={**(r.pause or {}), "moved_on": True, "due": True}, updated_ts=now_ms)
            for r in self._ordered(self.runs.values())
            if not r.terminal and r.waiting()
        ]
        after = {**self.runs, **{r.run_id: r for r in moved_on}}
        owed = [r for r in after.values() if r.resume_owed]
        # A suspended Run owed its resume (this prompt's own move on included) is about to
        # go on: every strategy treats it as a Run going on.
        going = self._ordered(r for r in [*self.going_on(), *owed] if not r.off_thread)
        if strategy != "alongside":
            others = [r.run_id for r in going if r.user_id != sender.user_id]
            if others and self.thread_access(entry) != "shared":
                raise RunwireError(
                    THREAD_ACCESS_DENIED,
                    "another user's Run is going on in this session, which is not shared",
                    details={"run_ids": others, "multitask": strategy},
                )
        if strategy == "reject" and going:
            raise RunwireError(
                THREAD_BUSY,
                "a Run is going on in this session",
                details={"run_ids": [r.run_id for r in going]},
            )
        interrupts: list[str] = []
        if strategy in _INTERRUPTING:
            for record in going:
                self._need_cancel(sender, record)
            interrupts = [r.run_id for r in going]
        if strategy in _WAITING:
            queued = bool(going) or (strategy == "enqueue" and bool(self.queued()))
        else:
            queued = False
        if not queued and not child and not self._slot_left(len(owed)):
            # No slot is free, or the owed resumes (this prompt's move on included) take
            # the free ones first.
            queued = True
        record = RunRecord(
            session_id=self.session_id,
            run_id=entry.run_id,
            agent=entry.agent or "default",
            status="queued" if queued else "pending",
            prompt_id=entry.message.id,
            user_id=sender.user_id,
            client_id=sender.client_id,
            created_ts=now_ms,
            updated_ts=now_ms,
            seq=max((r.seq for r in self.runs.values()), default=0) + 1,
            multitask=strategy,
            parent_run_id=entry.parent_run_id,
            thread_access=entry.thread_access,
            interrupts=interrupts,
            off_thread=off_thread,
        )
        if not queued and self.slots is not None:
            self.slots.hold((self.session_id, entry.run_id))
        return [record, *moved_on]

    def _plan_cancel(self, entry: CancelEntry, sender: Sender, now_ms: int) -> list[RunRecord]:
        record = self._live(entry.run_id)
        if sender.role == "relay" and entry.interrupted_by:
            self._still_interrupting(record, entry.interrupted_by)
        self._need_cancel(sender, record)
        new = record
        if not record.cancel_requested:
            new = replace(new, cancel_requested=True)
        if sender.role == "relay" and entry.interrupted_by and record.interrupted_by is None:
            new = replace(new, interrupted_by=entry.interrupted_by)
        if record.status == "suspended" and record.waiting():
            # Nobody runs a Run that waits on people: end the pause so a worker applies the cancel.
            reason = entry.reason or "the Run was cancelled"
            new = replace(
                new, pause={**(new.pause or {}), "declined": {"reason": reason}, "due": True}
            )
        if new == record:
            return []
        return [replace(new, updated_ts=now_ms)]

    def _relay_may_end(self, record: RunRecord) -> None:
        """The relay ends only Runs no agent started, and only while that is owed: a queued
        Run whose cancel stands, a pending one never started whose cancel stands, or a
        pending one that a waiting ``interrupt`` names."""
        if record.status not in ("queued", "pending"):
            # A started one gets a cancel entry instead, unless its deadline passed.
            raise RunwireError(
                VALIDATION_ERROR,
                f"run {record.run_id!r} has started; the relay cancels it with a cancel entry",
                details={"run_id": record.run_id, "status": record.status},
            )
        if record.status == "queued" and not record.cancel_requested:
            raise RunwireError(
                VALIDATION_ERROR,
                f"run {record.run_id!r} waits its turn and nobody cancelled it",
                details={"run_id": record.run_id, "status": record.status},
            )
        if record.unstarted and record.cancel_requested:
            return
        if record.status == "pending" and not any(
            r.status == "queued" and not r.cancel_requested and record.run_id in r.interrupts
            for r in self.runs.values()
        ):
            raise RunwireError(
                RUN_NOT_ACTIVE,
                f"no waiting interrupt names run {record.run_id!r} any more",
                details={"run_id": record.run_id, "status": record.status},
            )

    def _still_interrupting(self, target: RunRecord, interrupting_id: str) -> None:
        """An interrupt's cancel is owed only while its Run waits for its turn, uncancelled.

        ``due()`` works it out, and another device may cancel the interrupting prompt
        (through any node) before the relay's cancel is stored: that cancel is stale.
        """
        interrupting = self.runs.get(interrupting_id)
        if (
            interrupting is None
            or interrupting.status != "queued"
            or interrupting.cancel_requested
            or target.run_id not in interrupting.interrupts
        ):
            raise RunwireError(
                RUN_NOT_ACTIVE,
                f"run {interrupting_id!r} no longer interrupts run {target.run_id!r}",
                details={
                    "run_id": target.run_id,
                    "interrupted_by": interrupting_id,
                    "status": interrupting.status if interrupting else None,
                },
            )

    def _plan_status(self, entry: RunEntry, sender: Sender, now_ms: int) -> list[RunRecord]:
        record = self._require(entry.run_id)
        if sender.role == "client":
            raise RunwireError(UNAUTHORIZED, "only agents change a Run's status")
        self._need(sender, AGENT)
        if entry.status == "pending" and record.status in ("active", "suspended"):
            if _is_resume(entry, record) and not record.resume_owed:
                # Worked out while the Run waited; its owner went on (or it paused anew).
                raise RunwireError(
                    RUN_NOT_ACTIVE,
                    f"run {record.run_id!r} is not owed this resume any more",
                    details={"run_id": record.run_id, "status": record.status},
                )
            released = self._release(record, sender, now_ms)
            if record.status == "suspended":
                self._take_slot(record)
            return [released]
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
        if sender.role != "relay":
            if record.status == "queued":
                raise RunwireError(
                    UNAUTHORIZED,
                    f"run {record.run_id!r} is queued; only the relay moves it",
                    details={"run_id": record.run_id},
                )
        elif entry.status == "pending":
            if self.promotable() is not record:
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run {record.run_id!r} is not next in line",
                    details={"run_id": record.run_id},
                )
        elif entry.status == "cancelled" and not _timed_out(record, entry, now_ms):
            self._relay_may_end(record)
        self._check_owner(record, sender)
        if record.status == "suspended" and entry.status == "active":
            self._take_slot(record)  # its owner resumes it itself
        owner = record.owner
        if sender.role == "agent" and owner is None:
            owner = sender.client_id
        timeout = record.timeout
        if entry.status == "active":
            timeout = effective_timeout(entry.timeout, self.policy.max_run_seconds)
        new = replace(
            record,
            status=entry.status,
            owner=owner,
            error=entry.error.model_dump() if entry.error else None,
            durable=record.durable or bool(entry.status == "active" and entry.durable),
            pause=_taken_up(record, entry.status),
            updated_ts=now_ms,
            timeout=timeout,
            deadline_ms=_deadline(entry.status, timeout, now_ms),
        )
        if entry.status == "pending" and self.slots is not None:
            self.slots.hold((self.session_id, record.run_id))
        return [new]

    def _take_slot(self, record: RunRecord) -> None:
        """A suspended Run going on again takes a slot: one must be free, and the session's
        owed resumes take the free ones oldest first (``due()`` owes them in that order),
        except those whose cancel stands, which go on (to end) whatever the slots."""
        if self.slots is None:
            return
        if record.resume_owed:
            ok = record in self._resumable()
        else:
            ok = self._slot_left()
        if not ok:
            raise RunwireError(
                VALIDATION_ERROR,
                f"no slot of max_concurrent_runs is free for run {record.run_id!r}; it stays "
                "suspended until one frees",
                details={"run_id": record.run_id, "status": record.status},
            )
        self.slots.hold((self.session_id, record.run_id))

    def _ordered(self, records: Iterable[RunRecord]) -> list[RunRecord]:
        return sorted(records, key=lambda r: r.seq)

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
            pause={**record.pause, "due": False} if record.pause is not None else None,
            updated_ts=now_ms,
            deadline_ms=None,
        )

    def _plan_interrupt(
        self, entry: InterruptEntry, sender: Sender, now_ms: int
    ) -> list[RunRecord]:
        record = self._live(entry.run_id)
        old = record.pause or {}
        if entry.status == "paused":
            self._agent_only(sender, "pause Runs")
            self._check_owner(record, sender)
            if record.status != "active" or not entry.interrupts:
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run {record.run_id!r} pauses on questions only while active",
                    details={"run_id": record.run_id, "status": record.status},
                )
            pause = {
                "version": PAUSE_VERSION,
                "round": int(old.get("round", 0)) + 1,
                "interrupts": [q.model_dump(mode="json") for q in entry.interrupts],
                "answers": dict(old.get("answers", {})),
                "expired": list(old.get("expired", [])),
                "moved_on": False,
                "declined": None,
                "step": entry.checkpoint,
                "due": False,
            }
            return [replace(record, pause=pause, updated_ts=now_ms)]
        self._need(sender, PUBLISH)
        if not record.waiting():
            raise RunwireError(
                VALIDATION_ERROR,
                f"run {record.run_id!r} waits on no questions",
                details={"run_id": record.run_id},
            )
        if entry.status == "declined":
            pause = {**old, "declined": {"reason": entry.reason}, "due": True}
            return [replace(record, pause=pause, updated_ts=now_ms)]
        answers = dict(old.get("answers", {}))
        for interrupt_id, answer in (entry.responses or {}).items():
            check_answer(old, interrupt_id, answer, now_ms)
            answers[interrupt_id] = answer
        answered: dict[str, Any] = {**old, "answers": answers}
        left = waiting(answered)
        if all(q.get("expires_at") is not None and now_ms > q["expires_at"] for q in left):
            expired: list[str] = list(old.get("expired", []))
            answered["expired"] = expired + [q["id"] for q in left]
            answered["due"] = True
        elif not entry.responses:
            raise RunwireError(
                VALIDATION_ERROR,
                "a resume without answers needs every question it leaves out to have expired",
                details={"run_id": record.run_id},
            )
        return [replace(record, pause=answered, updated_ts=now_ms)]

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
    def _need(sender: Sender, capability: str) -> None:
        if not sender.can(capability):
            raise RunwireError(
                UNAUTHORIZED,
                f"the token does not grant {capability!r} in this session",
                details={"needs": capability},
            )

    def _agent_only(self, sender: Sender, what: str) -> None:
        if sender.role == "client":
            raise RunwireError(UNAUTHORIZED, f"only agents {what}")
        self._need(sender, AGENT)

    @staticmethod
    def _need_cancel(sender: Sender, record: RunRecord) -> None:
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

    @staticmethod
    def _not_handed_over(record: RunRecord, sender: Sender) -> None:
        """A Run the relay handed on takes an agent's output only once a worker started it."""
        if sender.role == "relay" or record.status != "pending" or record.adoptions == 0:
            return
        raise RunwireError(
            RUN_NOT_ACTIVE,
            f"run {record.run_id!r} was handed to another worker; it is pending until one "
            "starts it",
            details={"run_id": record.run_id, "status": record.status},
        )

    @staticmethod
    def _started(record: RunRecord, sender: Sender, what: str) -> None:
        """Only the agent that started a Run (its owner) refuses its cancels or checkpoints
        it: a queued or pending Run has no owner yet, and any agent could otherwise clear
        the cancel it is owed (a queued Run would then never end) or plant its checkpoint."""
        if sender.role == "relay" or record.owner is not None:
            return
        raise RunwireError(
            UNAUTHORIZED,
            f"run {record.run_id!r} has not been started; only the agent that starts it may {what}",
            details={"run_id": record.run_id, "status": record.status},
        )

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


def rights_refusal(entry: EntryBody, sender: Sender) -> RunwireError | None:
    """Why ``sender`` may never publish an entry like ``entry`` in the session, whatever its
    Runs (``UNAUTHORIZED``), or None: the capability (or role) the entry's kind needs.

    The relay acknowledges a repeated entry id as a duplicate without storing anything;
    it does so only for a sender that may publish that kind of entry, or any token could
    learn which ids a session it has no right in holds (and their serials and Runs).
    """
    if sender.role == "relay":
        return None
    if isinstance(entry, MessageEntry):
        needs = PUBLISH if entry.intent == "prompt" else STEER
    elif isinstance(entry, CancelEntry):
        needs = CANCEL_ANY if sender.can(CANCEL_ANY) else CANCEL
    elif isinstance(entry, InterruptEntry) and entry.status != "paused":
        needs = PUBLISH
    elif sender.role == "client":
        return RunwireError(UNAUTHORIZED, f"only agents publish {entry.kind} entries")
    else:
        needs = AGENT
    if sender.can(needs):
        return None
    return RunwireError(
        UNAUTHORIZED,
        f"the token does not grant {needs!r} in this session",
        details={"needs": needs},
    )


def effective_timeout(asked: float | None, most: float | None) -> float | None:
    """The deadline the relay enforces: the agent's ``timeout``, at most ``most`` seconds."""
    if asked is None:
        return most
    return asked if most is None else min(asked, most)


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


def _deadline(status: str, timeout: float | None, now_ms: int) -> int | None:
    """When a Run that goes to ``status`` at ``now_ms`` ends ``RUN_TIMEOUT`` (None: never)."""
    if status != "active" or timeout is None:
        return None
    return now_ms + round(timeout * 1000)


def _timed_out(record: RunRecord, entry: RunEntry, now_ms: int) -> bool:
    """True if ``entry`` is the relay's timeout end of ``record``, due at ``now_ms``."""
    return (
        record.status == "active"
        and record.deadline_ms is not None
        and now_ms >= record.deadline_ms
        and entry.error is not None
        and entry.error.code == RUN_TIMEOUT
    )


def _status(run_id: str, status: Literal["pending", "cancelled"]) -> RunEntry:
    return RunEntry(id=relay_entry_id(run_id, status), run_id=run_id, status=status)


def _resume_id(run_id: str, round_: int) -> str:
    """The id of the relay's resume of a Run's pause ``round_`` (see ``due()``)."""
    return relay_entry_id(run_id, "resume", str(round_))


def _is_resume(entry: RunEntry, record: RunRecord) -> bool:
    """True if ``entry`` is a resume ``due()`` worked out for one of the Run's pauses."""
    rounds = int((record.pause or {}).get("round", 0))
    return any(entry.id == _resume_id(record.run_id, n) for n in range(rounds + 1))


def _taken_up(record: RunRecord, status: str) -> dict[str, Any] | None:
    """The pause once ``record`` goes to ``status``: its agent resuming a suspended Run
    itself takes up the settled pause, so the relay no longer owes it a resume."""
    if record.pause is None or status != "active" or record.status != "suspended":
        return record.pause
    return {**record.pause, "due": False}
