"""The conversation tree: a session's entries folded into messages, Runs and outcomes.

``ConversationTree`` does no I/O. It is fed relay-stamped entries, answers
questions about the conversation, and every fold returns the events it caused.
The Python client, the agent and the JavaScript client run the same rules: the
JSON vectors under ``tests/vectors/tree`` check that the same entries give the
same tree.

Entries are kept by serial, so arrival order never matters. An entry newer
than all held folds at once. An older one, from a history page, makes the tree
fold every entry again and report the difference.

``messages()`` is the active path: at each node the selected child, else the
newest. ``select_branch(id)`` moves it. ``runs()``, ``outcomes()`` and the
other readers answer from the same fold. The full rules are in
docs/explanation/conversation-tree.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._tree_fold import Entry, Fold, coerce
from .codec import RELAY_FRAME_DEPTH, dumps, loads
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
from .frames import CheckpointEntry, Interrupt, ResponseAppend, ResponseClose
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
        self._state = Fold(self._selected)
        # The active path (refused messages included) and each id's place on it, kept for
        # _path_of; live folds move it along (_follow), anything else computes it again.
        self._path_of: Fold | None = None
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
            entry = coerce(raw)
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
        new = Fold(None)
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

        First ``MessageEvent(op="removed")`` for each message of
        ``before.messages()`` this tree does not show, in that order. Then the
        same for each other message ``before`` held as a node that this tree
        does not, in the order they were added. Last ``RunEvent(op="removed")``
        for each Run of ``before`` this tree does not know, in order of creation.
        A client's view reports these after a reset.
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
    return coerce(loads(data, max_depth=RELAY_FRAME_DEPTH))
