"""Folding UI message stream chunks into a message (no I/O).

Chunks (AI SDK names, camelCase keys): ``text-start {id}`` starts an empty text
part known by ``id``; ``text-delta {id?, delta}`` appends to the part with that
id (a new one for an unknown id) or, without an id, to the last part if it is a
text part, else a new one; ``text-end`` does nothing; ``reasoning-*`` likewise
for reasoning parts. ``tool-input-available {toolCallId, toolName, input}``
adds a tool call; ``tool-output-available {toolCallId, output}`` adds a result
named after its call (else the chunk's ``toolName``, else ``""``);
``tool-output-error {toolCallId, errorText, errorCode?}`` adds a result with
``is_error`` and ``output=errorText``, or, with a string ``errorCode``,
``output={"code": errorCode, "message": errorText}`` (how runwire's tool
runner and history repair write results that carry a code). Non-string ids,
deltas or texts make a chunk ignored, as are all other chunk types.

``transport.tree`` folds responses with it; the agent SDK's ``MessageBuilder``
follows the same rules.
"""

from __future__ import annotations

from typing import Any

from .messages import Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart, UIMessage

__all__ = ["fold_chunks"]


def fold_chunks(
    message: UIMessage, part_ids: dict[tuple[str, str], int], chunks: list[dict[str, Any]]
) -> UIMessage:
    """``message`` with ``chunks`` folded in (a new object; ``message`` is untouched).

    ``part_ids`` maps ``(family, id)`` to part indexes; it is updated in place
    and belongs with the message from one call to the next.
    """
    parts: list[Part] = list(message.parts)
    changed = False
    for chunk in chunks:
        kind = chunk.get("type")
        if kind in ("text-start", "text-delta"):
            changed |= _stream(parts, part_ids, "text", kind == "text-start", chunk)
        elif kind in ("reasoning-start", "reasoning-delta"):
            changed |= _stream(parts, part_ids, "reasoning", kind == "reasoning-start", chunk)
        elif kind == "tool-input-available":
            call_id, name = chunk.get("toolCallId"), chunk.get("toolName")
            if isinstance(call_id, str) and isinstance(name, str):
                parts.append(
                    ToolCallPart(tool_call_id=call_id, tool_name=name, input=chunk.get("input"))
                )
                changed = True
        elif kind in ("tool-output-available", "tool-output-error"):
            call_id = chunk.get("toolCallId")
            error = chunk.get("errorText")
            if not isinstance(call_id, str) or (
                kind == "tool-output-error" and not isinstance(error, str)
            ):
                continue
            name = _tool_name(parts, call_id, chunk.get("toolName"))
            if kind == "tool-output-error":
                code = chunk.get("errorCode")
                output: Any = {"code": code, "message": error} if isinstance(code, str) else error
                part = ToolResultPart(
                    tool_call_id=call_id, tool_name=name, output=output, is_error=True
                )
            else:
                part = ToolResultPart(
                    tool_call_id=call_id, tool_name=name, output=chunk.get("output")
                )
            parts.append(part)
            changed = True
    if not changed:
        return message
    return message.model_copy(update={"parts": parts})


def _stream(
    parts: list[Part],
    ids: dict[tuple[str, str], int],
    family: str,
    start: bool,
    chunk: dict[str, Any],
) -> bool:
    """Fold one text/reasoning start or delta; True if the parts changed."""
    cls: type[TextPart] | type[ReasoningPart] = TextPart if family == "text" else ReasoningPart
    cid = chunk.get("id")
    if cid is not None and not isinstance(cid, str):
        return False
    delta = "" if start else chunk.get("delta")
    if not isinstance(delta, str):
        return False
    index: int | None
    if start:
        index = None
    elif cid is not None:
        index = ids.get((family, cid))
    else:
        index = len(parts) - 1 if parts and isinstance(parts[-1], cls) else None
    if index is None:
        parts.append(cls(text=delta))
        if cid is not None:
            ids[(family, cid)] = len(parts) - 1
        return True
    if not delta:
        return False
    old = parts[index]
    assert isinstance(old, TextPart | ReasoningPart)
    parts[index] = cls(text=old.text + delta)
    return True


def _tool_name(parts: list[Part], call_id: str, fallback: Any) -> str:
    for part in reversed(parts):
        if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
            return part.tool_name
    return fallback if isinstance(fallback, str) else ""
