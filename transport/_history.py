"""What a Run leaves behind, read back for a model: interrupted replies and lost tool calls.

A Run that stops early leaves its conversation whole:

* A reply cut short by a cancel is saved with ``metadata.interrupted: true``.
  ``history_message(message)`` renders it for a model with ``[interrupted by the user]`` after
  it. So the model does not take the part that was shown for a finished answer.
* Tool calls that had not started when the Run stopped are answered with
  ``ABORTED_BEFORE_DISPATCH``. Calls that finished keep their results. A call still running gets
  no result at all.
* A crash leaves calls without results. ``repair_unanswered_tool_calls`` gives each such call the
  result ``OUTCOME_UNKNOWN``: the call may have run, so verify before retrying. It returns new
  messages, and never changes what it was given or the channel's log.

A result that carries a code is ``ToolResultPart(is_error=True, output={"code": ...,
"message": ...})``, as the tool runner writes it. The stream chunk for it is
``tool-output-error`` with ``errorCode``; docs/explanation/chunks.md has the details.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .messages import Part, TextPart, ToolCallPart, ToolResultPart, UIMessage

__all__ = [
    "ABORTED_BEFORE_DISPATCH",
    "ABORTED_BEFORE_DISPATCH_TEXT",
    "INTERRUPTED_MARK",
    "OUTCOME_UNKNOWN",
    "OUTCOME_UNKNOWN_TEXT",
    "coded_result",
    "history_message",
    "model_history",
    "repair_unanswered_tool_calls",
]

ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"
"""The result code of a tool call the Run never started (it was stopped first)."""
ABORTED_BEFORE_DISPATCH_TEXT = (
    "Aborted before dispatch: the run stopped before this tool call started"
)
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
"""The result code history repair gives a tool call that never got a result."""
OUTCOME_UNKNOWN_TEXT = (
    "The run stopped before this tool call returned: outcome unknown, verify before retrying"
)
INTERRUPTED_MARK = "[interrupted by the user]"
"""What ``history_message`` puts after a reply the user interrupted."""


def coded_result(call: ToolCallPart, code: str, message: str) -> ToolResultPart:
    """An error result for ``call`` carrying ``code`` (``output={"code", "message"}``)."""
    output: dict[str, Any] = {"code": code, "message": message}
    return ToolResultPart(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, output=output, is_error=True
    )


def history_message(message: UIMessage) -> UIMessage:
    """``message`` as a model should read it from history.

    A message with ``metadata.interrupted`` gets a text part
    ``[interrupted by the user]`` after its content (a new message; the given
    one is untouched). A tool call whose input never became whole (its
    ``input_text`` is set) is left out: it was never made. Any other message
    is returned as it is.
    """
    kept = [p for p in message.parts if not _unfinished(p)]
    if not message.metadata.get("interrupted"):
        if len(kept) == len(message.parts):
            return message
        return message.model_copy(update={"parts": kept})
    parts: list[Part] = [*kept, TextPart(text=f"\n{INTERRUPTED_MARK}")]
    if not kept:
        parts = [TextPart(text=INTERRUPTED_MARK)]
    return message.model_copy(update={"parts": parts})


def _unfinished(part: Part) -> bool:
    return isinstance(part, ToolCallPart) and part.input_text is not None


def _answered(messages: Iterable[UIMessage]) -> set[str]:
    return {
        part.tool_call_id
        for message in messages
        for part in message.parts
        if isinstance(part, ToolResultPart)
    }


def repair_unanswered_tool_calls(messages: Sequence[UIMessage]) -> list[UIMessage]:
    """``messages`` with an ``OUTCOME_UNKNOWN`` result after every tool call that has none.

    A call counts as answered when any message of the list has a result with
    its ``tool_call_id``. The result goes right after the call, in the call's
    message (a new message object; the given ones are never changed). Messages
    that need nothing are returned as they are.
    """
    answered = _answered(messages)
    out: list[UIMessage] = []
    for message in messages:
        calls = [
            p
            for p in message.parts
            if isinstance(p, ToolCallPart) and p.tool_call_id not in answered
        ]
        if not calls:
            out.append(message)
            continue
        parts: list[Part] = []
        for part in message.parts:
            parts.append(part)
            if isinstance(part, ToolCallPart) and part.tool_call_id not in answered:
                parts.append(coded_result(part, OUTCOME_UNKNOWN, OUTCOME_UNKNOWN_TEXT))
                answered.add(part.tool_call_id)
        out.append(message.model_copy(update={"parts": parts}))
    return out


def model_history(messages: Iterable[UIMessage]) -> list[UIMessage]:
    """The conversation as a model should read it: interrupted replies marked
    ``[interrupted by the user]`` (``history_message``), empty replies left out, and
    every tool call without a result answered ``OUTCOME_UNKNOWN``
    (``repair_unanswered_tool_calls``)."""
    out: list[UIMessage] = []
    for message in messages:
        if message.role == "assistant" and not message.parts:
            if not message.metadata.get("interrupted"):
                continue
        out.append(history_message(message))
    return repair_unanswered_tool_calls(out)
