"""Differential fuzz: the Python and the JavaScript ConversationTree fold the same channels alike.

Hypothesis generates channels a relay could have sequenced for one session
(prompts with and without ``parent_id``, forks to earlier messages, every
multitask strategy with queued and interrupting prompts, Run lifecycles,
steering, responses, cancels and their refusals, refused messages, pauses,
duplicates and unknown parents). Each channel is folded in order and as
history pages (newest page live, older pages newest first) by both trees; one
``node`` process folds a whole batch (tests/js/tree_fold_batch.mjs). Everything
a reader observes must be equal across languages and across arrival orders,
and a Run's own turn must stay on one root-to-tip path.

The suite runs the same 50 batches every time (a few seconds, never flaky).
To explore: ``RUNWIRE_TREE_FUZZ=500 pytest tests/transport/test_tree_differential.py``
draws that many fresh batches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transport._runs import TERMINAL, TRANSITIONS
from transport._tree import ConversationTree, DeliveryEvent, MessageEvent, TreeEvent, ViewMessage

ROOT = Path(__file__).resolve().parents[2]
BATCH = ROOT / "tests" / "js" / "tree_fold_batch.mjs"
NODE = shutil.which("node")

Json = dict[str, Any]

_GOING = ("pending", "active", "suspended")

_CHUNKS = st.sampled_from(
    [
        {"type": "text-delta", "delta": "a"},
        {"type": "text-delta", "delta": ""},
        {"type": "text-delta", "id": "t1", "delta": "x"},
        {"type": "text-start", "id": "t2"},
        {"type": "text-delta", "id": "t2", "delta": "y"},
        {"type": "reasoning-delta", "delta": "r"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "f", "input": 1},
        {"type": "tool-output-available", "toolCallId": "c1", "output": 2},
        {"type": "tool-output-error", "toolCallId": "c2", "errorText": "no", "errorCode": "X"},
        {"type": "finish"},
    ]
)

_STRATEGIES = [None, "alongside", "enqueue", "interrupt", "rollback"]
_CHECKPOINT: Json = {"turn": 2, "iterations": 3, "seen": [], "state": {"k": [1]}}
_ERRORS = [
    {"code": "AGENT_LOST", "message": "gone", "details": {"grace_seconds": 30}},
    {"code": "PII_DETECTED", "message": "no"},
    {"code": "CHECK_FAILED"},
]
_PARTS = [
    {"type": "reasoning", "text": "hm"},
    {"type": "tool-call", "tool_call_id": "c1", "tool_name": "f", "input": {"a": [1, None]}},
    {"type": "tool-call", "tool_call_id": "c2", "tool_name": "g"},
    {"type": "tool-result", "tool_call_id": "c1", "tool_name": "f", "output": "ok"},
    {"type": "tool-result", "tool_call_id": "c2", "tool_name": "g", "is_error": True},
]
_QUESTIONS = [
    {"kind": "input", "message": "which?"},
    {},
    {"kind": "approval", "tool_call_id": "c1", "tool_name": "f", "expires_at": 5, "details": {}},
    {"kind": "plan", "reason": "r", "response_schema": {"type": "string"}},
]


def _text(mid: str, text: str, role: str = "user") -> Json:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}], "metadata": {}}


@st.composite
def channels(draw: st.DrawFn) -> list[Json]:
    """Stamped entries (wire dicts, serial order, with a few duplicates) of one session."""
    entries: list[Json] = []
    runs: dict[str, dict[str, Any]] = {}
    mids: list[str] = []
    serial = 0

    def add(kind: str, rid: str, client: str = "agent-1", **fields: Any) -> Json:
        nonlocal serial
        entry: Json = {
            "serial": serial,
            "ts": 1_700_000_000_000 + serial,
            "client_id": client,
            "id": fields.pop("id", f"e{serial}"),
            "run_id": rid,
            "kind": kind,
        }
        entry.update({k: v for k, v in fields.items() if v is not None})
        entries.append(entry)
        return entry

    def parent(named: int = 4) -> str | None:
        """Mostly none; else (``named`` in 10) an earlier message, or one not loaded."""
        choice = draw(st.integers(0, 9))
        if choice >= named or not mids:
            return None
        if choice > 0:
            return draw(st.sampled_from(mids))
        return "not-loaded"

    def going() -> list[str]:
        return [r for r, run in runs.items() if run["status"] in _GOING]

    ops = [
        "prompt",
        "prompt",
        "turn",
        "run",
        "run",
        "run",
        "aim",
        "aim",
        "aim",
        "open",
        "open",
        "open",
        "open",
        "append",
        "close",
        "cancel",
        "cancel_denied",
        "refused",
        "interrupt",
        "checkpoint",
        "duplicate",
        "retry",
        "stray",
        "reuse",
    ]
    for _ in range(draw(st.integers(1, 40))):
        serial += draw(st.integers(1, 2))
        op = draw(st.sampled_from(ops))
        live = sorted(r for r, run in runs.items() if run["status"] not in TERMINAL)
        if op == "prompt" or not runs:
            rid, mid = f"r{serial}", f"m{serial}"
            strategy = draw(
                st.sampled_from([None, "alongside", "enqueue", "interrupt", "rollback"])
            )
            now = going()
            queued = strategy in ("enqueue", "interrupt", "rollback") and bool(now)
            queued = queued or (
                strategy == "enqueue" and any(r["status"] == "queued" for r in runs.values())
            )
            interrupts = now if strategy in ("interrupt", "rollback") and now else None
            add(
                "message",
                rid,
                client="client-1",
                user_id="user-1",
                intent="prompt",
                message=_text(mid, mid),
                parent_id=parent(),
                multitask=strategy,
                queued=True if queued else None,
                interrupts=interrupts,
            )
            runs[rid] = {
                "status": "queued" if queued else "pending",
                "held": [mid] if queued else [],
                "interrupts": interrupts or [],
                "inputs": [],
                "open": [],
                "responses": [],
                "cancels": [],
            }
            mids.append(mid)
        elif op == "turn":
            # The relay's due entries for a queued Run: its interrupts, then its turn.
            queued_runs = sorted(r for r, run in runs.items() if run["status"] == "queued")
            if not queued_runs:
                continue
            rid = draw(st.sampled_from(queued_runs))
            for target in runs[rid]["interrupts"]:
                if runs[target]["status"] == "pending":
                    add("run", target, client="client-1", status="cancelled")
                    runs[target]["status"] = "cancelled"
                    serial += 1
                elif runs[target]["status"] in _GOING:
                    add(
                        "cancel",
                        target,
                        client="client-1",
                        id=f"relay:{rid}:interrupt:{target}",
                        reason="interrupted by a newer Run",
                        interrupted_by=rid,
                    )
                    runs[target]["cancels"].append(f"relay:{rid}:interrupt:{target}")
                    serial += 1
                    if draw(st.booleans()):
                        add("run", target, status="cancelled")
                        runs[target]["status"] = "cancelled"
                        serial += 1
            status = draw(st.sampled_from(["pending", "pending", "pending", "cancelled"]))
            add("run", rid, client="relay", status=status)
            runs[rid]["status"] = status
        elif op == "stray":
            # An entry of a Run whose prompt is not loaded (it is in an older page).
            add("response_open", "r-old", message_id=f"m{serial}", parent_id=parent())
            mids.append(f"m{serial}")
        elif op == "reuse" and mids:
            # An id already used (a buggy or hostile publisher): the tree holds it, no new node.
            held = [m for r in runs.values() if r["status"] == "queued" for m in r["held"]]
            from_held: bool = bool(held) and draw(st.booleans())
            mid = draw(st.sampled_from(held if from_held else mids))
            rid = draw(st.sampled_from(sorted(runs)))
            if runs[rid]["status"] in _GOING and draw(st.booleans()):
                add("response_open", rid, message_id=mid)
            else:
                intent = draw(st.sampled_from(["prompt", "steer"]))
                add("message", rid, client="client-2", intent=intent, message=_text(mid, "again"))
        elif not live:
            continue
        elif op == "run":
            rid = draw(st.sampled_from(live))
            moves = set(TRANSITIONS[runs[rid]["status"]])
            if runs[rid]["status"] in ("active", "suspended"):
                moves.add("pending")  # the relay: a durable Run handed on, a resume
            new = draw(st.sampled_from(sorted(moves)))
            seen = None
            if new in TERMINAL and runs[rid]["inputs"] and draw(st.booleans()):
                seen = draw(st.lists(st.sampled_from(runs[rid]["inputs"]), min_size=1))
            error = draw(st.sampled_from(_ERRORS)) if new == "error" else None
            add("run", rid, status=new, seen=seen, error=error)
            runs[rid]["status"] = new
        elif op == "aim":
            rid = draw(st.sampled_from(live))
            mid = f"m{serial}"
            intent = draw(st.sampled_from(["steer", "follow_up", "inject"]))
            message = _text(mid, mid)
            if draw(st.integers(0, 5)) == 0:
                message["metadata"] = {"queued": "custom"}
            add(
                "message",
                rid,
                client="client-2",
                user_id="user-1",
                intent=intent,
                message=message,
                parent_id=parent(1),
            )
            runs[rid]["inputs"].append(mid)
            if runs[rid]["status"] == "queued":
                runs[rid]["held"].append(mid)
            mids.append(mid)
        elif op == "open":
            candidates = [r for r in live if runs[r]["status"] != "queued"]
            if not candidates:
                continue
            rid = draw(st.sampled_from(candidates))
            run = runs[rid]
            retry = run["open"] and draw(st.integers(0, 3)) == 0
            mid = draw(st.sampled_from(run["open"])) if retry else f"m{serial}"
            pool = run["inputs"] + [m for r in runs.values() for m in r["inputs"]][:3]
            seen = draw(st.lists(st.sampled_from(pool), max_size=3)) if pool else []
            metadata = {"step": serial} if draw(st.booleans()) else {}
            add(
                "response_open",
                rid,
                message_id=mid,
                parent_id=parent(1),
                seen=seen,
                metadata=metadata,
            )
            if not retry:
                run["open"].append(mid)
                run["responses"].append(mid)
                mids.append(mid)
        elif op == "append":
            rid = draw(st.sampled_from(live))
            pool = runs[rid]["responses"] + ["unknown", *mids[:1]]
            target = draw(st.sampled_from(pool))
            chunks = draw(st.lists(_CHUNKS, min_size=1, max_size=3))
            add("response_append", rid, message_id=target, chunks=chunks)
        elif op == "close":
            rid = draw(st.sampled_from(live))
            pool = runs[rid]["responses"] + ["unknown"]
            target = draw(st.sampled_from(pool))
            form = draw(st.integers(0, 2))
            message = None
            if form:
                message = _text(f"other-{serial}", f"done{serial}", "assistant")
                message["parts"] += draw(st.lists(st.sampled_from(_PARTS), max_size=2))
            replaces = {"closed": serial} if form != 1 else None
            add("response_close", rid, message_id=target, message=message, metadata=replaces)
            if target in runs[rid]["open"]:
                runs[rid]["open"].remove(target)
        elif op == "cancel":
            rid = draw(st.sampled_from(live))
            entry = add("cancel", rid, client="client-2", user_id="user-1")
            runs[rid]["cancels"].append(entry["id"])
        elif op == "cancel_denied":
            rid = draw(st.sampled_from(live))
            cancels = runs[rid]["cancels"]
            cancel_id = draw(st.sampled_from([None, *cancels])) if cancels else None
            add("cancel_denied", rid, cancel_id=cancel_id, reason="not now")
        elif op == "refused":
            rid = draw(st.sampled_from(live))
            inputs = runs[rid]["inputs"]
            stored = inputs and draw(st.booleans())
            mid = draw(st.sampled_from(inputs)) if stored else f"m{serial}"
            intent = draw(st.sampled_from(["steer", "follow_up", "inject"]))
            add(
                "refused",
                rid,
                client="agent-1" if stored else "relay",
                id=f"refused.{mid}",
                message_id=mid,
                intent=intent,
                error=draw(st.sampled_from(_ERRORS)),
            )
            if not stored:
                mids.append(mid)
        elif op == "interrupt":
            rid = draw(st.sampled_from(live))
            status = draw(st.sampled_from(["paused", "resumed", "declined"]))
            questions = [{"id": f"{rid}#1", **draw(st.sampled_from(_QUESTIONS))}]
            if status == "resumed":
                questions = [{**questions[0], "response": "this"}]
            add("interrupt", rid, client="client-1", status=status, interrupts=questions)
        elif op == "checkpoint":
            rid = draw(st.sampled_from(live))
            extra: Json = draw(st.sampled_from([{}, _CHECKPOINT]))
            add("checkpoint", rid, step=draw(st.integers(0, 3)), **extra)
        elif op == "duplicate":
            # The same entry delivered twice (a resume overlapping what was held).
            entries.append(dict(draw(st.sampled_from(entries))))
            serial -= 1
        elif op == "retry":
            # A message published again under a new serial (its id was not recognised).
            sent = [e for e in entries if e["kind"] == "message"]
            if sent:
                again = dict(draw(st.sampled_from(sent)))
                again.update(serial=serial, id=f"e{serial}", ts=1_700_000_000_000 + serial)
                entries.append(again)
    return entries


def _view(vm: ViewMessage | None) -> list[Any] | None:
    if vm is None:
        return None
    return [
        vm.message.id,
        vm.parent_id,
        vm.message.role,
        vm.run_id,
        vm.message.text(),
        [p.model_dump(mode="json") for p in vm.message.parts],
        vm.message.metadata,
        vm.intent,
        vm.serial,
        vm.refused,
    ]


def summary(tree: ConversationTree, entries: list[Json]) -> Json:
    """What a reader can observe of ``tree``; the same shape as summary() in the batch script."""
    mids: list[str] = []
    rids: list[str] = []
    for e in entries:
        if e["kind"] == "message":
            mids.append(e["message"]["id"])
        if e["kind"] in ("response_open", "refused"):
            mids.append(e["message_id"])
        rids.append(e["run_id"])
    nodes: Json = {}
    branches: Json = {}
    outcomes: Json = {}
    for mid in sorted(set(mids)):
        nodes[mid] = _view(tree.message(mid))
        branches[mid] = tree.branches(mid)
        rec = tree.outcome(mid)
        outcomes[mid] = (
            None
            if rec is None
            else [
                rec.message_id,
                rec.run_id,
                rec.consumed,
                rec.run_terminal_reason,
                rec.refused["code"] if rec.refused else None,
            ]
        )
    runs: Json = {}
    for rid in sorted(set(rids)):
        info = tree.run(rid)
        prompt = tree.prompt(rid)
        checkpoint = tree.checkpoint(rid)
        runs[rid] = {
            "info": None
            if info is None
            else [
                info.status,
                info.end_reason,
                info.client_id,
                info.user_id,
                info.agent,
                info.error,
            ],
            "cancel_requested": tree.cancel_requested(rid),
            "denials": [
                [d.cancel_id, d.serial, d.reason, d.client_id, d.user_id]
                for d in tree.cancel_denials(rid)
            ],
            "inputs": [vm.message.id for vm in tree.inputs(rid)],
            "steering": [vm.message.id for vm in tree.steering(rid)],
            "prompt": None if prompt is None else prompt.message.id,
            "responses": [[r.view.message.id, r.closed, list(r.seen)] for r in tree.responses(rid)],
            "pending": tree.pending(rid),
            "seen": sorted(tree.seen(rid)),
            "interrupts": [q.model_dump(mode="json") for q in tree.interrupts(rid)],
            "checkpoint": None
            if checkpoint is None
            else [
                checkpoint.step,
                checkpoint.serial,
                checkpoint.turn,
                checkpoint.iterations,
                checkpoint.seen,
                checkpoint.state,
            ],
            "refusals": [r.message_id for r in tree.refusals(rid)],
        }
    return {
        "messages": [_view(vm) for vm in tree.messages()],
        "nodes": nodes,
        "branches": branches,
        "outcomes": outcomes,
        "resolved": [r.message_id for r in tree.outcomes.resolved()],
        "runs": runs,
        "run_order": [r.run_id for r in tree.runs()],
        "waiting": [vm.message.id for vm in tree.waiting()],
        "refusals": [
            [r.message_id, r.run_id, r.intent, r.serial, r.error, r.client_id]
            for r in tree.refusals()
        ],
        "serials": [tree.oldest_serial, tree.newest_serial],
    }


def _event(ev: TreeEvent) -> list[Any]:
    if isinstance(ev, MessageEvent):
        return ["message", ev.op, ev.message.message.id, ev.shown]
    if isinstance(ev, DeliveryEvent):
        return ["delivery", ev.outcome.message_id]
    return ["run", ev.run.run_id, ev.run.status]


def pages(entries: list[Json], cuts: list[int]) -> list[Json]:
    """The steps of folding ``entries`` as history pages: the newest live, older ones after."""
    bounds = [0, *cuts, len(entries)]
    split = [entries[a:b] for a, b in pairwise(bounds) if a < b]
    steps: list[Json] = [{"fold": e} for e in split[-1]]
    steps += [{"older": list(reversed(page))} for page in reversed(split[:-1])]
    return steps


def play(steps: list[Json]) -> tuple[ConversationTree, list[list[list[Any]]]]:
    """Fold a plan's steps into a new tree; the tree and each step's events.

    A UI that follows the events (upsert a message an event says is shown, drop it
    otherwise) shows ``messages()`` after every step, each as the tree holds it.
    """
    tree = ConversationTree()
    events: list[list[list[Any]]] = []
    ui: dict[str, ViewMessage] = {}
    for i, step in enumerate(steps):
        if "fold" in step:
            got = tree.fold(step["fold"])
        elif "older" in step:
            got = tree.fold_older(step["older"])
        else:
            got = list(tree.select_branch(step["select"]))
        events.append([_event(ev) for ev in got])
        for ev in got:
            if isinstance(ev, MessageEvent):
                if ev.op != "removed" and ev.shown:
                    ui[ev.message.message.id] = ev.message
                else:
                    ui.pop(ev.message.message.id, None)
        shown = {vm.message.id: vm for vm in tree.messages()}
        assert ui == shown, f"step {i} ({step}): a UI following events shows other messages"
    return tree, events


def own_turns(entries: list[Json]) -> dict[str, list[str]]:
    """Per Run whose steering and responses never name a parent: its message ids, in order.

    (A message naming a parent the tree holds goes there, wherever that is.)
    """
    named: set[str] = set()
    turns: dict[str, list[str]] = {}
    for e in entries:
        if e["kind"] == "message":
            mid, prompt = e["message"]["id"], e.get("intent", "prompt") == "prompt"
        elif e["kind"] == "response_open":
            mid, prompt = e["message_id"], False
        else:
            continue
        if not prompt and e.get("parent_id") is not None:
            named.add(e["run_id"])
        turns.setdefault(e["run_id"], [])
        if mid not in turns[e["run_id"]]:
            turns[e["run_id"]].append(mid)
    return {rid: mids for rid, mids in turns.items() if rid not in named}


def check_invariants(tree: ConversationTree, entries: list[Json]) -> None:
    """What a user relies on, whatever the channel."""
    for rid, mids in own_turns(entries).items():
        # Its messages in the tree (branches() knows nodes only, not held prompts), root first.
        placed = [m for m in mids if tree.branches(m) and _view_of(tree, m).run_id == rid]
        placed.sort(key=lambda m: len(_ancestors(tree, m)))
        for upper, lower in pairwise(placed):
            assert upper in _ancestors(tree, lower), (
                f"run {rid}: {lower} is not below {upper}: its turn left its branch"
            )
        on_branch = {vm.message.id for vm in tree.messages(run_id=rid)}
        shown = {m for m in placed if not _view_of(tree, m).refused}
        assert shown <= on_branch, f"run {rid}: its view misses {sorted(shown - on_branch)}"
    path = tree.messages()  # refused messages are left out, the rest is a chain
    for above, below in pairwise(path):
        parent = below.parent_id
        while parent is not None and _view_of(tree, parent).refused:
            parent = _view_of(tree, parent).parent_id
        assert parent == above.message.id, "the active branch is not a chain"


def _view_of(tree: ConversationTree, mid: str) -> ViewMessage:
    vm = tree.message(mid)
    assert vm is not None
    return vm


def _ancestors(tree: ConversationTree, mid: str) -> set[str]:
    out: set[str] = set()
    parent = _view_of(tree, mid).parent_id
    while parent is not None:
        out.add(parent)
        parent = _view_of(tree, parent).parent_id
    return out


def run_node(cases: list[Json], tmp: Path) -> list[list[Json]]:
    """Each case's plans played by the JavaScript tree, in one ``node`` process."""
    assert NODE is not None
    path = tmp / "cases.json"
    path.write_text(json.dumps(cases))
    proc = subprocess.run(
        [NODE, str(BATCH), str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: list[list[Json]] = json.loads(proc.stdout)
    return result


@st.composite
def cases(draw: st.DrawFn) -> Json:
    """A channel, and the plans that fold it: in order, as pages, and both with selections."""
    entries = draw(channels())
    cuts = sorted(draw(st.sets(st.integers(0, len(entries)), max_size=4)))
    in_order = [{"fold": e} for e in entries]
    paged = pages(entries, cuts)
    mids = sorted(
        {e["message"]["id"] for e in entries if e["kind"] == "message"}
        | {e["message_id"] for e in entries if e["kind"] == "response_open"}
        | {"unknown"}
    )
    plans = [in_order, paged]
    for steps in (in_order, paged):
        picks = draw(st.lists(st.tuples(st.integers(0, len(steps)), st.sampled_from(mids))))
        selecting = list(steps)
        for at, mid in sorted(picks, key=lambda p: -p[0]):
            selecting.insert(at, {"select": mid})
        plans.append(selecting)
    return {"entries": entries, "plans": plans}


def check(case: Json, js: list[Json]) -> None:
    """The Python tree against the JavaScript one, and against itself across plans."""
    entries = case["entries"]
    reference: Json | None = None
    for i, (steps, got) in enumerate(zip(case["plans"], js, strict=True)):
        tree, events = play(steps)
        expected = json.loads(json.dumps(summary(tree, entries)))
        if i == 0:
            check_invariants(tree, entries)
            reference = expected
        elif i == 1:
            assert expected == reference, "Python: history pages differ from the in-order fold"
        delivered = [ev[1] for step in events for ev in step if ev[0] == "delivery"]
        assert len(set(delivered)) == len(delivered), f"plan {i}: an outcome reported twice"
        assert got["error"] is None, f"plan {i}: JavaScript raised {got['error']}"
        assert got["summary"] == expected, f"plan {i}: JavaScript differs from Python"
        assert got["events"] == events, f"plan {i}: JavaScript reports other events"


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@settings(
    # The same examples every run (the suite never flakes); RUNWIRE_TREE_FUZZ=N explores N
    # fresh batches of up to 40 channels each instead.
    max_examples=int(os.environ.get("RUNWIRE_TREE_FUZZ", "50")),
    derandomize="RUNWIRE_TREE_FUZZ" not in os.environ,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(cases(), min_size=1, max_size=40))
def test_python_and_javascript_trees_agree(
    tmp_path_factory: pytest.TempPathFactory, batch: list[Json]
) -> None:
    js = run_node(batch, tmp_path_factory.mktemp("batch"))
    for case, got in zip(batch, js, strict=True):
        check(case, got)
