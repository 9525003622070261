"""Folding UI message stream chunks into a message, without I/O.

An agent streams its reply as chunks with the AI SDK's names and camelCase keys, such as
``text-delta`` or ``tool-input-available``. ``fold_chunks`` folds them into the parts of one
``UIMessage``, whose keys are snake_case. ``fold_part`` folds one chunk other than text and
reasoning. The conversation tree and the agent SDK both use them, so every side builds the same
message.

A chunk with ids, deltas or texts that are not strings is ignored, as is a chunk type this module
does not know.

See docs/explanation/chunks.md for what each chunk does to the message.
"""

from __future__ import annotations

from typing import Any

from .messages import (
    DataPart,
    FilePart,
    Part,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UIMessage,
)

__all__ = ["TOOL_DENIED", "fold_chunks", "fold_part"]

TOOL_DENIED = "TOOL_DENIED"
"""The result code a ``tool-output-denied`` chunk gives its call."""
_DENIED_TEXT = "the tool call was denied"


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
        else:
            changed |= fold_part(parts, chunk)
    if not changed:
        return message
    return message.model_copy(update={"parts": parts})


def fold_part(parts: list[Any], chunk: dict[str, Any]) -> bool:
    """Fold one chunk other than text and reasoning into ``parts``; True if they changed.

    Parts are only replaced in place or appended, so indexes stay valid.
    ``parts`` may hold other objects beside ``Part`` models (they are skipped).
    """
    kind = chunk.get("type")
    if not isinstance(kind, str):
        return False
    if kind.startswith("tool-"):
        return _fold_tool(parts, kind, chunk)
    if kind.startswith("data-"):
        return _fold_data(parts, kind, chunk)
    part: Part | None = None
    if kind == "source-url":
        source_id, url, title = chunk.get("sourceId"), chunk.get("url"), chunk.get("title")
        if _strings(source_id, url) and _optional(title):
            part = SourceUrlPart(source_id=source_id, url=url, title=title)
    elif kind == "source-document":
        source_id, media, title = chunk.get("sourceId"), chunk.get("mediaType"), chunk.get("title")
        filename = chunk.get("filename")
        if _strings(source_id, media, title) and _optional(filename):
            part = SourceDocumentPart(
                source_id=source_id, media_type=media, title=title, filename=filename
            )
    elif kind == "file":
        url, media = chunk.get("url"), chunk.get("mediaType")
        if _strings(url, media):
            part = FilePart(url=url, media_type=media)
    if part is None:
        return False
    parts.append(part)
    return True


def _fold_tool(parts: list[Any], kind: str, chunk: dict[str, Any]) -> bool:
    call_id = chunk.get("toolCallId")
    if not isinstance(call_id, str):
        return False
    if kind == "tool-input-start":
        name = chunk.get("toolName")
        if not isinstance(name, str) or _call_index(parts, call_id) is not None:
            return False
        parts.append(ToolCallPart(tool_call_id=call_id, tool_name=name, input_text=""))
        return True
    if kind == "tool-input-delta":
        delta, index = chunk.get("inputTextDelta"), _call_index(parts, call_id)
        if not isinstance(delta, str) or not delta or index is None:
            return False
        call = parts[index]
        if call.input_text is None:
            return False
        parts[index] = call.model_copy(update={"input_text": call.input_text + delta})
        return True
    if kind in ("tool-input-available", "tool-input-error"):
        name, error = chunk.get("toolName"), chunk.get("errorText")
        if not isinstance(name, str) or (kind == "tool-input-error" and not isinstance(error, str)):
            return False
        whole = ToolCallPart(tool_call_id=call_id, tool_name=name, input=chunk.get("input"))
        index = _call_index(parts, call_id)
        if index is None:
            parts.append(whole)
        else:
            parts[index] = whole
        if kind == "tool-input-error":
            parts.append(_result(call_id, name, error, is_error=True))
        return True
    name = _tool_name(parts, call_id, chunk.get("toolName"))
    if kind == "tool-output-available":
        if chunk.get("preliminary") is True:
            return False
        parts.append(_result(call_id, name, chunk.get("output")))
        return True
    if kind == "tool-output-error":
        error, code = chunk.get("errorText"), chunk.get("errorCode")
        if not isinstance(error, str):
            return False
        output: Any = {"code": code, "message": error} if isinstance(code, str) else error
        parts.append(_result(call_id, name, output, is_error=True))
        return True
    if kind == "tool-output-denied":
        denied = {"code": TOOL_DENIED, "message": _DENIED_TEXT}
        parts.append(_result(call_id, name, denied, is_error=True))
        return True
    return False


def _fold_data(parts: list[Any], kind: str, chunk: dict[str, Any]) -> bool:
    part_id = chunk.get("id")
    if chunk.get("transient") is True or not _optional(part_id) or len(kind) == len("data-"):
        return False
    part = DataPart(type=kind, id=part_id, data=chunk.get("data"))
    if part_id is not None:
        for i, old in enumerate(parts):
            if isinstance(old, DataPart) and old.type == kind and old.id == part_id:
                parts[i] = part
                return True
    parts.append(part)
    return True


def _result(call_id: str, name: str, output: Any, *, is_error: bool = False) -> ToolResultPart:
    return ToolResultPart(tool_call_id=call_id, tool_name=name, output=output, is_error=is_error)


def _strings(*values: Any) -> bool:
    return all(isinstance(v, str) for v in values)


def _optional(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _call_index(parts: list[Any], call_id: str) -> int | None:
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
            return i
    return None


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


def _tool_name(parts: list[Any], call_id: str, fallback: Any) -> str:
    index = _call_index(parts, call_id)
    if index is not None:
        name: str = parts[index].tool_name
        return name
    return fallback if isinstance(fallback, str) else ""
