"""The fold behind ``ConversationTree``: entries in, nodes, Runs and events out (no I/O).

``Fold`` holds everything the tree derives from entries. The tree folds each
new entry into it, and builds a new one from every entry when an older page
arrives. The rules are told in docs/explanation/conversation-tree.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, get_args

from ._chunks import fold_chunks
from ._codec import decode_entry
from ._events import (
    CancelDenial,
    DeliveryEvent,
    MessageEvent,
    Refusal,
    RunEvent,
    RunInfo,
    TreeEvent,
    ViewMessage,
)
from ._outcomes import OutcomeBook
from ._run_state import end_reason, run_ended
from .errors import VALIDATION_ERROR, RunwireError
from .frames import (
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    EntryBody,
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

__all__ = ["ENTRY_TYPES", "Entry", "Fold", "Node", "RunState", "coerce"]

Entry = EntryBody
"""Any entry (type checkers read the discriminated ``Annotated`` union as the union)."""
ENTRY_TYPES: tuple[type, ...] = get_args(get_args(EntryBody)[0])
"""The entry classes of ``EntryBody``, for ``isinstance``."""


@dataclass
class Node:
    view: ViewMessage
    response: bool
    children: list[str] = field(default_factory=list)
    closed: bool = False
    part_ids: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class RunState:
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


class Fold:
    """Everything derived from entries; rebuilt from scratch when older entries arrive."""

    def __init__(self, selections: dict[str | None, str] | None) -> None:
        self.selections = selections  # None while rebuilding: only live folds move them
        self.nodes: dict[str, Node] = {}
        self.roots: list[str] = []
        self.spine: list[str] = []  # the default path (newest child at each node)
        self.spine_pos: dict[str, int] = {}
        self.latest: dict[str, str] = {}  # run id -> id of its newest node
        self.runs: dict[str, RunState] = {}
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
            e = marked_queued(e)
        assert e.serial is not None
        events: list[TreeEvent] = []
        run, created = self._run(e)
        if isinstance(e, RunEntry):
            if e.seen:
                run.seen.update(dict.fromkeys(e.seen))
                self.book.saw(e.run_id, e.seen)
            old = run.info
            if not run_ended(old.status):
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
                if not run_ended(run.info.status) and held.message.id not in self.nodes:
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
                    message = closed_message(target.view.message, e)
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

    def _run(self, e: Entry) -> tuple[RunState, bool]:
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
        run = self.runs[e.run_id] = RunState(info)
        return run, True

    def _place(self, e: MessageEntry) -> Node:
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
    ) -> Node:
        if not exact and (parent_id is None or parent_id not in self.nodes):
            anchor = self.latest.get(run_id) if intent != "prompt" else None
            if anchor is not None and anchor not in self.spine_pos:
                parent_id = self.below(anchor)[-1]  # the tip of the Run's own branch
            else:
                parent_id = self.spine[-1] if self.spine else None
        node = Node(ViewMessage(message, run_id, serial, parent_id, intent), response)
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


def marked_queued(e: MessageEntry) -> MessageEntry:
    """A steer / follow-up / inject gets ``metadata.queued`` set to its intent (unless set)."""
    if e.intent == "prompt" or "queued" in e.message.metadata:
        return e
    metadata = {**e.message.metadata, "queued": e.intent}
    return e.model_copy(update={"message": e.message.model_copy(update={"metadata": metadata})})


def closed_message(current: UIMessage, e: ResponseClose) -> UIMessage:
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


def coerce(entry: Entry | Mapping[str, Any]) -> Entry:
    if isinstance(entry, Mapping):
        parsed: Entry = decode_entry(dict(entry))
    elif isinstance(entry, ENTRY_TYPES):
        parsed = entry
    else:
        raise RunwireError(VALIDATION_ERROR, f"not an entry: {type(entry).__name__}")
    if parsed.serial is None:
        raise RunwireError(VALIDATION_ERROR, "entry has no serial: only relay-stamped entries fold")
    return parsed
