"""A session's entries as AG-UI events (https://docs.ag-ui.com), one entry at a time.

The mapping has no state, so a reader may start at any entry and resume after any serial.

- A prompt becomes a user text message.
- A reply becomes an assistant text message whose text deltas are its content. Its tool calls,
  with their start, arguments and end, and their results come in between.
- Run status changes become ``RUN_STARTED``, ``RUN_FINISHED`` and ``RUN_ERROR``.
- A checkpoint's state becomes ``STATE_SNAPSHOT``.
- Steering, follow-ups, injects, cancels, refusals, interrupts and data parts become ``CUSTOM``
  events named ``runwire.<what>``.

Tool input previews, ``tool-input-start`` and ``-delta``, and reasoning are left out. The
JavaScript client's ``toAgUiEvents`` in client_side/js/src/ag-ui.ts is the same mapping. The JSON
vectors in tests/vectors/ag-ui/ pin both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

Event = dict[str, Any]

#: The Run statuses that are not a start or an end: a ``runwire.run_status`` event.
_OTHER_STATUS = {"queued", "pending", "suspended"}


def _json(value: Any) -> str:
    """Compact JSON, as JavaScript's ``JSON.stringify`` writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _text(message: Any) -> str:
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return ""
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )


def _custom(name: str, value: dict[str, Any]) -> Event:
    return {"type": "CUSTOM", "name": f"runwire.{name}", "value": value}


def _chunk_events(mid: str, chunk: Any) -> list[Event]:
    if not isinstance(chunk, dict):
        return []
    kind = chunk.get("type")
    call = chunk.get("toolCallId")
    if kind == "text-delta" and isinstance(chunk.get("delta"), str) and chunk["delta"]:
        return [{"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": chunk["delta"]}]
    if kind == "tool-input-available" and isinstance(call, str):
        name = chunk.get("toolName")
        if not isinstance(name, str):
            return []
        return [
            {
                "type": "TOOL_CALL_START",
                "toolCallId": call,
                "toolCallName": name,
                "parentMessageId": mid,
            },
            {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": _json(chunk.get("input"))},
            {"type": "TOOL_CALL_END", "toolCallId": call},
        ]
    if kind in ("tool-output-available", "tool-output-error") and isinstance(call, str):
        if kind == "tool-output-error":
            content = chunk.get("errorText")
            if not isinstance(content, str):
                return []
        else:
            content = _json(chunk.get("output"))
        return [
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"{call}-result",
                "toolCallId": call,
                "content": content,
                "role": "tool",
            }
        ]
    if isinstance(kind, str) and kind.startswith("data-"):
        return [{"type": "CUSTOM", "name": kind, "value": chunk.get("data")}]
    return []


def entry_events(entry: dict[str, Any], thread_id: str) -> list[Event]:
    """The AG-UI events one stored entry stands for (none for what AG-UI has no word for)."""
    kind = entry.get("kind")
    run_id = entry.get("run_id")
    out: list[Event] = []
    if kind == "message":
        message = entry.get("message") or {}
        intent = entry.get("intent")
        text = _text(message)
        if intent == "prompt":
            mid = message.get("id")
            role = message.get("role") if message.get("role") in ("user", "system") else "user"
            out.append({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": role})
            if text:
                out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": text})
            out.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
        else:
            value = {"runId": run_id, "messageId": message.get("id"), "text": text}
            out.append(_custom(str(intent), value))
    elif kind == "run":
        status = entry.get("status")
        if status == "active":
            out.append({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id})
        elif status == "complete":
            out.append({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id})
        elif status == "cancelled":
            out.append(
                {
                    "type": "RUN_FINISHED",
                    "threadId": thread_id,
                    "runId": run_id,
                    "result": {"status": "cancelled"},
                }
            )
        elif status == "error":
            raw = entry.get("error")
            error: dict[str, Any] = raw if isinstance(raw, dict) else {}
            text = error.get("message") or "the Run failed"
            event: Event = {"type": "RUN_ERROR", "message": text}
            if isinstance(error.get("code"), str):
                event["code"] = error["code"]
            out.append(event)
        elif status in _OTHER_STATUS:
            out.append(_custom("run_status", {"runId": run_id, "status": status}))
    elif kind == "response_open":
        mid = entry.get("message_id")
        out.append({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"})
    elif kind == "response_append":
        for chunk in entry.get("chunks") or []:
            out.extend(_chunk_events(str(entry.get("message_id")), chunk))
    elif kind == "response_close":
        out.append({"type": "TEXT_MESSAGE_END", "messageId": entry.get("message_id")})
    elif kind == "checkpoint":
        out.append({"type": "STATE_SNAPSHOT", "snapshot": entry.get("state") or {}})
    elif kind == "interrupt":
        value = {"runId": run_id, "status": entry.get("status")}
        for field in ("interrupts", "responses", "reason"):
            if entry.get(field) is not None:
                value[field] = entry[field]
        out.append(_custom("interrupt", value))
    elif kind == "cancel":
        out.append(_custom("cancel", {"runId": run_id, "reason": entry.get("reason")}))
    elif kind == "cancel_denied":
        value = {"runId": run_id, "cancelId": entry.get("cancel_id"), "reason": entry.get("reason")}
        out.append(_custom("cancel_denied", value))
    elif kind == "refused":
        value = {
            "runId": run_id,
            "messageId": entry.get("message_id"),
            "intent": entry.get("intent"),
            "error": entry.get("error"),
        }
        out.append(_custom("refused", value))
    ts = entry.get("ts")
    if isinstance(ts, int):
        for event in out:
            event["timestamp"] = ts
    return out


def session_events(entries: Iterable[dict[str, Any]], thread_id: str) -> list[Event]:
    """Every entry's events, in order."""
    return [event for entry in entries for event in entry_events(entry, thread_id)]
