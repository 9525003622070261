import type { DataPart, Entry, Part, SourceDocumentPart, SourceUrlPart, ToolCallPart, UIMessage } from "./types.js";
import { MULTITASK_STRATEGIES, RunwireError, THREAD_ACCESS, VALIDATION_ERROR, isObject } from "./errors.js";

// ---------------------------------------------------------------------------- validation ---
// What transport/frames.py accepts, checked by hand: a bad entry raises VALIDATION_ERROR.

/** @param {string} where @param {string} msg @returns {never} */
export function invalid(where: string, msg: string): never {
  throw new RunwireError(VALIDATION_ERROR, `${where}: ${msg}`, { errors: [{ loc: where.split("."), msg }] });
}

/**
 * Whether `s` has more than `max` characters as Python's `len` counts them: code points (a
 * surrogate pair is one), not UTF-16 code units, so an emoji counts one on both sides. Only a
 * string of more than `max` code units and at most twice that is counted.
 * @param {string} s @param {number} max @returns {boolean}
 */
export function longerThan(s: string, max: number): boolean {
  if (s.length <= max) return false;
  if (s.length > 2 * max) return true;
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n -= 1;
        i += 1;
      }
    }
  }
  return n > max;
}

/** @param {any} v @param {string} where @param {boolean} [nullable] */
export function checkId(v: any, where: string, nullable: boolean = false) {
  if (nullable && (v === undefined || v === null)) return null;
  if (typeof v !== "string" || v.length < 1 || longerThan(v, 200)) invalid(where, "must be a string of 1 to 200 characters");
  return v;
}

/** @param {any} v @param {string} where */
export function optString(v: any, where: string) {
  if (v === undefined || v === null) return null;
  if (typeof v !== "string") invalid(where, "must be a string");
  return v;
}

/** An object, or null when absent or null. @param {any} v @param {string} where */
export function optObject(v: any, where: string) {
  if (v === undefined || v === null) return null;
  if (!isObject(v)) invalid(where, "must be an object");
  return v;
}

/** @param {any} v @param {string} where */
export function optInt(v: any, where: string) {
  if (v === undefined || v === null) return null;
  if (!Number.isInteger(v) || v < 0) invalid(where, "must be a non-negative integer");
  return v;
}

/** @param {any} v @param {string} where @param {number} max */
export function optText(v: any, where: string, max: number) {
  const s = optString(v, where);
  if (s !== null && longerThan(s, max)) invalid(where, `must have at most ${max} characters`);
  return s;
}

/**
 * A string of at most `max` characters, `fallback` when absent (null is refused, as a `str` field
 * with a default is in Python).
 * @param {any} v @param {string} where @param {number} max @param {string} fallback @returns {string}
 */
export function textOr(v: any, where: string, max: number, fallback: string): string {
  if (v === undefined) return fallback;
  if (typeof v !== "string") invalid(where, "must be a string");
  if (longerThan(v, max)) invalid(where, `must have at most ${max} characters`);
  return v;
}

/** @param {any} v @param {readonly string[]} choices @param {string} where */
export function optChoice(v: any, choices: readonly string[], where: string) {
  if (v === undefined || v === null) return null;
  if (!choices.includes(v)) invalid(where, `must be one of ${choices.join(", ")}`);
  return v;
}

/** @param {Record<string, any>} obj @param {string[]} allowed @param {string} where */
export function checkKeys(obj: Record<string, any>, allowed: string[], where: string) {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) invalid(`${where}.${key}`, "extra inputs are not permitted");
  }
}

/** @param {any} raw @param {string} where @returns {Part} */
export function validatePart(raw: any, where: string): Part {
  if (!isObject(raw)) invalid(where, "a part is an object");
  const t = raw.type;
  if (t === "text" || t === "reasoning") {
    checkKeys(raw, ["type", "text"], where);
    if (typeof raw.text !== "string") invalid(`${where}.text`, "must be a string");
    return { type: t, text: raw.text };
  }
  if (t === "tool-call") {
    checkKeys(raw, ["type", "tool_call_id", "tool_name", "input", "input_text"], where);
    if (typeof raw.tool_call_id !== "string") invalid(`${where}.tool_call_id`, "must be a string");
    if (typeof raw.tool_name !== "string") invalid(`${where}.tool_name`, "must be a string");
    const call: ToolCallPart = { type: t, tool_call_id: raw.tool_call_id, tool_name: raw.tool_name, input: raw.input ?? null };
    const inputText = optString(raw.input_text, `${where}.input_text`);
    if (inputText !== null) call.input_text = inputText;
    return call;
  }
  if (t === "tool-result") {
    checkKeys(raw, ["type", "tool_call_id", "tool_name", "output", "is_error"], where);
    if (typeof raw.tool_call_id !== "string") invalid(`${where}.tool_call_id`, "must be a string");
    if (typeof raw.tool_name !== "string") invalid(`${where}.tool_name`, "must be a string");
    if (raw.is_error !== undefined && typeof raw.is_error !== "boolean") invalid(`${where}.is_error`, "must be a boolean");
    return {
      type: t,
      tool_call_id: raw.tool_call_id,
      tool_name: raw.tool_name,
      output: raw.output ?? null,
      is_error: raw.is_error ?? false,
    };
  }
  if (t === "source-url") {
    checkKeys(raw, ["type", "source_id", "url", "title"], where);
    const part: SourceUrlPart = { type: t, source_id: needString(raw.source_id, `${where}.source_id`), url: needString(raw.url, `${where}.url`) };
    const title = optString(raw.title, `${where}.title`);
    return title === null ? part : { ...part, title };
  }
  if (t === "source-document") {
    checkKeys(raw, ["type", "source_id", "media_type", "title", "filename"], where);
    const part: SourceDocumentPart = {
      type: t,
      source_id: needString(raw.source_id, `${where}.source_id`),
      media_type: needString(raw.media_type, `${where}.media_type`),
      title: needString(raw.title, `${where}.title`),
    };
    const filename = optString(raw.filename, `${where}.filename`);
    return filename === null ? part : { ...part, filename };
  }
  if (t === "file") {
    checkKeys(raw, ["type", "url", "media_type"], where);
    return { type: t, url: needString(raw.url, `${where}.url`), media_type: needString(raw.media_type, `${where}.media_type`) };
  }
  if (typeof t === "string" && t.startsWith("data-") && t.length > 5) {
    checkKeys(raw, ["type", "id", "data"], where);
    const id = optString(raw.id, `${where}.id`);
    const part: DataPart = { type: t as `data-${string}`, data: raw.data ?? null };
    return id === null ? part : { type: part.type, id, data: part.data };
  }
  return invalid(`${where}.type`, "unknown part type");
}

/** A string, or VALIDATION_ERROR. */
export function needString(v: any, where: string): string {
  if (typeof v !== "string") invalid(where, "must be a string");
  return v;
}

/** @param {any} raw @param {string} where @returns {UIMessage} */
export function validateMessage(raw: any, where: string): UIMessage {
  if (!isObject(raw)) invalid(where, "a message is an object");
  checkKeys(raw, ["id", "role", "parts", "metadata"], where);
  const id = (checkId(raw.id, `${where}.id`) as string);
  if (!["user", "assistant", "system"].includes(raw.role)) invalid(`${where}.role`, "must be user, assistant or system");
  const parts = raw.parts === undefined ? [] : raw.parts;
  if (!Array.isArray(parts)) invalid(`${where}.parts`, "must be a list");
  if (raw.metadata !== undefined && !isObject(raw.metadata)) invalid(`${where}.metadata`, "must be an object");
  return {
    id,
    role: raw.role,
    parts: parts.map((/** @type {any} */ p: any, /** @type {number} */ i: number) => validatePart(p, `${where}.parts.${i}`)),
    metadata: { ...(raw.metadata || {}) },
  };
}

export const COMMON = ["serial", "ts", "user_id", "client_id", "id", "run_id", "kind"];
export const KIND_FIELDS = {
  message: ["intent", "message", "parent_id", "agent", "multitask", "parent_run_id", "thread_access", "queued", "interrupts", "activate"],
  run: ["status", "error", "durable", "seen", "timeout"],
  cancel: ["reason", "interrupted_by"],
  cancel_denied: ["cancel_id", "reason"],
  response_open: ["message_id", "parent_id", "seen", "metadata"],
  response_append: ["message_id", "chunks"],
  response_close: ["message_id", "message", "metadata"],
  refused: ["message_id", "intent", "error"],
  checkpoint: ["step", "turn", "iterations", "seen", "state"],
  interrupt: ["status", "interrupts", "responses", "checkpoint", "reason"],
};
export const INTERRUPT_FIELDS = ["id", "kind", "reason", "message", "response_schema", "expires_at", "tool_call_id", "tool_name", "details", "response"];

/**
 * A wire error object (`code`, `message`, `details`). Other fields are refused, as in entries,
 * unless `unknownOk` (the error object of a relay frame, whose unknown fields a client ignores).
 * @param {any} raw @param {string} where @param {boolean} [unknownOk]
 */
export function errorBody(raw: any, where: string, unknownOk: boolean = false) {
  if (!isObject(raw) || typeof raw.code !== "string") invalid(where, "must be an error object");
  if (!unknownOk) checkKeys(raw, ["code", "message", "details"], where);
  // Absent, they default; null is refused, as ErrorBody does.
  if (raw.message !== undefined && typeof raw.message !== "string") invalid(`${where}.message`, "must be a string");
  if (raw.details !== undefined && !isObject(raw.details)) invalid(`${where}.details`, "must be an object");
  return { code: raw.code, message: raw.message ?? "", details: { ...(raw.details || {}) } };
}

/** A list of ids. @param {any} raw @param {string} where @returns {string[]} */
export function idList(raw: any, where: string): string[] {
  if (!Array.isArray(raw)) invalid(where, "must be a list");
  return raw.map((s: any, i: number) => checkId(s, `${where}.${i}`) as string);
}

/**
 * An integer of at least `min` (`fallback` when absent; required when `fallback` is null; never null).
 * @param {any} raw @param {string} where @param {number} min @param {number | null} fallback @returns {number}
 */
export function count(raw: any, where: string, min: number, fallback: number | null): number {
  if (raw === undefined && fallback !== null) return fallback;
  if (!Number.isInteger(raw) || raw < min) invalid(where, `must be an integer of at least ${min}`);
  return raw;
}

/**
 * Validate one entry as transport.codec.decode_entry does; a normalized copy with defaults filled.
 * @param {any} raw
 * @returns {Entry}
 * @throws {RunwireError} VALIDATION_ERROR
 */
export function decodeEntry(raw: any): Entry {
  if (!isObject(raw)) invalid("entry", "an entry is an object");
  const kind = raw.kind;
  if (typeof kind !== "string" || !(kind in KIND_FIELDS)) invalid("kind", "unknown or missing entry kind");
  checkKeys(raw, [...COMMON, ...KIND_FIELDS[(kind as keyof typeof KIND_FIELDS)]], kind);
  /** @type {Entry} */
  const e: Entry = {
    kind,
    serial: optInt(raw.serial, `${kind}.serial`),
    ts: raw.ts === undefined || raw.ts === null ? null : Number.isInteger(raw.ts) ? raw.ts : invalid(`${kind}.ts`, "must be an integer"),
    user_id: optString(raw.user_id, `${kind}.user_id`),
    client_id: optString(raw.client_id, `${kind}.client_id`),
    id: checkId(raw.id, `${kind}.id`),
    run_id: checkId(raw.run_id, `${kind}.run_id`),
  };
  if (kind === "message") {
    const intent = raw.intent === undefined ? "prompt" : raw.intent;
    if (!["prompt", "steer", "follow_up", "inject"].includes(intent)) invalid("message.intent", "unknown intent");
    e.intent = intent;
    e.message = validateMessage(raw.message, "message.message");
    e.parent_id = checkId(raw.parent_id, "message.parent_id", true);
    e.agent = checkId(raw.agent, "message.agent", true);
    e.multitask = optChoice(raw.multitask, MULTITASK_STRATEGIES, "message.multitask");
    e.parent_run_id = checkId(raw.parent_run_id, "message.parent_run_id", true);
    e.thread_access = optChoice(raw.thread_access, THREAD_ACCESS, "message.thread_access");
    if (raw.queued !== undefined && raw.queued !== null && typeof raw.queued !== "boolean") invalid("message.queued", "must be a boolean");
    e.queued = raw.queued ?? null;
    // A prompt on a branch that leaves the active leaf where it is (its Run counts for no strategy).
    if (raw.activate !== undefined && raw.activate !== null && typeof raw.activate !== "boolean") invalid("message.activate", "must be a boolean");
    e.activate = raw.activate ?? null;
    if (raw.interrupts === undefined || raw.interrupts === null) e.interrupts = null;
    else {
      if (!Array.isArray(raw.interrupts)) invalid("message.interrupts", "must be a list");
      e.interrupts = raw.interrupts.map((/** @type {any} */ r: any, /** @type {number} */ i: number) => checkId(r, `message.interrupts.${i}`));
    }
  } else if (kind === "run") {
    // `pending` comes only from the relay: a queued Run's turn came, or a durable Run is handed on.
    if (!["pending", "active", "suspended", "complete", "cancelled", "error"].includes(raw.status)) invalid("run.status", "unknown status");
    e.status = raw.status;
    e.error = raw.error === undefined || raw.error === null ? null : errorBody(raw.error, "run.error");
    if (raw.durable !== undefined && raw.durable !== null && typeof raw.durable !== "boolean") invalid("run.durable", "must be a boolean");
    e.durable = raw.durable ?? null;
    e.seen = raw.seen === undefined || raw.seen === null ? null : idList(raw.seen, "run.seen");
    // On `active`: the seconds the Run may stay active from this start (its deadline).
    if (raw.timeout !== undefined && raw.timeout !== null && (typeof raw.timeout !== "number" || !(raw.timeout > 0) || raw.timeout > 31536000)) invalid("run.timeout", "must be a number of seconds, more than 0 and at most a year");
    e.timeout = raw.timeout ?? null;
  } else if (kind === "refused") {
    e.message_id = checkId(raw.message_id, "refused.message_id");
    const intent = raw.intent === undefined ? "steer" : raw.intent;
    if (!["prompt", "steer", "follow_up", "inject"].includes(intent)) invalid("refused.intent", "unknown intent");
    e.intent = intent;
    e.error = errorBody(raw.error, "refused.error");
  } else if (kind === "checkpoint") {
    e.step = count(raw.step, "checkpoint.step", 0, null);
    e.turn = count(raw.turn, "checkpoint.turn", 1, 1);
    e.iterations = count(raw.iterations, "checkpoint.iterations", 0, 0);
    e.seen = raw.seen === undefined ? [] : idList(raw.seen, "checkpoint.seen");
    if (raw.state !== undefined && !isObject(raw.state)) invalid("checkpoint.state", "must be an object");
    e.state = { ...(raw.state || {}) };
  } else if (kind === "interrupt") {
    if (!["paused", "resumed", "declined"].includes(raw.status)) invalid("interrupt.status", "unknown status");
    e.status = raw.status;
    const questions = raw.interrupts === undefined ? [] : raw.interrupts;
    if (!Array.isArray(questions)) invalid("interrupt.interrupts", "must be a list");
    e.interrupts = questions.map((/** @type {any} */ q: any, /** @type {number} */ i: number) => {
      const where = `interrupt.interrupts.${i}`;
      if (!isObject(q)) invalid(where, "must be an object");
      checkKeys(q, INTERRUPT_FIELDS, where);
      if (q.kind !== undefined && !["input", "approval", "plan"].includes(q.kind)) invalid(`${where}.kind`, "unknown kind");
      return {
        id: checkId(q.id, `${where}.id`),
        kind: q.kind ?? "input",
        reason: textOr(q.reason, `${where}.reason`, 200, ""),
        message: textOr(q.message, `${where}.message`, 10000, ""),
        response_schema: optObject(q.response_schema, `${where}.response_schema`),
        expires_at:
          q.expires_at === undefined || q.expires_at === null
            ? null
            : Number.isInteger(q.expires_at)
              ? q.expires_at
              : invalid(`${where}.expires_at`, "must be an integer"),
        tool_call_id: optString(q.tool_call_id, `${where}.tool_call_id`),
        tool_name: optString(q.tool_name, `${where}.tool_name`),
        details: optObject(q.details, `${where}.details`),
        response: q.response ?? null,
      };
    });
    if (raw.responses !== undefined && raw.responses !== null && !isObject(raw.responses)) invalid("interrupt.responses", "must be an object");
    e.responses = raw.responses ?? null;
    if (raw.checkpoint !== undefined && raw.checkpoint !== null && !isObject(raw.checkpoint)) invalid("interrupt.checkpoint", "must be an object");
    e.checkpoint = raw.checkpoint ?? null;
    e.reason = optText(raw.reason, "interrupt.reason", 1000);
  } else if (kind === "cancel") {
    e.reason = optText(raw.reason, "cancel.reason", 1000);
    e.interrupted_by = checkId(raw.interrupted_by, "cancel.interrupted_by", true);
  } else if (kind === "cancel_denied") {
    e.cancel_id = checkId(raw.cancel_id, "cancel_denied.cancel_id", true);
    e.reason = optText(raw.reason, "cancel_denied.reason", 1000);
  } else {
    e.message_id = checkId(raw.message_id, `${kind}.message_id`);
    if (kind === "response_open") {
      e.parent_id = checkId(raw.parent_id, "response_open.parent_id", true);
      const seen = raw.seen === undefined ? [] : raw.seen;
      if (!Array.isArray(seen)) invalid("response_open.seen", "must be a list");
      e.seen = seen.map((/** @type {any} */ s: any, /** @type {number} */ i: number) => checkId(s, `response_open.seen.${i}`));
      if (raw.metadata !== undefined && !isObject(raw.metadata)) invalid("response_open.metadata", "must be an object");
      e.metadata = { ...(raw.metadata || {}) };
    } else if (kind === "response_append") {
      if (!Array.isArray(raw.chunks) || raw.chunks.length < 1 || !raw.chunks.every(isObject)) {
        invalid("response_append.chunks", "must be a non-empty list of objects");
      }
      e.chunks = raw.chunks;
    } else {
      // No message: the content the appends built is kept (a message too big for one frame).
      if (raw.message !== undefined && raw.message !== null) e.message = validateMessage(raw.message, "response_close.message");
      if (raw.metadata !== undefined && raw.metadata !== null) {
        if (!isObject(raw.metadata)) invalid("response_close.metadata", "must be an object");
        e.metadata = { ...raw.metadata };
      }
    }
  }
  return e;
}

/**
 * Every field of every relay frame (transport/frames.py) but `type`: `[kind, rule]`. The kind: `int`
 * (a JSON integer), `serial` (one of at least 0), `req` (an integer or a string of at most 100
 * characters), `str`, `bool`, `object`, `entries` (a list of objects: each entry is decodeEntry's
 * business), `multitask` (a strategy) or `error` (an error body). The rule: `required`, `default`
 * (absent: its default; null refused) or `optional` (absent or null: none).
 * Written as JSON: tests/transport/test_frame_vectors.py reads it and checks it is the table the
 * pydantic models make, so it cannot drift from them.
 * @type {Record<string, Record<string, [string, string]>>}
 */
