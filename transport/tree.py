"""The conversation tree: a session's entries folded into messages, Runs and outcomes.

Theory of operation
-------------------
``ConversationTree`` is sans-I/O: fed relay-stamped entries (``transport.frames``
models with ``serial`` set, or dicts ``decode_entry`` accepts), it answers
questions, and every fold returns the events it caused. The Python client, the
agent and the JavaScript client (checked by the JSON vectors under
``tests/vectors/tree``) run these rules, so the same entries give the same tree.

Order. Entries are kept by serial; a serial already held is ignored (``[]``).
An entry newer than all held folds incrementally. An older one (a history
page) is merged and the state rebuilt by folding every entry again in serial
order, so arrival order never matters. A rebuild reports the difference:
``MessageEvent`` (``added`` / ``updated``) per new or changed message in serial
order, then ``RunEvent`` per new or changed Run, then ``DeliveryEvent`` for
outcomes never reported before (each outcome is reported once, ever).

Nodes. A ``message`` entry adds its ``UIMessage`` as sent; a steer, follow-up
or inject message gets ``metadata.queued`` set to its intent unless the sender
set it. ``response_open`` adds an empty assistant message (id ``message_id``,
the entry's metadata); a ``response_open`` naming a response of the same Run
that is still open starts it over (empty again, the new entry's metadata: a
step retried after a crash replaces what the first attempt half published);
``response_append`` folds stream chunks into it (below); ``response_close``
replaces its content with the carried message (keeping id ``message_id``) and
closes it. Appends and closes to a closed response, a user message or an
unknown id are ignored. A message or response whose id the tree holds adds no
node (a prompt still creates its Run; a response still records ``seen``).

Parents. A ``parent_id`` the tree holds is the parent. Otherwise (absent, not
loaded, bogus) the parent is the tip of the *default path*, which depends on
entries only: from the root, at each node, the child with the highest serial.
Local selections never change parents (a sender continuing a selected branch
names the parent). ``ViewMessage.parent_id`` is the parent in the tree. A node
whose parent already has children starts a branch.

Active path (``messages()``): at each node the locally selected child, else the
child with the highest serial. A new child drops the selection at its parent,
so a fork off the active path becomes the active branch. ``select_branch(id)``
selects every step from the root to ``id`` and returns
``MessageEvent(op="updated")`` for the messages it brings onto the path.

Chunks fold into a response by the rules of ``transport.chunks``.

Refusals. A ``refused`` entry takes its message out of ``messages()`` (the
node stays, with ``ViewMessage.refused``, so ``message(id)`` still finds it
and its children keep their place), resolves its outcome as refused (see
``transport.outcomes``) and is listed by ``refusals()``. The message itself
may never have been on the channel (the relay refused it).

Runs. A Run appears with the first entry naming it: a prompt makes it
``pending`` with its ``client_id``, ``user_id`` and ``agent`` (default
``"default"``); another entry (the prompt is in an older page) makes it
``pending`` with those ``None``, or takes the run entry's status. Run entries
set status, ``error`` and ``end_reason``; a terminal status is final.
``cancel`` sets ``cancel_requested``. Steer, follow-up and inject messages go
to ``transport.outcomes``; each resolution is a ``DeliveryEvent``. A run
entry's ``seen`` (injects saved at the end) consumes those messages before its
status applies. ``checkpoint`` entries change no message; ``checkpoint(run_id)``
returns the latest.

Events of one incremental fold: ``RunEvent`` for a new Run (or a status
change), then ``MessageEvent``, then ``DeliveryEvent`` in resolution order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .chunks import fold_chunks
from .codec import decode_entry
from .errors import VALIDATION_ERROR, RunwireError
from .frames import (
    CancelEntry,
    CheckpointEntry,
    Intent,
    MessageEntry,
    RefusedEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEndReason,
    RunEntry,
    RunStatus,
)
from .messages import UIMessage
from .outcomes import OutcomeBook, OutcomeRecord
from .runs import TERMINAL, end_reason

__all__ = [
    "ConversationTree",
    "DeliveryEvent",
    "Entry",
    "MessageEvent",
    "Refusal",
    "ResponseState",
    "RunEvent",
    "RunInfo",
    "TreeEvent",
    "ViewMessage",
]

Entry = (
    MessageEntry
    | RunEntry
    | CancelEntry
    | ResponseOpen
    | ResponseAppend
    | ResponseClose
    | RefusedEntry
    | CheckpointEntry
)
_ENTRY_TYPES = (
    MessageEntry,
    RunEntry,
    CancelEntry,
    ResponseOpen,
    ResponseAppend,
    ResponseClose,
    RefusedEntry,
    CheckpointEntry,
)


@dataclass(frozen=True)
class ViewMessage:
    """A message as the tree holds it: the ``UIMessage`` and where it sits.

    ``serial`` is the serial of the entry that created it (a response's
    ``response_open``); ``intent`` is ``None`` for responses; ``refused`` is
    true once an input check refused the message (it is then left out of
    ``messages()``).
    """

    message: UIMessage
    run_id: str
    serial: int
    parent_id: str | None = None
    intent: Intent | None = None
    refused: bool = False


@dataclass(frozen=True)
class Refusal:
    """An input check refused a queued message: which, where, and the error object.

    ``client_id`` is who published the refusal (``"relay"``, or the agent).
    """

    message_id: str
    run_id: str
    intent: Intent
    error: dict[str, Any]
    serial: int
    client_id: str | None = None


@dataclass(frozen=True)
class ResponseState:
    """One response of a Run: the message, whether it was closed, what it had ``seen``."""

    view: ViewMessage
    closed: bool
    seen: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunInfo:
    """A snapshot of one Run as the channel's entries describe it.

    ``client_id`` / ``user_id`` / ``agent`` come from the Run's prompt (``None``
    while the prompt is not loaded).
    """

    run_id: str
    status: RunStatus
    client_id: str | None = None
    user_id: str | None = None
    end_reason: RunEndReason | None = None
    error: dict[str, Any] | None = None
    agent: str | None = None


@dataclass(frozen=True)
class MessageEvent:
    """A message was added to the tree, or changed (content, parent, or visibility)."""

    message: ViewMessage
    op: Literal["added", "updated"]
    kind: Literal["message"] = field(default="message", init=False)


@dataclass(frozen=True)
class RunEvent:
    """A Run appeared or its status (or error) changed."""

    run: RunInfo
    kind: Literal["run"] = field(default="run", init=False)


@dataclass(frozen=True)
class DeliveryEvent:
    """A steering message's outcome resolved (reported once per message)."""

    outcome: OutcomeRecord
    kind: Literal["delivery"] = field(default="delivery", init=False)


TreeEvent = MessageEvent | RunEvent | DeliveryEvent


@dataclass
class _Node:
    view: ViewMessage
    response: bool
    children: list[str] = field(default_factory=list)
    closed: bool = False
    part_ids: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class _Run:
    info: RunInfo
    cancel_requested: bool = False
    inputs: list[str] = field(default_factory=list)
    seen: dict[str, None] = field(default_factory=dict)
    prompt: str | None = None
    responses: dict[str, list[str]] = field(default_factory=dict)  # id -> its seen
    checkpoint: CheckpointEntry | None = None


class _Fold:
    """Everything derived from entries; rebuilt from scratch when older entries arrive."""

    def __init__(self, selections: dict[str | None, str] | None) -> None:
        self.selections = selections  # None while rebuilding: only live folds move them
        self.nodes: dict[str, _Node] = {}
        self.roots: list[str] = []
        self.spine: list[str] = []  # the default path (highest-serial child at each node)
        self.spine_pos: dict[str, int] = {}
        self.runs: dict[str, _Run] = {}
        self.book = OutcomeBook()
        self.refusals: dict[str, Refusal] = {}

    def apply(self, e: Entry) -> list[TreeEvent]:
        """Fold one entry (the newest so far); the events it caused."""
        assert e.serial is not None
        events: list[TreeEvent] = []
        run, created = self._run(e)
        if isinstance(e, RunEntry):
            if e.seen:
                run.seen.update(dict.fromkeys(e.seen))
                self.book.saw(e.run_id, e.seen)
            old = run.info
            if old.status not in TERMINAL:
                run.info = replace(
                    old,
                    status=e.status,
                    end_reason=end_reason(e.status),
                    error=e.error.model_dump() if e.error is not None else None,
                )
            if created or run.info != old:
                events.append(RunEvent(run.info))
            events.extend(DeliveryEvent(r) for r in self.book.run_status(e.run_id, e.status))
            return events
        if created:
            events.append(RunEvent(run.info))
        if isinstance(e, MessageEntry):
            mid = e.message.id
            if mid in self.nodes or mid in self.refusals:
                return events
            message = e.message
            if e.intent != "prompt" and "queued" not in message.metadata:
                metadata = {**message.metadata, "queued": e.intent}
                message = message.model_copy(update={"metadata": metadata})
            node = self._add(message, e.run_id, e.serial, e.parent_id, e.intent, response=False)
            events.append(MessageEvent(node.view, "added"))
            if e.intent == "prompt":
                run.prompt = run.prompt or mid
            else:
                run.inputs.append(mid)
                events.extend(DeliveryEvent(r) for r in self.book.track(mid, e.run_id))
        elif isinstance(e, CancelEntry):
            run.cancel_requested = True
        elif isinstance(e, RefusedEntry):
            events.extend(self._refuse(e))
        elif isinstance(e, CheckpointEntry):
            if run.checkpoint is None or e.step >= run.checkpoint.step:
                run.checkpoint = e
        elif isinstance(e, ResponseOpen):
            run.seen.update(dict.fromkeys(e.seen))
            self.book.saw(e.run_id, e.seen)
            existing = self.nodes.get(e.message_id)
            if existing is None:
                message = UIMessage(
                    id=e.message_id, role="assistant", parts=[], metadata=dict(e.metadata)
                )
                node = self._add(message, e.run_id, e.serial, e.parent_id, None, response=True)
                run.responses[e.message_id] = list(e.seen)
                events.append(MessageEvent(node.view, "added"))
            elif existing.response and not existing.closed and existing.view.run_id == e.run_id:
                # A retried step: start the response over.
                run.responses[e.message_id] = list(e.seen)
                existing.part_ids.clear()
                message = existing.view.message.model_copy(
                    update={"parts": [], "metadata": dict(e.metadata)}
                )
                if message != existing.view.message:
                    existing.view = replace(existing.view, message=message)
                    events.append(MessageEvent(existing.view, "updated"))
        elif isinstance(e, ResponseAppend | ResponseClose):
            target = self.nodes.get(e.message_id)
            if target is not None and target.response and not target.closed:
                if isinstance(e, ResponseAppend):
                    message = _fold_chunks(target, e.chunks)
                else:
                    target.closed = True
                    message = e.message
                    if message.id != e.message_id:
                        message = message.model_copy(update={"id": e.message_id})
                if message != target.view.message:
                    target.view = replace(target.view, message=message)
                    events.append(MessageEvent(target.view, "updated"))
        return events

    def _refuse(self, e: RefusedEntry) -> list[TreeEvent]:
        assert e.serial is not None
        if e.message_id in self.refusals:
            return []
        self.refusals[e.message_id] = Refusal(
            message_id=e.message_id,
            run_id=e.run_id,
            intent=e.intent,
            error=e.error.model_dump(),
            serial=e.serial,
            client_id=e.client_id,
        )
        events: list[TreeEvent] = []
        node = self.nodes.get(e.message_id)
        if node is not None and not node.response and not node.view.refused:
            node.view = replace(node.view, refused=True)
            events.append(MessageEvent(node.view, "updated"))
        records = self.book.refuse(e.message_id, e.run_id, e.error.model_dump())
        events.extend(DeliveryEvent(r) for r in records)
        return events

    def _run(self, e: Entry) -> tuple[_Run, bool]:
        run = self.runs.get(e.run_id)
        if run is not None:
            return run, False
        info = RunInfo(run_id=e.run_id, status="pending")
        if isinstance(e, MessageEntry) and e.intent == "prompt":
            info = replace(
                info, client_id=e.client_id, user_id=e.user_id, agent=e.agent or "default"
            )
        run = self.runs[e.run_id] = _Run(info)
        return run, True

    def _add(
        self,
        message: UIMessage,
        run_id: str,
        serial: int,
        parent_id: str | None,
        intent: Intent | None,
        *,
        response: bool,
    ) -> _Node:
        if parent_id is None or parent_id not in self.nodes:
            parent_id = self.spine[-1] if self.spine else None
        node = _Node(ViewMessage(message, run_id, serial, parent_id, intent), response)
        self.nodes[message.id] = node
        if parent_id is None:
            self.roots.append(message.id)
            self.spine_pos.clear()
            self.spine.clear()
        else:
            self.nodes[parent_id].children.append(message.id)
            pos = self.spine_pos.get(parent_id)
            if pos is not None:
                for dropped in self.spine[pos + 1 :]:
                    del self.spine_pos[dropped]
                del self.spine[pos + 1 :]
        if parent_id is None or parent_id in self.spine_pos:
            self.spine_pos[message.id] = len(self.spine)
            self.spine.append(message.id)
        if self.selections is not None:
            self.selections.pop(parent_id, None)
        return node

    def path(self) -> list[str]:
        if not self.selections:
            return list(self.spine)
        out: list[str] = []
        key: str | None = None
        children = self.roots
        while children:
            pick = self.selections.get(key) or children[-1]
            out.append(pick)
            key = pick
            children = self.nodes[pick].children
        return out


def _fold_chunks(node: _Node, chunks: list[dict[str, Any]]) -> UIMessage:
    """The node's message with ``chunks`` folded in (a new object; the old one is untouched)."""
    return fold_chunks(node.view.message, node.part_ids, chunks)


class ConversationTree:
    """A session's entries folded into a conversation tree, Runs and steering outcomes.

    Feed it every entry the relay delivers (live, and history pages) with
    ``fold`` / ``fold_older``; read it with ``messages``, ``runs`` and friends.
    ``fold`` and ``fold_older`` raise ``RunwireError(VALIDATION_ERROR)`` for an
    entry that does not validate or has no serial (nothing is folded then); bad
    content inside a valid entry never raises.
    """

    def __init__(self) -> None:
        self._entries: dict[int, Entry] = {}
        self._oldest: int | None = None
        self._newest: int | None = None
        self._selected: dict[str | None, str] = {}
        self._reported: set[str] = set()
        self._state = _Fold(self._selected)

    # ------------------------------------------------------------- folding

    def fold(self, entry: Entry | Mapping[str, Any]) -> list[TreeEvent]:
        """Fold one stamped entry; the events it caused (``[]`` for a serial already folded)."""
        return self.fold_older([entry])

    def fold_older(self, entries: Iterable[Entry | Mapping[str, Any]]) -> list[TreeEvent]:
        """Fold several stamped entries, in any order (a history page); the events they caused.

        Entries newer than everything held fold incrementally; any older one
        makes the tree rebuild, and the events then describe what changed.
        """
        fresh: dict[int, Entry] = {}
        for raw in entries:
            entry = _coerce(raw)
            assert entry.serial is not None
            if entry.serial not in self._entries:
                fresh.setdefault(entry.serial, entry)
        if not fresh:
            return []
        incremental = self._newest is None or min(fresh) > self._newest
        self._entries.update(fresh)
        low, high = min(fresh), max(fresh)
        self._oldest = low if self._oldest is None else min(self._oldest, low)
        self._newest = high if self._newest is None else max(self._newest, high)
        if not incremental:
            return self._rebuild()
        events: list[TreeEvent] = []
        for serial in sorted(fresh):
            events.extend(self._state.apply(fresh[serial]))
        return self._once(events)

    def _rebuild(self) -> list[TreeEvent]:
        old = self._state
        new = _Fold(None)
        # A close replaces the whole content, so appends before it cannot change the result.
        closed_at = {
            e.message_id: serial
            for serial, e in sorted(self._entries.items())
            if isinstance(e, ResponseClose)
        }
        for serial in sorted(self._entries):
            entry = self._entries[serial]
            if isinstance(entry, ResponseAppend) and closed_at.get(entry.message_id, -1) > serial:
                continue
            new.apply(entry)
        new.selections = self._selected
        self._state = new
        for key, child in list(self._selected.items()):
            node = new.nodes.get(child)
            if node is None or node.view.parent_id != key:
                del self._selected[key]
        events: list[TreeEvent] = []
        for mid, node in new.nodes.items():
            before = old.nodes.get(mid)
            if before is None:
                events.append(MessageEvent(node.view, "added"))
            elif before.view != node.view:
                events.append(MessageEvent(node.view, "updated"))
        for run_id, run in new.runs.items():
            was = old.runs.get(run_id)
            if was is None or was.info != run.info:
                events.append(RunEvent(run.info))
        events.extend(DeliveryEvent(r) for r in new.book.resolved())
        return self._once(events)

    def _once(self, events: list[TreeEvent]) -> list[TreeEvent]:
        out: list[TreeEvent] = []
        for event in events:
            if isinstance(event, DeliveryEvent):
                if event.outcome.message_id in self._reported:
                    continue
                self._reported.add(event.outcome.message_id)
            out.append(event)
        return out

    @property
    def oldest_serial(self) -> int | None:
        """The lowest serial folded, ``None`` when empty."""
        return self._oldest

    @property
    def newest_serial(self) -> int | None:
        """The highest serial folded, ``None`` when empty."""
        return self._newest

    # ------------------------------------------------------------ messages

    def messages(self, tail: Sequence[str] = ()) -> list[ViewMessage]:
        """The active branch, root to tip; ids in ``tail`` on it move last, in that order.

        Refused messages are left out.
        """
        nodes = self._state.nodes
        path = [mid for mid in self._state.path() if not nodes[mid].view.refused]
        if not tail:
            return [nodes[mid].view for mid in path]
        on_path = set(path)
        last = [mid for mid in dict.fromkeys(tail) if mid in on_path]
        moved = set(last)
        return [nodes[mid].view for mid in path if mid not in moved] + [
            nodes[mid].view for mid in last
        ]

    def message(self, message_id: str) -> ViewMessage | None:
        """Any message of the tree (on the active branch or not), by id."""
        node = self._state.nodes.get(message_id)
        return node.view if node is not None else None

    def branches(self, message_id: str) -> list[str]:
        """Ids of the message's siblings, itself included, in serial order (``[]`` if unknown)."""
        node = self._state.nodes.get(message_id)
        if node is None:
            return []
        parent = node.view.parent_id
        return list(self._state.roots if parent is None else self._state.nodes[parent].children)

    def select_branch(self, message_id: str) -> list[TreeEvent]:
        """Make the path through ``message_id`` active (a local choice).

        Returns ``MessageEvent(op="updated")`` for each message it brought onto
        the active branch, in path order; ``[]`` for an unknown id.
        """
        nodes = self._state.nodes
        if message_id not in nodes:
            return []
        before = set(self._state.path())
        current = message_id
        while True:
            parent = nodes[current].view.parent_id
            self._selected[parent] = current
            if parent is None:
                break
            current = parent
        return [
            MessageEvent(nodes[mid].view, "updated")
            for mid in self._state.path()
            if mid not in before
        ]

    # ---------------------------------------------------------------- runs

    def runs(self) -> list[RunInfo]:
        """Every Run, in order of creation."""
        return [run.info for run in self._state.runs.values()]

    def run(self, run_id: str) -> RunInfo | None:
        """One Run's snapshot, ``None`` if the tree has not seen it."""
        run = self._state.runs.get(run_id)
        return run.info if run is not None else None

    def cancel_requested(self, run_id: str) -> bool:
        """True once a cancel entry for the Run was folded."""
        run = self._state.runs.get(run_id)
        return run is not None and run.cancel_requested

    def inputs(self, run_id: str) -> list[ViewMessage]:
        """Steer, follow-up and inject messages aimed at the Run, in serial order.

        Refused ones are left out.
        """
        run = self._state.runs.get(run_id)
        nodes = self._state.nodes
        if run is None:
            return []
        views = (nodes[mid].view for mid in run.inputs)
        return [vm for vm in views if not vm.refused]

    def prompt(self, run_id: str) -> ViewMessage | None:
        """The prompt that started the Run, if the tree holds it."""
        run = self._state.runs.get(run_id)
        if run is None or run.prompt is None:
            return None
        return self._state.nodes[run.prompt].view

    def responses(self, run_id: str) -> list[ResponseState]:
        """The Run's responses in the order they opened: each with its state and ``seen``."""
        run = self._state.runs.get(run_id)
        if run is None:
            return []
        nodes = self._state.nodes
        return [
            ResponseState(nodes[mid].view, nodes[mid].closed, tuple(seen))
            for mid, seen in run.responses.items()
        ]

    def refusals(self, run_id: str | None = None) -> list[Refusal]:
        """Refused messages (of one Run, or all), in serial order."""
        return [r for r in self._state.refusals.values() if run_id is None or r.run_id == run_id]

    def checkpoint(self, run_id: str) -> CheckpointEntry | None:
        """The latest ``checkpoint`` entry of a Run, if the tree holds one."""
        run = self._state.runs.get(run_id)
        return run.checkpoint if run is not None else None

    def steering(self, run_id: str) -> list[ViewMessage]:
        """Steer messages aimed at the Run, in serial order."""
        return [vm for vm in self.inputs(run_id) if vm.intent == "steer"]

    def seen(self, run_id: str) -> set[str]:
        """Every message id the Run's responses listed as seen."""
        run = self._state.runs.get(run_id)
        return set(run.seen) if run is not None else set()

    # ------------------------------------------------------------ outcomes

    @property
    def outcomes(self) -> OutcomeBook:
        """The outcome book (read it; the tree feeds it)."""
        return self._state.book

    def outcome(self, message_id: str) -> OutcomeRecord | None:
        """A steering message's resolved outcome; ``None`` while pending or unknown."""
        return self._state.book.outcome(message_id)

    def pending(self, run_id: str) -> list[str]:
        """Ids of the Run's steering messages whose outcome is not resolved yet."""
        return self._state.book.pending(run_id)


def _coerce(entry: Entry | Mapping[str, Any]) -> Entry:
    if isinstance(entry, _ENTRY_TYPES):
        parsed: Entry = entry
    elif isinstance(entry, Mapping):
        parsed = decode_entry(dict(entry))
    else:
        raise RunwireError(VALIDATION_ERROR, f"not an entry: {type(entry).__name__}")
    if parsed.serial is None:
        raise RunwireError(VALIDATION_ERROR, "entry has no serial: only relay-stamped entries fold")
    return parsed
