"""Durable Runs: stable step ids, and what a worker that adopts a Run takes up.

Every step of a Run publishes one response whose message id depends only on
the run id and the step number: ``<run>.s<k>`` for a model call and
``<run>.s<k>.tools`` for tools. A durable Run publishes a ``checkpoint`` entry
after each step, with a fixed id too, so the relay drops a repeat.

When the relay passes the Run to another worker, the new ``Run`` is
``adopted``. ``plan_adoption`` reads the checkpoint and the Run's responses,
and says which step to retry, which replies to close as they stand, and which
tool calls to answer without running them. docs/explanation/agent-runs.md
tells each case and its reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transport._history import ABORTED_BEFORE_DISPATCH, ABORTED_BEFORE_DISPATCH_TEXT, coded_result
from transport._tree import ConversationTree
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

__all__ = [
    "TOOL_STEP",
    "Adoption",
    "not_started",
    "plan_adoption",
    "run_prefix",
    "step_message_id",
    "tool_step_metadata",
]

TOOL_STEP = "tool_step"
"""The metadata key of a tool step's response: ``{"calls": [...], "parallel": bool}``."""


def run_prefix(run_id: str) -> str:
    """The prefix of a Run's step ids (the run id, or its hash when it is long)."""
    return run_id if len(run_id) <= 150 else hashlib.sha256(run_id.encode()).hexdigest()[:32]


def step_message_id(prefix: str, step: int, *, tools: bool = False) -> str:
    """The message id of step ``step`` of the Run with ``prefix``."""
    return f"{prefix}.s{step}.tools" if tools else f"{prefix}.s{step}"


def tool_step_metadata(calls: Sequence[ToolCallPart], *, parallel: bool) -> dict[str, Any]:
    """What a tool step's ``response_open`` says: its calls, in order, and how they run."""
    listed = [{"tool_call_id": c.tool_call_id, "tool_name": c.tool_name} for c in calls]
    return {TOOL_STEP: {"calls": listed, "parallel": parallel}}


def _step_calls(message: UIMessage) -> list[ToolCallPart] | None:
    """The calls of a sequential tool step, as its metadata names them; else ``None``."""
    meta = message.metadata.get(TOOL_STEP)
    if not isinstance(meta, dict) or meta.get("parallel") is not False:
        return None
    listed = meta.get("calls")
    if not isinstance(listed, list):
        return None
    calls: list[ToolCallPart] = []
    for item in listed:
        if not isinstance(item, dict):
            return None
        call_id, name = item.get("tool_call_id"), item.get("tool_name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            return None
        calls.append(ToolCallPart(tool_call_id=call_id, tool_name=name))
    return calls


def not_started(message: UIMessage) -> list[ToolCallPart]:
    """The calls of a half-published tool step that provably never started.

    Only a sequential step tells: its calls start in order, each once the
    result of the one before it is published. The first call without a result
    may have started; those after it did not. After it, only
    ``ABORTED_BEFORE_DISPATCH`` results may stand (a cancel writes them once
    the running call is left); any other result there means the entries do
    not follow that order, and nothing is proved.
    """
    calls = _step_calls(message)
    if not calls:
        return []
    results = {p.tool_call_id: p for p in message.parts if isinstance(p, ToolResultPart)}
    first = next((i for i, c in enumerate(calls) if c.tool_call_id not in results), None)
    if first is None:
        return []
    later = calls[first + 1 :]
    for call in later:
        result = results.get(call.tool_call_id)
        if result is not None and not _aborted(result):
            return []
    return [c for c in later if c.tool_call_id not in results]


def _aborted(result: ToolResultPart) -> bool:
    output = result.output
    return (
        result.is_error
        and isinstance(output, dict)
        and output.get("code") == ABORTED_BEFORE_DISPATCH
    )


def _aborted_chunk(call: ToolCallPart) -> dict[str, Any]:
    """The stream chunk answering ``call`` ``ABORTED_BEFORE_DISPATCH``."""
    return {
        "type": "tool-output-error",
        "toolCallId": call.tool_call_id,
        "toolName": call.tool_name,
        "errorText": ABORTED_BEFORE_DISPATCH_TEXT,
        "errorCode": ABORTED_BEFORE_DISPATCH,
    }


def _parse(prefix: str, message_id: str) -> tuple[int, bool] | None:
    match = re.fullmatch(re.escape(prefix) + r"\.s(\d+)(\.tools)?", message_id)
    if match is None:
        return None
    return int(match.group(1)), match.group(2) is not None


@dataclass
class Adoption:
    """Where an adopted Run goes on from."""

    step: int = 0
    turn: int = 1
    iterations: int = 0
    seen: set[str] = field(default_factory=set)
    state: dict[str, Any] = field(default_factory=dict)
    retry_id: str | None = None
    """A half-published model step the next ``pipe()`` replaces."""
    close: list[UIMessage] = field(default_factory=list)
    """Half-published responses to close as they stand at ``start()``."""
    close_appends: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Chunks to append to a response of ``close`` before its close, by message id: the
    ``ABORTED_BEFORE_DISPATCH`` results of the calls its tool step never started (the
    message in ``close`` has them already)."""
    owe: bool = False
    """The model is owed a call although no new input came (tool results, a retried step)."""
    unrun: list[ToolCallPart] = field(default_factory=list)
    """Tool calls of the newest (closed) model step that no tool step started."""
    unrun_steered: bool = False
    """Steering newer than that model step waits: its calls are not run."""


def plan_adoption(
    tree: ConversationTree, run_id: str, prefix: str, checkpoint: dict[str, Any] | None
) -> Adoption:
    """What an adopted Run goes on from (see the module docstring)."""
    plan = Adoption()
    if checkpoint is None:
        entry = tree.checkpoint(run_id)
        if entry is not None:
            checkpoint = entry.model_dump(include={"step", "turn", "iterations", "seen", "state"})
    if checkpoint is not None:
        plan.step = int(checkpoint.get("step", 0))
        plan.turn = int(checkpoint.get("turn", 1))
        plan.iterations = int(checkpoint.get("iterations", 0))
        plan.seen.update(checkpoint.get("seen", ()))
        plan.state = dict(checkpoint.get("state") or {})
    open_steps: list[tuple[int | None, bool, UIMessage]] = []
    newest: tuple[int, bool] = (0, False)  # the newest closed step, and whether it ran tools
    newest_model: tuple[int, UIMessage, int] | None = None  # step, message, open serial
    for response in tree.responses(run_id):
        parsed = _parse(prefix, response.view.message.id)
        if response.closed:
            plan.seen.update(response.seen)
            if parsed is not None:
                plan.step = max(plan.step, parsed[0])
                newest = max(newest, parsed)
                if not parsed[1] and (newest_model is None or parsed[0] > newest_model[0]):
                    newest_model = (parsed[0], response.view.message, response.view.serial)
        else:
            step, tools = parsed if parsed is not None else (None, False)
            open_steps.append((step, tools, response.view.message))
    plan.owe = newest[1]  # tool results the model has not read
    for step, tools, message in open_steps:
        if step is not None and not tools and step == plan.step + 1:
            plan.retry_id = message.id
            plan.owe = True
        elif step is not None and tools:
            unstarted = not_started(message)
            if unstarted:
                plan.close_appends[message.id] = [_aborted_chunk(c) for c in unstarted]
                parts = [
                    *message.parts,
                    *(
                        coded_result(c, ABORTED_BEFORE_DISPATCH, ABORTED_BEFORE_DISPATCH_TEXT)
                        for c in unstarted
                    ),
                ]
                message = message.model_copy(update={"parts": parts})
            plan.close.append(message)
            plan.step = max(plan.step, step)
            plan.owe = True
        else:
            metadata = {**message.metadata, "interrupted": True}
            plan.close.append(message.model_copy(update={"metadata": metadata}))
    if (
        newest_model is not None
        and newest == (newest_model[0], False)
        and plan.retry_id is None
        and not any(tools for _, tools, _ in open_steps)
    ):
        step, message, serial = newest_model
        answered = {p.tool_call_id for p in message.parts if isinstance(p, ToolResultPart)}
        plan.unrun = [
            p
            for p in message.parts
            if isinstance(p, ToolCallPart) and p.tool_call_id not in answered
        ]
        if plan.unrun:
            plan.unrun_steered = any(
                vm.intent == "steer" and vm.serial > serial and vm.message.id not in plan.seen
                for vm in tree.inputs(run_id)
            )
    return plan
