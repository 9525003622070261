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
order, then ``MessageEvent(op="removed")`` per message that left
``messages()`` (in the order it showed them; a steer shown while its queued
Run's prompt was not loaded is held once the prompt is, a message follows its
Run onto another branch) and then per other node the tree no longer holds,
then ``MessageEvent(op="added")`` per message that came onto ``messages()``
without another event (in path order), then ``RunEvent`` per new or changed
Run, then ``DeliveryEvent`` for outcomes never reported before (each outcome
is reported once, ever).
``removed_since(other)`` reports the same removals between two trees (and
``RunEvent(op="removed")`` for Runs the other knew): a client's reset.

Nodes. A ``message`` entry adds its ``UIMessage`` as sent; a steer, follow-up
or inject message gets ``metadata.queued`` set to its intent unless the sender
set it. ``response_open`` adds an empty assistant message (id ``message_id``,
the entry's metadata); a ``response_open`` naming a response of the same Run
that is still open starts it over (empty again, the new entry's metadata: a
step retried after a crash replaces what the first attempt half published);
``response_append`` folds stream chunks into it (below); ``response_close``
replaces its content with the carried message (keeping id ``message_id``) and
closes it; a close without a message (one too big for a frame) closes it with
the content the appends built. A close's ``metadata``, when given, replaces
the message's metadata. Appends and closes to a closed response, a user message or an
unknown id are ignored. A message or response whose id the tree holds (a node,
or a queued message held out of the conversation) adds no node (a prompt still
creates its Run; a response still records ``seen``).

Parents. A ``parent_id`` the tree holds is the parent. Otherwise (absent, not
loaded, bogus) the parent is the tip of the *default path*, which depends on
entries only: from the root, at each node, the newest child (the one added
last: the highest serial, but a queued prompt counts from when its turn came).
One exception keeps a Run's turn together: a response or a steering message
of a Run whose latest message is off the default path (another prompt forked
above it, or a rollback started a branch beside it, while the Run went on or
waited on a question) goes at the tip of the Run's own branch: from that
latest message, at each node, the newest child. Local selections never
change parents (a sender continuing a selected branch names the parent).
``ViewMessage.parent_id`` is the parent in the tree. A node whose parent
already has children starts a branch.

Active path (``messages()``): at each node the locally selected child, else
the newest child. A new child drops the selection at its parent, so a fork
off the active path becomes the active branch. ``select_branch(id)``
selects every step from the root to ``id`` and returns
``MessageEvent(op="removed")`` for each message it takes off ``messages()``
(in the order they showed), then ``MessageEvent(op="added")`` for each it
brings on (in path order).

Chunks fold into a response by the rules of ``transport.chunks``.

Refusals. A ``refused`` entry takes its message out of ``messages()`` (the
node stays, with ``ViewMessage.refused``, so ``message(id)`` still finds it
and its children keep their place), resolves its outcome as refused (see
``transport.outcomes``) and is listed by ``refusals()``. The message itself
may never have been on the channel (the relay refused it). A refused message
held with a queued Run's prompt is added refused when the Run's turn comes.

Runs. A Run appears with the first entry naming it: a prompt makes it
``pending`` with its ``client_id``, ``user_id`` and ``agent`` (default
``"default"``); another entry (the prompt is in an older page) makes it
``pending`` with those ``None``, or takes the run entry's status. Run entries
set status, ``error`` and ``end_reason``; a terminal status is final.
``cancel`` sets ``cancel_requested``; ``cancel_denied`` (the agent refused)
answers the cancel it names (all of them when it names none), clears the flag
once no cancel stands (two devices' cancels are refused one by one), and is
kept as a ``CancelDenial`` (``cancel_denial(cancel_id)``).
Steer, follow-up and inject messages go to ``transport.outcomes``; each
resolution is a ``DeliveryEvent``. A run entry's ``seen`` (injects saved at
the end) consumes those messages before its status applies. ``checkpoint``
entries change no message; ``checkpoint(run_id)`` returns the latest.

Queued Runs. A prompt the relay stamped ``queued`` makes its Run ``queued``
and is held out of the conversation (``waiting()`` lists such prompts; a
``MessageEvent`` is not reported), and so is steering aimed at that Run (its
outcome is tracked at once). When the Run's status leaves ``queued`` for a
non-terminal one (the relay's ``run: pending``) the prompt is added, at that
point of the fold, then the held steering in order: the prompt's parent is
its ``parent_id`` if the tree holds it, else, for a ``rollback`` prompt with
``interrupts``, the parent of the earliest interrupted Run's prompt (a new
branch beside the interrupted turn, possibly a new root), else the tip of the
default path. A queued Run that ends never adds its messages.
``message(id)`` finds held messages too.

Events of one incremental fold, entry by entry: ``RunEvent`` for a new Run
(or a status change), then ``MessageEvent``, then, if ``messages()`` changed,
``MessageEvent(op="removed")`` for each message it no longer shows (a prompt
forked above them, a rollback prompt's turn came, a refusal, a new fork at a
selected node; in the order they showed) and ``op="added"`` for any it shows
now that no event reported, then ``DeliveryEvent`` in resolution order.

Shown. Every ``MessageEvent`` says (``shown``) whether its message is in
``messages()`` once the entry (the selection, the rebuild) that caused it is
applied; ``removed`` ones never are, and a message off the active branch is
reported ``added`` / ``updated`` with ``shown=False`` (a Run a fork left
behind streams on; a branch not shown grows). A UI that follows events,
upserting each shown message and dropping the others, shows ``messages()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ._run_state import TERMINAL, end_reason
from .chunks import fold_chunks
from .codec import RELAY_FRAME_DEPTH, decode_entry, dumps, loads
from .errors import VALIDATION_ERROR, RunwireError
from .events import (
    CancelDenial,
    DeliveryEvent,
    MessageEvent,
    Refusal,
    ResponseState,
    RunEvent,
    RunInfo,
    TreeEvent,
    ViewMessage,
)
from .frames import (
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    Intent,
    Interrupt,
    InterruptEntry,
    MessageEntry,
    RefusedEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
)
from .messages import UIMessage
from .outcomes import OutcomeBook, OutcomeRecord

__all__ = [
    "CancelDenial",
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
    | CancelDenied
    | ResponseOpen
    | ResponseAppend
    | ResponseClose
    | RefusedEntry
    | CheckpointEntry
    | InterruptEntry
)
_ENTRY_TYPES = (
    MessageEntry,
    RunEntry,
    CancelEntry,
    CancelDenied,
    ResponseOpen,
    ResponseAppend,
    ResponseClose,
    RefusedEntry,
    CheckpointEntry,
    InterruptEntry,
)


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
    cancels: dict[str, None] = field(default_factory=dict)  # ids of cancels not refused
    inputs: list[str] = field(default_factory=list)
    seen: dict[str, None] = field(default_factory=dict)
    prompt_id: str | None = None
    held: MessageEntry | None = None  # a queued prompt, added when its turn comes
    held_inputs: list[MessageEntry] = field(default_factory=list)  # steering aimed at it
    denials: list[CancelDenial] = field(default_factory=list)
    responses: dict[str, list[str]] = field(default_factory=dict)  # id -> its seen
    checkpoint: CheckpointEntry | None = None
    questions: list[Interrupt] = field(default_factory=list)  # of the latest pause
    answers: dict[str, Any] = field(default_factory=dict)
    declined: bool = False


class _Fold:
    """Everything derived from entries; rebuilt from scratch when older entries arrive."""

    def __init__(self, selections: dict[str | None, str] | None) -> None:
        self.selections = selections  # None while rebuilding: only live folds move them
        self.nodes: dict[str, _Node] = {}
        self.roots: list[str] = []
        self.spine: list[str] = []  # the default path (newest child at each node)
        self.spine_pos: dict[str, int] = {}
        self.latest: dict[str, str] = {}  # run id -> id of its newest node
        self.runs: dict[str, _Run] = {}
        self.book = OutcomeBook()
        self.held: dict[str, ViewMessage] = {}  # queued prompts by message id (kept once dropped)
        self.denials: dict[str, CancelDenial] = {}
        self.refusals: dict[str, Refusal] = {}
        # What a live fold changed that may move path(), for the tree to follow (it clears
        # them): (parent, id) of each node added, ids of nodes refused.
        self.added: list[tuple[str | None, str]] = []
        self.refused_now: list[str] = []

    def apply(self, e: Entry) -> list[TreeEvent]:
        """Fold one entry (the newest so far); the events it caused."""
        if isinstance(e, MessageEntry):
            e = _marked_queued(e)
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
            held = run.held
            if held is not None and run.info.status != "queued":
                run.held = None
                inputs, run.held_inputs = run.held_inputs, []
                if run.info.status not in TERMINAL and held.message.id not in self.nodes:
                    for i, waiting in enumerate([held, *inputs]):
                        if i:
                            node = self._add(
                                waiting.message,
                                waiting.run_id,
                                waiting.serial or 0,
                                waiting.parent_id,
                                waiting.intent,
                                response=False,
                            )
                        else:
                            node = self._place(waiting)
                        self.held.pop(waiting.message.id, None)
                        if waiting.message.id in self.refusals:
                            node.view = replace(node.view, refused=True)
                        events.append(MessageEvent(node.view, "added"))
            events.extend(DeliveryEvent(r) for r in self.book.run_status(e.run_id, e.status))
            return events
        if created:
            events.append(RunEvent(run.info))
        if isinstance(e, MessageEntry):
            mid = e.message.id
            if mid in self.nodes or mid in self.held or mid in self.refusals:
                return events
            if e.intent == "prompt":
                run.prompt_id = mid
                if e.queued and run.info.status == "queued":
                    run.held = e
                    self.held[mid] = ViewMessage(
                        e.message, e.run_id, e.serial, e.parent_id, e.intent
                    )
                    return events
                node = self._place(e)
            elif run.held is not None:  # aimed at a queued Run: it waits with its prompt
                run.held_inputs.append(e)
                self.held[mid] = ViewMessage(e.message, e.run_id, e.serial, e.parent_id, e.intent)
                run.inputs.append(mid)
                events.extend(DeliveryEvent(r) for r in self.book.track(mid, e.run_id))
                return events
            else:
                node = self._add(
                    e.message, e.run_id, e.serial, e.parent_id, e.intent, response=False
                )
            events.append(MessageEvent(node.view, "added"))
            if e.intent != "prompt":
                run.inputs.append(mid)
                events.extend(DeliveryEvent(r) for r in self.book.track(mid, e.run_id))
        elif isinstance(e, CancelEntry):
            run.cancels[e.id] = None
            run.cancel_requested = True
        elif isinstance(e, CancelDenied):
            if e.cancel_id is None:
                run.cancels.clear()  # a refusal that names no cancel refuses them all
            else:
                run.cancels.pop(e.cancel_id, None)
            run.cancel_requested = bool(run.cancels)
            denial = CancelDenial(
                run_id=e.run_id,
                cancel_id=e.cancel_id,
                serial=e.serial,
                reason=e.reason,
                client_id=e.client_id,
                user_id=e.user_id,
            )
            run.denials.append(denial)
            if e.cancel_id is not None:
                self.denials.setdefault(e.cancel_id, denial)
        elif isinstance(e, RefusedEntry):
            events.extend(self._refuse(e))
        elif isinstance(e, InterruptEntry):
            if e.status == "paused":
                run.questions = list(e.interrupts)
                run.declined = False
            elif e.status == "declined":
                run.declined = True
            else:
                run.answers.update({q.id: q.response for q in e.interrupts})
        elif isinstance(e, CheckpointEntry):
            if run.checkpoint is None or e.step >= run.checkpoint.step:
                run.checkpoint = e
        elif isinstance(e, ResponseOpen):
            run.seen.update(dict.fromkeys(e.seen))
            self.book.saw(e.run_id, e.seen)
            existing = self.nodes.get(e.message_id)
            if existing is None:
                # The id of a queued message, held out of the conversation, adds no node
                # either: the message takes its place when its Run's turn comes.
                if e.message_id not in self.held:
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
        else:
            target = self.nodes.get(e.message_id)
            if target is not None and target.response and not target.closed:
                if isinstance(e, ResponseAppend):
                    message = fold_chunks(target.view.message, target.part_ids, e.chunks)
                else:
                    target.closed = True
                    message = _closed_message(target.view.message, e)
                # fold_chunks returns the same object when nothing changed: no deep compare
                # of the whole (growing) message per append.
                if message is not target.view.message and (
                    isinstance(e, ResponseAppend) or message != target.view.message
                ):
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
            if self.selections is not None:
                self.refused_now.append(e.message_id)
            events.append(MessageEvent(node.view, "updated"))
        held = self.held.get(e.message_id)
        if held is not None and held.intent != "prompt":
            self.held[e.message_id] = replace(held, refused=True)
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
                info,
                status="queued" if e.queued else "pending",
                client_id=e.client_id,
                user_id=e.user_id,
                agent=e.agent or "default",
            )
        run = self.runs[e.run_id] = _Run(info)
        return run, True

    def _place(self, e: MessageEntry) -> _Node:
        """Add a prompt: under its parent, beside the turn it rolls back, or at the tip."""
        assert e.serial is not None
        if e.parent_id is None or e.parent_id not in self.nodes:
            if e.multitask == "rollback" and e.interrupts:
                prompts = [
                    self.nodes[pid]
                    for pid in (self.runs[r].prompt_id for r in e.interrupts if r in self.runs)
                    if pid is not None and pid in self.nodes
                ]
                if prompts:
                    earliest = min(prompts, key=lambda n: n.view.serial)
                    parent = earliest.view.parent_id
                    return self._add(
                        e.message, e.run_id, e.serial, parent, e.intent, response=False, exact=True
                    )
        return self._add(e.message, e.run_id, e.serial, e.parent_id, e.intent, response=False)

    def _add(
        self,
        message: UIMessage,
        run_id: str,
        serial: int,
        parent_id: str | None,
        intent: Intent | None,
        *,
        response: bool,
        exact: bool = False,
    ) -> _Node:
        if not exact and (parent_id is None or parent_id not in self.nodes):
            anchor = self.latest.get(run_id) if intent != "prompt" else None
            if anchor is not None and anchor not in self.spine_pos:
                parent_id = self.below(anchor)[-1]  # the tip of the Run's own branch
            else:
                parent_id = self.spine[-1] if self.spine else None
        node = _Node(ViewMessage(message, run_id, serial, parent_id, intent), response)
        self.nodes[message.id] = node
        self.latest[run_id] = message.id
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
            self.added.append((parent_id, message.id))
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

    def below(self, mid: str) -> list[str]:
        """``mid``, then at each node the newest child, down to a tip (entries only)."""
        out = [mid]
        children = self.nodes[mid].children
        while children:
            out.append(children[-1])
            children = self.nodes[children[-1]].children
        return out

    def path_of_run(self, run_id: str) -> list[str]:
        """The active path if it holds the Run's newest node, else the branch through it."""
        path = self.path()
        anchor = self.latest.get(run_id)
        if anchor is None or anchor in path:
            return path
        above: list[str] = []
        parent = self.nodes[anchor].view.parent_id
        while parent is not None:
            above.append(parent)
            parent = self.nodes[parent].view.parent_id
        return above[::-1] + self.below(anchor)


class ConversationTree:
    """A session's entries folded into a conversation tree, Runs and steering outcomes.

    Feed it every entry the relay delivers (live, and history pages) with
    ``fold`` / ``fold_older``; read it with ``messages``, ``runs`` and friends.
    ``fold`` and ``fold_older`` raise ``RunwireError(VALIDATION_ERROR)`` for an
    entry that does not validate or has no serial (nothing is folded then); bad
    content inside a valid entry never raises.
    """

    def __init__(self) -> None:
        # Every folded entry, kept encoded for a rebuild: bytes are invisible to the
        # garbage collector, so a long conversation does not lengthen its full passes
        # (pydantic models of every token would, by thousands of objects per Run).
        self._entries: dict[int, bytes] = {}
        self._oldest: int | None = None
        self._newest: int | None = None
        self._selected: dict[str | None, str] = {}
        self._reported: set[str] = set()
        self._state = _Fold(self._selected)
        # The active path (refused messages included) and each id's place on it, kept for
        # _path_of; live folds move it along (_follow), anything else computes it again.
        self._path_of: _Fold | None = None
        self._path: list[str] = []
        self._path_pos: dict[str, int] = {}

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
        packed: dict[int, bytes] = {}
        for raw in entries:
            entry = _coerce(raw)
            serial = entry.serial
            assert serial is not None
            if serial not in self._entries and serial not in fresh:
                fresh[serial] = entry
                packed[serial] = _pack(raw, entry)
        if not fresh:
            return []
        incremental = self._newest is None or min(fresh) > self._newest
        self._entries.update(packed)
        low, high = min(fresh), max(fresh)
        self._oldest = low if self._oldest is None else min(self._oldest, low)
        self._newest = high if self._newest is None else max(self._newest, high)
        if not incremental:
            return self._rebuild()
        events: list[TreeEvent] = []
        for serial in sorted(fresh):
            self._sync_path()
            events.extend(self._follow(self._state.apply(fresh[serial])))
        return self._once(events)

    def _rebuild(self) -> list[TreeEvent]:
        old = self._state
        shown = self._shown()
        before = set(shown[0])
        new = _Fold(None)
        entries = {serial: _unpack(data) for serial, data in sorted(self._entries.items())}
        # A close carrying its message replaces the whole content, so appends before it
        # cannot change the result (a close without one keeps what they built).
        closed_at = _replacing_closes(entries)
        for serial, entry in entries.items():
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
        reported: set[str] = set()
        for mid, node in new.nodes.items():
            before_node = old.nodes.get(mid)
            if before_node is None:
                events.append(MessageEvent(node.view, "added", self._shows(mid)))
            elif before_node.view != node.view:
                events.append(MessageEvent(node.view, "updated", self._shows(mid)))
            else:
                continue
            reported.add(mid)
        events.extend(self._removed(*shown))
        events.extend(
            MessageEvent(new.nodes[mid].view, "added")
            for mid in self._shown_ids()
            if mid not in before and mid not in reported
        )
        for run_id, run in new.runs.items():
            was = old.runs.get(run_id)
            if was is None or was.info != run.info:
                events.append(RunEvent(run.info))
        events.extend(DeliveryEvent(r) for r in new.book.resolved())
        return self._once(events)

    def removed_since(self, before: ConversationTree) -> list[TreeEvent]:
        """What a UI that showed ``before`` must take away to show this tree instead.

        ``MessageEvent(op="removed")`` for each message of ``before.messages()``
        this tree does not show (in that order), then for each other message
        ``before`` held as a node that this tree does not (in the order they
        were added); then ``RunEvent(op="removed")`` for each Run of ``before``
        this tree does not know, in order of creation. A client's view reports
        these after a reset.
        """
        events = self._removed(*before._shown())
        events.extend(
            RunEvent(info, "removed") for info in before.runs() if self.run(info.run_id) is None
        )
        return events

    def _shown(self) -> tuple[list[str], dict[str, ViewMessage]]:
        """Ids of ``messages()``, and every node's view (what ``_removed`` compares)."""
        return (
            [vm.message.id for vm in self.messages()],
            {mid: node.view for mid, node in self._state.nodes.items()},
        )

    def _removed(self, path: list[str], views: dict[str, ViewMessage]) -> list[TreeEvent]:
        """``MessageEvent(op="removed")`` for what ``path`` / ``views`` showed and this does not."""
        nodes = self._state.nodes
        on_path = set(path)
        gone = [mid for mid in path if not self._shows(mid)]
        gone += [mid for mid in views if mid not in on_path and mid not in nodes]
        return [MessageEvent(self.message(mid) or views[mid], "removed", False) for mid in gone]

    def _sync_path(self) -> None:
        """Compute the active path again unless it was kept for the current state."""
        if self._path_of is not self._state:
            self._path = self._state.path()
            self._path_pos = {mid: i for i, mid in enumerate(self._path)}
            self._path_of = self._state

    def _shown_ids(self) -> list[str]:
        """Ids of ``messages()``."""
        self._sync_path()
        nodes = self._state.nodes
        return [mid for mid in self._path if not nodes[mid].view.refused]

    def _shows(self, message_id: str) -> bool:
        """Whether ``messages()`` holds the message."""
        self._sync_path()
        node = self._state.nodes.get(message_id)
        return node is not None and not node.view.refused and message_id in self._path_pos

    def _follow(self, events: list[TreeEvent]) -> list[TreeEvent]:
        """One live entry's events, with how ``messages()`` changed; keeps the path current.

        A node added under a node of the active path (or as a root) becomes its
        tip: what was below leaves. Refusing a message takes it out. Each
        ``MessageEvent`` gets ``shown``; a ``removed`` one follows for each
        message that left (in the order they showed), ahead of the
        ``DeliveryEvent``s. (Nothing already held comes onto the path here.)
        """
        state = self._state
        nodes = state.nodes
        path, pos = self._path, self._path_pos
        added = {mid for _, mid in state.added}
        gone: dict[str, int] = {}
        for parent, mid in state.added:
            if parent is None:
                cut = 0
            elif parent in pos:
                cut = pos[parent] + 1
            else:
                continue  # under a node off the active path: it is off it too
            for at in range(cut, len(path)):
                dropped = path[at]
                del pos[dropped]
                if dropped not in added and not nodes[dropped].view.refused:
                    gone[dropped] = at
            del path[cut:]
            pos[mid] = len(path)
            path.append(mid)
        for mid in state.refused_now:
            if mid in pos and mid not in added:
                gone.setdefault(mid, pos[mid])
        state.added.clear()
        state.refused_now.clear()
        out: list[TreeEvent] = [
            replace(e, shown=False)
            if isinstance(e, MessageEvent) and not self._shows(e.message.message.id)
            else e
            for e in events
        ]
        if not gone:
            return out
        moved: list[TreeEvent] = [
            MessageEvent(nodes[mid].view, "removed", False)
            for mid in sorted(gone, key=gone.__getitem__)
        ]
        at = next((i for i, e in enumerate(out) if isinstance(e, DeliveryEvent)), len(out))
        return out[:at] + moved + out[at:]

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

    def messages(self, tail: Sequence[str] = (), *, run_id: str | None = None) -> list[ViewMessage]:
        """The active branch, root to tip; ids in ``tail`` on it move last, in that order.

        With ``run_id``, the branch that Run is on: the active one if it holds
        the Run's newest message, else the path through that message (then, at
        each node, the newest child). Refused messages are left out.
        """
        nodes = self._state.nodes
        state = self._state
        full = state.path() if run_id is None else state.path_of_run(run_id)
        path = [mid for mid in full if not nodes[mid].view.refused]
        if not tail:
            return [nodes[mid].view for mid in path]
        on_path = set(path)
        last = [mid for mid in dict.fromkeys(tail) if mid in on_path]
        moved = set(last)
        return [nodes[mid].view for mid in path if mid not in moved] + [
            nodes[mid].view for mid in last
        ]

    def message(self, message_id: str) -> ViewMessage | None:
        """Any message of the tree (on the active branch or not, or a held prompt), by id."""
        node = self._state.nodes.get(message_id)
        if node is not None:
            return node.view
        return self._state.held.get(message_id)

    def waiting(self) -> list[ViewMessage]:
        """Prompts of queued Runs, not yet in the conversation, oldest first."""
        return [
            self._state.held[run.held.message.id]
            for run in self._state.runs.values()
            if run.held is not None and run.held.message.id in self._state.held
        ]

    def branches(self, message_id: str) -> list[str]:
        """Ids of the message and its siblings, in the order they were added (``[]`` if
        unknown): serial order, but a queued prompt counts from when its turn came."""
        node = self._state.nodes.get(message_id)
        if node is None:
            return []
        parent = node.view.parent_id
        return list(self._state.roots if parent is None else self._state.nodes[parent].children)

    def select_branch(self, message_id: str) -> list[TreeEvent]:
        """Make the path through ``message_id`` active (a local choice).

        Returns ``MessageEvent(op="removed")`` for each message it took off
        ``messages()`` (in the order they showed), then ``op="added"`` for each
        it brought on (in path order); ``[]`` for an unknown id.
        """
        nodes = self._state.nodes
        if message_id not in nodes:
            return []
        before = self._shown_ids()
        current = message_id
        while True:
            parent = nodes[current].view.parent_id
            self._selected[parent] = current
            if parent is None:
                break
            current = parent
        self._path_of = None
        after = self._shown_ids()
        shown = set(after)
        known = set(before)
        events: list[TreeEvent] = [
            MessageEvent(nodes[mid].view, "removed", False) for mid in before if mid not in shown
        ]
        events += [MessageEvent(nodes[mid].view, "added") for mid in after if mid not in known]
        return events

    # ---------------------------------------------------------------- runs

    def runs(self) -> list[RunInfo]:
        """Every Run, in order of creation."""
        return [run.info for run in self._state.runs.values()]

    def run(self, run_id: str) -> RunInfo | None:
        """One Run's snapshot, ``None`` if the tree has not seen it."""
        run = self._state.runs.get(run_id)
        return run.info if run is not None else None

    def cancel_requested(self, run_id: str) -> bool:
        """True while a cancel entry folded for the Run has not been refused."""
        run = self._state.runs.get(run_id)
        return run is not None and run.cancel_requested

    def cancel_denial(self, cancel_id: str) -> CancelDenial | None:
        """The agent's refusal of the cancel entry ``cancel_id``, if it refused."""
        return self._state.denials.get(cancel_id)

    def cancel_denials(self, run_id: str) -> list[CancelDenial]:
        """Every refused cancel of the Run, in serial order."""
        run = self._state.runs.get(run_id)
        return list(run.denials) if run is not None else []

    def inputs(self, run_id: str) -> list[ViewMessage]:
        """Steer, follow-up and inject messages aimed at the Run, in serial order.

        Refused ones are left out.
        """
        run = self._state.runs.get(run_id)
        if run is None:
            return []
        found = (self.message(mid) for mid in run.inputs)
        return [vm for vm in found if vm is not None and not vm.refused]

    def prompt(self, run_id: str) -> ViewMessage | None:
        """The prompt that started the Run, if the tree holds it (held while queued)."""
        run = self._state.runs.get(run_id)
        if run is None or run.prompt_id is None:
            return None
        return self.message(run.prompt_id)

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

    def interrupts(self, run_id: str) -> list[Interrupt]:
        """The questions a suspended Run waits on (none once answered, declined or moved on)."""
        run = self._state.runs.get(run_id)
        if run is None or run.info.status != "suspended" or run.declined:
            return []
        return [q for q in run.questions if q.id not in run.answers]

    def answers(self, run_id: str) -> dict[str, Any]:
        """Every answer a Run's questions got, by interrupt id."""
        run = self._state.runs.get(run_id)
        return dict(run.answers) if run is not None else {}

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


def _marked_queued(e: MessageEntry) -> MessageEntry:
    """A steer / follow-up / inject gets ``metadata.queued`` set to its intent (unless set)."""
    if e.intent == "prompt" or "queued" in e.message.metadata:
        return e
    metadata = {**e.message.metadata, "queued": e.intent}
    return e.model_copy(update={"message": e.message.model_copy(update={"metadata": metadata})})


def _closed_message(current: UIMessage, e: ResponseClose) -> UIMessage:
    """A response's message once ``e`` closed it (``current``: the content folded so far).

    The carried message replaces the content (keeping id ``message_id``); a
    close without one keeps ``current``. The close's ``metadata``, if given,
    replaces the message's metadata either way.
    """
    message = current if e.message is None else e.message
    update: dict[str, Any] = {}
    if message.id != e.message_id:
        update["id"] = e.message_id
    if e.metadata is not None and e.metadata != message.metadata:
        update["metadata"] = dict(e.metadata)
    return message.model_copy(update=update) if update else message


def _replacing_closes(entries: Mapping[int, Entry]) -> dict[str, int]:
    """The serial of each response's first close, for responses whose first carries a message.

    Only the first close of a response can take effect (a closed response
    ignores the rest); when it carries the message, the appends before it
    are replaced and a rebuild may skip them. One without a message keeps
    what they built, so they all count.
    """
    first: dict[str, ResponseClose] = {}
    for e in entries.values():
        if isinstance(e, ResponseClose):
            first.setdefault(e.message_id, e)
    return {
        mid: e.serial for mid, e in first.items() if e.message is not None and e.serial is not None
    }


def _pack(raw: Entry | Mapping[str, Any], entry: Entry) -> bytes:
    """An entry as compact JSON: the wire dict it came as, else the model dumped."""
    if isinstance(raw, dict):
        try:
            return dumps(raw)
        except TypeError:  # not plain JSON data (a caller's own Mapping values): dump the model
            pass
    return dumps(entry.model_dump(mode="json"))


def _unpack(data: bytes) -> Entry:
    return _coerce(loads(data, max_depth=RELAY_FRAME_DEPTH))


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
