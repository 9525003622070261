"""Properties of ConversationTree over generated channels: order and duplicates never matter."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from transport._runs import TERMINAL, TRANSITIONS
from transport._tree import ConversationTree, DeliveryEvent, Entry, TreeEvent
from transport.frames import (
    CancelEntry,
    MessageEntry,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
)
from transport.messages import UIMessage, user_message

_CHUNKS = st.one_of(
    st.builds(lambda d: {"type": "text-delta", "delta": d}, st.sampled_from(["a", "b", ""])),
    st.builds(
        lambda i, d: {"type": "text-delta", "id": i, "delta": d},
        st.sampled_from(["t1", "t2"]),
        st.sampled_from(["x", "y"]),
    ),
    st.builds(lambda i: {"type": "text-start", "id": i}, st.sampled_from(["t1", "t2"])),
    st.builds(lambda d: {"type": "reasoning-delta", "delta": d}, st.sampled_from(["r", "s"])),
    st.builds(
        lambda i: {"type": "tool-input-available", "toolCallId": i, "toolName": "f", "input": 1},
        st.sampled_from(["c1", "c2"]),
    ),
    st.builds(
        lambda i: {"type": "tool-output-available", "toolCallId": i, "output": 2},
        st.sampled_from(["c1", "c2", "c3"]),
    ),
    st.just({"type": "finish"}),
)


@st.composite
def channels(draw: st.DrawFn) -> list[Entry]:
    """A plausible channel: what a relay could have sequenced (plus a few things it refuses)."""
    entries: list[Entry] = []
    status: dict[str, str] = {}
    message_ids: list[str] = []
    responses: list[str] = []
    aimed: dict[str, list[str]] = {}
    serial = 0
    for _ in range(draw(st.integers(1, 40))):
        serial += draw(st.integers(1, 3))
        e = f"e{serial}"
        op = draw(st.sampled_from(["prompt", "run", "aim", "cancel", "open", "append", "close"]))
        runs = sorted(status)
        if op == "prompt" or not runs:
            rid, mid = f"r{serial}", f"m{serial}"
            parent = draw(st.none() | st.sampled_from(message_ids)) if message_ids else None
            msg = user_message("q", id=mid)
            entries.append(
                MessageEntry(serial=serial, id=e, run_id=rid, message=msg, parent_id=parent)
            )
            status[rid] = "pending"
            message_ids.append(mid)
            continue
        rid = draw(st.sampled_from(runs))
        if op == "run":
            if status[rid] in TERMINAL:
                continue
            new = draw(st.sampled_from(sorted(TRANSITIONS[status[rid]])))
            status[rid] = new
            entries.append(RunEntry(serial=serial, id=e, run_id=rid, status=new))
        elif op == "aim":
            mid = f"m{serial}"
            intent = draw(st.sampled_from(["steer", "follow_up", "inject"]))
            msg = user_message("s", id=mid)
            entries.append(
                MessageEntry(serial=serial, id=e, run_id=rid, intent=intent, message=msg)
            )
            aimed.setdefault(rid, []).append(mid)
            message_ids.append(mid)
        elif op == "cancel":
            entries.append(CancelEntry(serial=serial, id=e, run_id=rid))
        elif op == "open":
            mid = f"m{serial}"
            pool = aimed.get(rid, []) + aimed.get(draw(st.sampled_from(runs)), [])
            seen = draw(st.lists(st.sampled_from(pool), max_size=3)) if pool else []
            parent = draw(st.none() | st.sampled_from(message_ids))
            entries.append(
                ResponseOpen(
                    serial=serial, id=e, run_id=rid, message_id=mid, seen=seen, parent_id=parent
                )
            )
            responses.append(mid)
            message_ids.append(mid)
        elif op == "append":
            target = draw(st.sampled_from([*responses, "unknown"]))
            chunks = draw(st.lists(_CHUNKS, min_size=1, max_size=4))
            entries.append(
                ResponseAppend(serial=serial, id=e, run_id=rid, message_id=target, chunks=chunks)
            )
        elif responses:
            target = draw(st.sampled_from(responses))
            msg = UIMessage.model_validate(
                {"id": target, "role": "assistant", "parts": [{"type": "text", "text": "done"}]}
            )
            entries.append(
                ResponseClose(serial=serial, id=e, run_id=rid, message_id=target, message=msg)
            )
    return entries


def snapshot(tree: ConversationTree, entries: list[Entry]) -> dict[str, Any]:
    """Everything a reader can observe about the tree."""
    mids = [e.message.id for e in entries if isinstance(e, MessageEntry)]
    mids += [e.message_id for e in entries if isinstance(e, ResponseOpen)]
    runs = [r.run_id for r in tree.runs()]
    return {
        "messages": tree.messages(),
        "all": {mid: tree.message(mid) for mid in mids},
        "branches": {mid: tree.branches(mid) for mid in mids},
        "runs": tree.runs(),
        "outcomes": {mid: tree.outcome(mid) for mid in mids},
        "pending": {rid: tree.pending(rid) for rid in runs},
        "seen": {rid: tree.seen(rid) for rid in runs},
        "inputs": {rid: tree.inputs(rid) for rid in runs},
        "cancel": {rid: tree.cancel_requested(rid) for rid in runs},
        "serials": (tree.oldest_serial, tree.newest_serial),
    }


def in_order(entries: list[Entry]) -> tuple[ConversationTree, list[TreeEvent]]:
    tree = ConversationTree()
    events: list[TreeEvent] = []
    for entry in entries:
        events.extend(tree.fold(entry))
    return tree, events


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_newest_page_first_then_older_pages_equals_in_order(data: st.DataObject) -> None:
    entries = data.draw(channels())
    reference, ref_events = in_order(entries)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(entries)), max_size=4)))
    bounds = [0, *cuts, len(entries)]
    pages = [entries[a:b] for a, b in pairwise(bounds) if a < b]

    tree = ConversationTree()
    events: list[TreeEvent] = []
    for entry in pages[-1]:  # the newest page arrives live, entry by entry
        events.extend(tree.fold(entry))
    for page in reversed(pages[:-1]):  # then older pages, newest first
        events.extend(tree.fold_older(list(reversed(page))))

    assert snapshot(tree, entries) == snapshot(reference, entries)
    # Outcomes: each reported once, and what was reported is what holds.
    delivered = [e.outcome for e in events if isinstance(e, DeliveryEvent)]
    assert len({r.message_id for r in delivered}) == len(delivered)
    assert sorted(delivered, key=lambda r: r.message_id) == sorted(
        reference.outcomes.resolved(), key=lambda r: r.message_id
    )
    ref_delivered = [e.outcome for e in ref_events if isinstance(e, DeliveryEvent)]
    assert ref_delivered == reference.outcomes.resolved()


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_arrival_order_gives_the_same_tree(data: st.DataObject) -> None:
    entries = data.draw(channels())
    shuffled = data.draw(st.permutations(entries))
    reference, _ = in_order(entries)
    tree, events = in_order(list(shuffled))
    assert snapshot(tree, entries) == snapshot(reference, entries)
    delivered = [e.outcome.message_id for e in events if isinstance(e, DeliveryEvent)]
    assert len(set(delivered)) == len(delivered)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_folding_duplicates_is_a_no_op(data: st.DataObject) -> None:
    entries = data.draw(channels())
    tree, _ = in_order(entries)
    before = snapshot(tree, entries)
    again = data.draw(st.lists(st.sampled_from(entries), min_size=1, max_size=10))
    for entry in again:
        assert tree.fold(entry) == []
    assert tree.fold_older(again) == []
    assert tree.fold_older([e.model_dump(mode="json") for e in again]) == []
    assert snapshot(tree, entries) == before


@settings(max_examples=100, deadline=None)
@given(channels())
def test_active_path_is_a_chain_and_tail_only_reorders(entries: list[Entry]) -> None:
    tree, _ = in_order(entries)
    path = tree.messages()
    for parent, child in pairwise(path):
        assert child.parent_id == parent.message.id
        assert child.serial > parent.serial
        assert tree.branches(child.message.id)[-1] == child.message.id, "newest branch shown"
    if path:
        assert path[0].parent_id is None
    ids = [vm.message.id for vm in path]
    tail = ids[::2][:3]
    moved = [vm.message.id for vm in tree.messages(tail)]
    assert sorted(moved) == sorted(ids)
    assert moved[len(ids) - len(tail) :] == tail
