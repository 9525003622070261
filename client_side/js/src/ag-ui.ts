// @runwire/client/ag-ui: a session's entries as AG-UI events (https://docs.ag-ui.com), one entry
// at a time, with no state: a reader may start at any entry and resume after any serial. The
// same mapping as transport/agui.py (the relay's `GET /v1/sessions/{id}/events?format=ag-ui`);
// the JSON vectors in tests/vectors/ag-ui/ pin both. Read that module's docstring for the rules.

import { IteratorQueue } from "./queue.js";
import type { Session } from "./session.js";
import type { Entry } from "./types.js";

/** One AG-UI event (`type` is an AG-UI EventType name, such as "TEXT_MESSAGE_CONTENT"). */
export type AgUiEvent = { type: string; [key: string]: unknown };

const OTHER_STATUS = new Set(["queued", "pending", "suspended"]);

function text(message: unknown): string {
  const parts = (message as { parts?: unknown } | null)?.parts;
  if (!Array.isArray(parts)) return "";
  return parts
    .filter((p) => p && typeof p === "object" && p.type === "text" && typeof p.text === "string")
    .map((p) => p.text as string)
    .join("");
}

const custom = (name: string, value: Record<string, unknown>): AgUiEvent => ({ type: "CUSTOM", name: `runwire.${name}`, value });

function chunkEvents(mid: string, chunk: unknown): AgUiEvent[] {
  if (!chunk || typeof chunk !== "object" || Array.isArray(chunk)) return [];
  const c = chunk as Record<string, unknown>;
  const kind = c.type;
  const call = c.toolCallId;
  if (kind === "text-delta" && typeof c.delta === "string" && c.delta) {
    return [{ type: "TEXT_MESSAGE_CONTENT", messageId: mid, delta: c.delta }];
  }
  if (kind === "tool-input-available" && typeof call === "string") {
    if (typeof c.toolName !== "string") return [];
    return [
      { type: "TOOL_CALL_START", toolCallId: call, toolCallName: c.toolName, parentMessageId: mid },
      { type: "TOOL_CALL_ARGS", toolCallId: call, delta: JSON.stringify(c.input ?? null) },
      { type: "TOOL_CALL_END", toolCallId: call },
    ];
  }
  if ((kind === "tool-output-available" || kind === "tool-output-error") && typeof call === "string") {
    let content: string;
    if (kind === "tool-output-error") {
      if (typeof c.errorText !== "string") return [];
      content = c.errorText;
    } else content = JSON.stringify(c.output ?? null);
    return [{ type: "TOOL_CALL_RESULT", messageId: `${call}-result`, toolCallId: call, content, role: "tool" }];
  }
  if (typeof kind === "string" && kind.startsWith("data-")) return [{ type: "CUSTOM", name: kind, value: c.data ?? null }];
  return [];
}

/** The AG-UI events one entry stands for (none for what AG-UI has no word for). */
export function entryEvents(entry: Entry, threadId: string): AgUiEvent[] {
  const kind = entry.kind;
  const runId = entry.run_id ?? null;
  const out: AgUiEvent[] = [];
  if (kind === "message") {
    const message = entry.message ?? {};
    const body = text(message);
    if (entry.intent === "prompt") {
      const mid = message.id;
      const role = message.role === "user" || message.role === "system" ? message.role : "user";
      out.push({ type: "TEXT_MESSAGE_START", messageId: mid, role });
      if (body) out.push({ type: "TEXT_MESSAGE_CONTENT", messageId: mid, delta: body });
      out.push({ type: "TEXT_MESSAGE_END", messageId: mid });
    } else {
      out.push(custom(String(entry.intent), { runId, messageId: message.id ?? null, text: body }));
    }
  } else if (kind === "run") {
    const status = entry.status;
    if (status === "active") out.push({ type: "RUN_STARTED", threadId, runId });
    else if (status === "complete") out.push({ type: "RUN_FINISHED", threadId, runId });
    else if (status === "cancelled") out.push({ type: "RUN_FINISHED", threadId, runId, result: { status: "cancelled" } });
    else if (status === "error") {
      const error = entry.error && typeof entry.error === "object" ? entry.error : {};
      const event: AgUiEvent = { type: "RUN_ERROR", message: error.message || "the Run failed" };
      if (typeof error.code === "string") event.code = error.code;
      out.push(event);
    } else if (OTHER_STATUS.has(status)) out.push(custom("run_status", { runId, status }));
  } else if (kind === "response_open") {
    out.push({ type: "TEXT_MESSAGE_START", messageId: entry.message_id, role: "assistant" });
  } else if (kind === "response_append") {
    for (const chunk of entry.chunks ?? []) out.push(...chunkEvents(String(entry.message_id), chunk));
  } else if (kind === "response_close") {
    out.push({ type: "TEXT_MESSAGE_END", messageId: entry.message_id });
  } else if (kind === "checkpoint") {
    const state = entry.state;
    out.push({ type: "STATE_SNAPSHOT", snapshot: state && (typeof state !== "object" || Object.keys(state).length) ? state : {} });
  } else if (kind === "interrupt") {
    const value: Record<string, unknown> = { runId, status: entry.status ?? null };
    for (const field of ["interrupts", "responses", "reason"]) {
      if (entry[field] !== undefined && entry[field] !== null) value[field] = entry[field];
    }
    out.push(custom("interrupt", value));
  } else if (kind === "cancel") {
    out.push(custom("cancel", { runId, reason: entry.reason ?? null }));
  } else if (kind === "cancel_denied") {
    out.push(custom("cancel_denied", { runId, cancelId: entry.cancel_id ?? null, reason: entry.reason ?? null }));
  } else if (kind === "refused") {
    out.push(custom("refused", { runId, messageId: entry.message_id ?? null, intent: entry.intent ?? null, error: entry.error ?? null }));
  }
  if (Number.isInteger(entry.ts)) for (const event of out) event.timestamp = entry.ts;
  return out;
}

/** Every entry's events, in order. */
export function toAgUiEvents(entries: Iterable<Entry>, threadId: string): AgUiEvent[] {
  const out: AgUiEvent[] = [];
  for (const entry of entries) out.push(...entryEvents(entry, threadId));
  return out;
}

/** The AG-UI events of every entry the session's view holds, in serial order (its thread id is the session id). */
export function heldAgUiEvents(session: Session): AgUiEvent[] {
  return toAgUiEvents(session.view.tree._held(), session.sessionId);
}

/**
 * The AG-UI events of the entries the session's view holds (after `after`, a serial), then of
 * each entry as it comes, as an async iterator; it ends when the session closes or `signal`
 * aborts. The thread id is the session id.
 */
export function agUiEvents(session: Session, options: { after?: number | null; signal?: AbortSignal | null } = {}): AsyncIterableIterator<AgUiEvent> {
  const view = session.view;
  let last = options.after ?? -1;
  const signal = options.signal ?? null;
  const queue = new IteratorQueue<AgUiEvent>(() => {
    view._entryHooks.delete(take);
    view._changed.delete(onChange);
    signal?.removeEventListener("abort", end);
  });
  const take = (e: Entry) => {
    if (typeof e.serial !== "number" || e.serial <= last) return;
    last = e.serial;
    for (const event of entryEvents(e, session.sessionId)) queue.push(event);
  };
  const end = () => queue.end();
  const onChange = () => {
    if (view._closed) end();
  };
  for (const e of view.tree._held()) take(e);
  if (view._closed || signal?.aborted) end();
  else {
    view._entryHooks.add(take);
    view._changed.add(onChange);
    signal?.addEventListener("abort", end, { once: true });
  }
  return queue;
}
