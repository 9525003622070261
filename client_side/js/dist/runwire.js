// runwire.js: the runwire client (@runwire/client) as one ES module, built from client_side/js/src
// by client_side/js/build.mjs (do not edit: change the TypeScript sources and build again).

// src/queue.ts
var IteratorQueue = class {
  constructor(stop = () => {
  }) {
    this.stop = stop;
  }
  buffer = [];
  wake = null;
  done = false;
  /** True once `end` or `return` was called. */
  get ended() {
    return this.done;
  }
  push(value) {
    if (this.done) return;
    const wake = this.wake;
    if (wake !== null) {
      this.wake = null;
      wake({ value, done: false });
    } else this.buffer.push(value);
  }
  end() {
    if (this.done) return;
    this.done = true;
    this.stop();
    const wake = this.wake;
    if (wake !== null) {
      this.wake = null;
      wake({ value: void 0, done: true });
    }
  }
  next() {
    if (this.buffer.length) return Promise.resolve({ value: this.buffer.shift(), done: false });
    if (this.done) return Promise.resolve({ value: void 0, done: true });
    return new Promise((resolve) => {
      this.wake = resolve;
    });
  }
  return() {
    this.buffer.length = 0;
    this.end();
    return Promise.resolve({ value: void 0, done: true });
  }
  [Symbol.asyncIterator]() {
    return this;
  }
};

// src/entries.ts
function invalid(where, msg) {
  throw new RunwireError(VALIDATION_ERROR, `${where}: ${msg}`, { errors: [{ loc: where.split("."), msg }] });
}
function longerThan(s, max) {
  if (s.length <= max) return false;
  if (s.length > 2 * max) return true;
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 55296 && c <= 56319) {
      const d = s.charCodeAt(i + 1);
      if (d >= 56320 && d <= 57343) {
        n -= 1;
        i += 1;
      }
    }
  }
  return n > max;
}
function checkId(v, where, nullable = false) {
  if (nullable && (v === void 0 || v === null)) return null;
  if (typeof v !== "string" || v.length < 1 || longerThan(v, 200)) invalid(where, "must be a string of 1 to 200 characters");
  return v;
}
function optString(v, where) {
  if (v === void 0 || v === null) return null;
  if (typeof v !== "string") invalid(where, "must be a string");
  return v;
}
function optObject(v, where) {
  if (v === void 0 || v === null) return null;
  if (!isObject(v)) invalid(where, "must be an object");
  return v;
}
function optInt(v, where) {
  if (v === void 0 || v === null) return null;
  if (!Number.isInteger(v) || v < 0) invalid(where, "must be a non-negative integer");
  return v;
}
function optText(v, where, max) {
  const s = optString(v, where);
  if (s !== null && longerThan(s, max)) invalid(where, `must have at most ${max} characters`);
  return s;
}
function textOr(v, where, max, fallback) {
  if (v === void 0) return fallback;
  if (typeof v !== "string") invalid(where, "must be a string");
  if (longerThan(v, max)) invalid(where, `must have at most ${max} characters`);
  return v;
}
function optChoice(v, choices, where) {
  if (v === void 0 || v === null) return null;
  if (!choices.includes(v)) invalid(where, `must be one of ${choices.join(", ")}`);
  return v;
}
function checkKeys(obj, allowed, where) {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) invalid(`${where}.${key}`, "extra inputs are not permitted");
  }
}
function validatePart(raw, where) {
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
    const call = { type: t, tool_call_id: raw.tool_call_id, tool_name: raw.tool_name, input: raw.input ?? null };
    const inputText = optString(raw.input_text, `${where}.input_text`);
    if (inputText !== null) call.input_text = inputText;
    return call;
  }
  if (t === "tool-result") {
    checkKeys(raw, ["type", "tool_call_id", "tool_name", "output", "is_error"], where);
    if (typeof raw.tool_call_id !== "string") invalid(`${where}.tool_call_id`, "must be a string");
    if (typeof raw.tool_name !== "string") invalid(`${where}.tool_name`, "must be a string");
    if (raw.is_error !== void 0 && typeof raw.is_error !== "boolean") invalid(`${where}.is_error`, "must be a boolean");
    return {
      type: t,
      tool_call_id: raw.tool_call_id,
      tool_name: raw.tool_name,
      output: raw.output ?? null,
      is_error: raw.is_error ?? false
    };
  }
  if (t === "source-url") {
    checkKeys(raw, ["type", "source_id", "url", "title"], where);
    const part = { type: t, source_id: needString(raw.source_id, `${where}.source_id`), url: needString(raw.url, `${where}.url`) };
    const title = optString(raw.title, `${where}.title`);
    return title === null ? part : { ...part, title };
  }
  if (t === "source-document") {
    checkKeys(raw, ["type", "source_id", "media_type", "title", "filename"], where);
    const part = {
      type: t,
      source_id: needString(raw.source_id, `${where}.source_id`),
      media_type: needString(raw.media_type, `${where}.media_type`),
      title: needString(raw.title, `${where}.title`)
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
    const part = { type: t, data: raw.data ?? null };
    return id === null ? part : { type: part.type, id, data: part.data };
  }
  return invalid(`${where}.type`, "unknown part type");
}
function needString(v, where) {
  if (typeof v !== "string") invalid(where, "must be a string");
  return v;
}
function validateMessage(raw, where) {
  if (!isObject(raw)) invalid(where, "a message is an object");
  checkKeys(raw, ["id", "role", "parts", "metadata"], where);
  const id = checkId(raw.id, `${where}.id`);
  if (!["user", "assistant", "system"].includes(raw.role)) invalid(`${where}.role`, "must be user, assistant or system");
  const parts = raw.parts === void 0 ? [] : raw.parts;
  if (!Array.isArray(parts)) invalid(`${where}.parts`, "must be a list");
  if (raw.metadata !== void 0 && !isObject(raw.metadata)) invalid(`${where}.metadata`, "must be an object");
  return {
    id,
    role: raw.role,
    parts: parts.map((p, i) => validatePart(p, `${where}.parts.${i}`)),
    metadata: { ...raw.metadata || {} }
  };
}
var COMMON = ["serial", "ts", "user_id", "client_id", "id", "run_id", "kind"];
var KIND_FIELDS = {
  message: ["intent", "message", "parent_id", "agent", "multitask", "parent_run_id", "thread_access", "queued", "interrupts", "activate"],
  run: ["status", "error", "durable", "seen", "timeout"],
  cancel: ["reason", "interrupted_by"],
  cancel_denied: ["cancel_id", "reason"],
  response_open: ["message_id", "parent_id", "seen", "metadata"],
  response_append: ["message_id", "chunks"],
  response_close: ["message_id", "message", "metadata"],
  refused: ["message_id", "intent", "error"],
  checkpoint: ["step", "turn", "iterations", "seen", "state"],
  interrupt: ["status", "interrupts", "responses", "checkpoint", "reason"]
};
var INTERRUPT_FIELDS = ["id", "kind", "reason", "message", "response_schema", "expires_at", "tool_call_id", "tool_name", "details", "response"];
function errorBody(raw, where, unknownOk = false) {
  if (!isObject(raw) || typeof raw.code !== "string") invalid(where, "must be an error object");
  if (!unknownOk) checkKeys(raw, ["code", "message", "details"], where);
  if (raw.message !== void 0 && typeof raw.message !== "string") invalid(`${where}.message`, "must be a string");
  if (raw.details !== void 0 && !isObject(raw.details)) invalid(`${where}.details`, "must be an object");
  return { code: raw.code, message: raw.message ?? "", details: { ...raw.details || {} } };
}
function idList(raw, where) {
  if (!Array.isArray(raw)) invalid(where, "must be a list");
  return raw.map((s, i) => checkId(s, `${where}.${i}`));
}
function count(raw, where, min, fallback) {
  if (raw === void 0 && fallback !== null) return fallback;
  if (!Number.isInteger(raw) || raw < min) invalid(where, `must be an integer of at least ${min}`);
  return raw;
}
function decodeEntry(raw) {
  if (!isObject(raw)) invalid("entry", "an entry is an object");
  const kind = raw.kind;
  if (typeof kind !== "string" || !(kind in KIND_FIELDS)) invalid("kind", "unknown or missing entry kind");
  checkKeys(raw, [...COMMON, ...KIND_FIELDS[kind]], kind);
  const e = {
    kind,
    serial: optInt(raw.serial, `${kind}.serial`),
    ts: raw.ts === void 0 || raw.ts === null ? null : Number.isInteger(raw.ts) ? raw.ts : invalid(`${kind}.ts`, "must be an integer"),
    user_id: optString(raw.user_id, `${kind}.user_id`),
    client_id: optString(raw.client_id, `${kind}.client_id`),
    id: checkId(raw.id, `${kind}.id`),
    run_id: checkId(raw.run_id, `${kind}.run_id`)
  };
  if (kind === "message") {
    const intent = raw.intent === void 0 ? "prompt" : raw.intent;
    if (!["prompt", "steer", "follow_up", "inject"].includes(intent)) invalid("message.intent", "unknown intent");
    e.intent = intent;
    e.message = validateMessage(raw.message, "message.message");
    e.parent_id = checkId(raw.parent_id, "message.parent_id", true);
    e.agent = checkId(raw.agent, "message.agent", true);
    e.multitask = optChoice(raw.multitask, MULTITASK_STRATEGIES, "message.multitask");
    e.parent_run_id = checkId(raw.parent_run_id, "message.parent_run_id", true);
    e.thread_access = optChoice(raw.thread_access, THREAD_ACCESS, "message.thread_access");
    if (raw.queued !== void 0 && raw.queued !== null && typeof raw.queued !== "boolean") invalid("message.queued", "must be a boolean");
    e.queued = raw.queued ?? null;
    if (raw.activate !== void 0 && raw.activate !== null && typeof raw.activate !== "boolean") invalid("message.activate", "must be a boolean");
    e.activate = raw.activate ?? null;
    if (raw.interrupts === void 0 || raw.interrupts === null) e.interrupts = null;
    else {
      if (!Array.isArray(raw.interrupts)) invalid("message.interrupts", "must be a list");
      e.interrupts = raw.interrupts.map((r, i) => checkId(r, `message.interrupts.${i}`));
    }
  } else if (kind === "run") {
    if (!["pending", "active", "suspended", "complete", "cancelled", "error"].includes(raw.status)) invalid("run.status", "unknown status");
    e.status = raw.status;
    e.error = raw.error === void 0 || raw.error === null ? null : errorBody(raw.error, "run.error");
    if (raw.durable !== void 0 && raw.durable !== null && typeof raw.durable !== "boolean") invalid("run.durable", "must be a boolean");
    e.durable = raw.durable ?? null;
    e.seen = raw.seen === void 0 || raw.seen === null ? null : idList(raw.seen, "run.seen");
    if (raw.timeout !== void 0 && raw.timeout !== null && (typeof raw.timeout !== "number" || !(raw.timeout > 0) || raw.timeout > 31536e3)) invalid("run.timeout", "must be a number of seconds, more than 0 and at most a year");
    e.timeout = raw.timeout ?? null;
  } else if (kind === "refused") {
    e.message_id = checkId(raw.message_id, "refused.message_id");
    const intent = raw.intent === void 0 ? "steer" : raw.intent;
    if (!["prompt", "steer", "follow_up", "inject"].includes(intent)) invalid("refused.intent", "unknown intent");
    e.intent = intent;
    e.error = errorBody(raw.error, "refused.error");
  } else if (kind === "checkpoint") {
    e.step = count(raw.step, "checkpoint.step", 0, null);
    e.turn = count(raw.turn, "checkpoint.turn", 1, 1);
    e.iterations = count(raw.iterations, "checkpoint.iterations", 0, 0);
    e.seen = raw.seen === void 0 ? [] : idList(raw.seen, "checkpoint.seen");
    if (raw.state !== void 0 && !isObject(raw.state)) invalid("checkpoint.state", "must be an object");
    e.state = { ...raw.state || {} };
  } else if (kind === "interrupt") {
    if (!["paused", "resumed", "declined"].includes(raw.status)) invalid("interrupt.status", "unknown status");
    e.status = raw.status;
    const questions = raw.interrupts === void 0 ? [] : raw.interrupts;
    if (!Array.isArray(questions)) invalid("interrupt.interrupts", "must be a list");
    e.interrupts = questions.map((q, i) => {
      const where = `interrupt.interrupts.${i}`;
      if (!isObject(q)) invalid(where, "must be an object");
      checkKeys(q, INTERRUPT_FIELDS, where);
      if (q.kind !== void 0 && !["input", "approval", "plan"].includes(q.kind)) invalid(`${where}.kind`, "unknown kind");
      return {
        id: checkId(q.id, `${where}.id`),
        kind: q.kind ?? "input",
        reason: textOr(q.reason, `${where}.reason`, 200, ""),
        message: textOr(q.message, `${where}.message`, 1e4, ""),
        response_schema: optObject(q.response_schema, `${where}.response_schema`),
        expires_at: q.expires_at === void 0 || q.expires_at === null ? null : Number.isInteger(q.expires_at) ? q.expires_at : invalid(`${where}.expires_at`, "must be an integer"),
        tool_call_id: optString(q.tool_call_id, `${where}.tool_call_id`),
        tool_name: optString(q.tool_name, `${where}.tool_name`),
        details: optObject(q.details, `${where}.details`),
        response: q.response ?? null
      };
    });
    if (raw.responses !== void 0 && raw.responses !== null && !isObject(raw.responses)) invalid("interrupt.responses", "must be an object");
    e.responses = raw.responses ?? null;
    if (raw.checkpoint !== void 0 && raw.checkpoint !== null && !isObject(raw.checkpoint)) invalid("interrupt.checkpoint", "must be an object");
    e.checkpoint = raw.checkpoint ?? null;
    e.reason = optText(raw.reason, "interrupt.reason", 1e3);
  } else if (kind === "cancel") {
    e.reason = optText(raw.reason, "cancel.reason", 1e3);
    e.interrupted_by = checkId(raw.interrupted_by, "cancel.interrupted_by", true);
  } else if (kind === "cancel_denied") {
    e.cancel_id = checkId(raw.cancel_id, "cancel_denied.cancel_id", true);
    e.reason = optText(raw.reason, "cancel_denied.reason", 1e3);
  } else {
    e.message_id = checkId(raw.message_id, `${kind}.message_id`);
    if (kind === "response_open") {
      e.parent_id = checkId(raw.parent_id, "response_open.parent_id", true);
      const seen = raw.seen === void 0 ? [] : raw.seen;
      if (!Array.isArray(seen)) invalid("response_open.seen", "must be a list");
      e.seen = seen.map((s, i) => checkId(s, `response_open.seen.${i}`));
      if (raw.metadata !== void 0 && !isObject(raw.metadata)) invalid("response_open.metadata", "must be an object");
      e.metadata = { ...raw.metadata || {} };
    } else if (kind === "response_append") {
      if (!Array.isArray(raw.chunks) || raw.chunks.length < 1 || !raw.chunks.every(isObject)) {
        invalid("response_append.chunks", "must be a non-empty list of objects");
      }
      e.chunks = raw.chunks;
    } else {
      if (raw.message !== void 0 && raw.message !== null) e.message = validateMessage(raw.message, "response_close.message");
      if (raw.metadata !== void 0 && raw.metadata !== null) {
        if (!isObject(raw.metadata)) invalid("response_close.metadata", "must be an object");
        e.metadata = { ...raw.metadata };
      }
    }
  }
  return e;
}

// src/errors.ts
var PROTOCOL_VERSION = 1;
var TERMINAL = Object.freeze(["complete", "cancelled", "error"]);
function isTerminal(status) {
  return TERMINAL.includes(status);
}
var EVENT_KINDS = Object.freeze(["message", "run", "delivery"]);
var CONNECTION_CLOSED = "CONNECTION_CLOSED";
var CLOSE_CODES = Object.freeze({
  1e3: "NORMAL",
  1001: "GOING_AWAY",
  1009: "PAYLOAD_TOO_LARGE",
  1012: "SERVICE_RESTART",
  4001: "UNAUTHORIZED",
  4002: "PROTOCOL_ERROR",
  4003: "TOKEN_EXPIRED",
  4008: "SLOW_CONSUMER"
});
var VALIDATION_ERROR = "VALIDATION_ERROR";
var PROTOCOL_ERROR = "PROTOCOL_ERROR";
var RUN_NOT_ACTIVE = "RUN_NOT_ACTIVE";
var RUN_NOT_FOUND = "RUN_NOT_FOUND";
var UNAUTHORIZED = "UNAUTHORIZED";
var CANCEL_DENIED = "CANCEL_DENIED";
var TOKEN_EXPIRED = "TOKEN_EXPIRED";
var ABORTED = "ABORTED";
var PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE";
var EPOCH_MISMATCH = "EPOCH_MISMATCH";
var RATE_LIMITED = "RATE_LIMITED";
var NOT_ATTACHED = "NOT_ATTACHED";
var STORE_UNAVAILABLE = "STORE_UNAVAILABLE";
var MULTITASK_STRATEGIES = Object.freeze(["alongside", "reject", "enqueue", "interrupt", "rollback"]);
var THREAD_ACCESS = ["own", "shared"];
var RunwireError = class _RunwireError extends Error {
  text;
  details;
  code;
  /**
   * @param {string} code
   * @param {string} [message]
   * @param {Record<string, unknown>} [details]
   */
  constructor(code, message, details) {
    super(`${code}: ${message || code}`);
    this.name = "RunwireError";
    this.code = code;
    this.details = { ...details || {} };
    this.text = message || code;
    const group = new.target === _RunwireError ? groupName(code) : void 0;
    if (group !== void 0) {
      Object.setPrototypeOf(this, GROUP_CLASSES[group].prototype);
      this.name = group;
    }
  }
  /**
   * Rebuild an error from the `error` object of a frame; tolerant of junk.
   * @param {any} data
   * @returns {RunwireError}
   */
  static fromWire(data) {
    const obj = isObject(data) ? data : {};
    const code = typeof obj.code === "string" && obj.code ? obj.code : "INTERNAL_ERROR";
    const message = typeof obj.message === "string" ? obj.message : void 0;
    return new _RunwireError(code, message, isObject(obj.details) ? obj.details : void 0);
  }
  /** @returns {{code: string, message: string, details: Record<string, unknown>}} */
  toWire() {
    return { code: this.code, message: this.text, details: this.details };
  }
};
var RetryableError = class extends RunwireError {
  constructor(code, message, details) {
    super(code, message, details);
    this.name = "RetryableError";
  }
};
var CredentialsError = class extends RunwireError {
  constructor(code, message, details) {
    super(code, message, details);
    this.name = "CredentialsError";
  }
};
var RequestError = class extends RunwireError {
  constructor(code, message, details) {
    super(code, message, details);
    this.name = "RequestError";
  }
};
var FinalError = class extends RunwireError {
  constructor(code, message, details) {
    super(code, message, details);
    this.name = "FinalError";
  }
};
var ERROR_GROUPS = Object.freeze({
  RetryableError: Object.freeze([
    "CONFLICT",
    "CONNECTION_CLOSED",
    "EPOCH_MISMATCH",
    "INTERNAL_ERROR",
    "RATE_LIMITED",
    "SLOW_CONSUMER",
    "STORE_UNAVAILABLE",
    "THREAD_BUSY"
  ]),
  CredentialsError: Object.freeze(["TOKEN_EXPIRED", "UNAUTHORIZED"]),
  RequestError: Object.freeze([
    "CHECK_FAILED",
    "DUPLICATE_RUN",
    "INTERRUPT_ANSWER_INVALID",
    "LLM_CONTENT_FILTERED",
    "NOT_ATTACHED",
    "NOT_FOUND",
    "PAYLOAD_TOO_LARGE",
    "PII_DETECTED",
    "PROMPT_INJECTION_DETECTED",
    "PROTOCOL_ERROR",
    "RUN_NOT_FOUND",
    "UNKNOWN_FRAME",
    "VALIDATION_ERROR"
  ]),
  FinalError: Object.freeze([
    "ABORTED",
    "AGENT_LOST",
    "CANCEL_DENIED",
    "INTERRUPT_EXPIRED",
    "NOT_IMPLEMENTED",
    "RUN_CANCELLED",
    "RUN_NOT_ACTIVE",
    "RUN_TIMEOUT",
    "THREAD_ACCESS_DENIED"
  ])
});
var GROUP_CLASSES = {
  RetryableError,
  CredentialsError,
  RequestError,
  FinalError
};
var groupNames = null;
function groupName(code) {
  if (groupNames === null) {
    groupNames = /* @__PURE__ */ new Map();
    for (const [name, codes] of Object.entries(ERROR_GROUPS)) {
      for (const each of codes) groupNames.set(each, name);
    }
  }
  return groupNames.get(code);
}
function errorGroup(code) {
  const name = groupName(code);
  return name === void 0 ? RunwireError : GROUP_CLASSES[name];
}
function newId() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID().replace(/-/g, "");
  let out = "";
  for (let i = 0; i < 32; i++) out += Math.floor(Math.random() * 16).toString(16);
  return out;
}
function userMessage(textOrParts, options = {}) {
  const parts = typeof textOrParts === "string" ? [{ type: "text", text: textOrParts }] : [...textOrParts];
  return validateMessage(
    { id: options.id || newId(), role: "user", parts, metadata: { ...options.metadata || {} } },
    "message"
  );
}
function messageText(message) {
  return message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
}
function endReason(status) {
  return status === "complete" || status === "cancelled" || status === "error" ? status : null;
}
function backoff(first, most, attempt) {
  const cap = Math.min(most, first * 2 ** Math.min(attempt, 16));
  return cap / 2 + Math.random() * (cap / 2);
}
function utf8Length(text, limit) {
  if (text.length * 3 <= limit) return text.length;
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 128) n += c < 2048 || c >= 55296 && c <= 57343 ? 1 : 2;
  }
  return n;
}
function isObject(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  }
  const ak = Object.keys(a);
  const bk = Object.keys(b);
  if (ak.length !== bk.length) return false;
  return ak.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k]));
}

// src/chunks.ts
var REPLY_KINDS = /* @__PURE__ */ new Set(["response_open", "response_append", "response_close"]);
function entryChunks(e) {
  if (!REPLY_KINDS.has(e.kind)) return [];
  const base = { runId: e.run_id, messageId: e.message_id, serial: e.serial };
  if (e.kind === "response_open") {
    const chunk = { type: "start", messageId: e.message_id };
    if (e.metadata && Object.keys(e.metadata).length) chunk.messageMetadata = e.metadata;
    return [{ ...base, index: -1, chunk }];
  }
  if (e.kind === "response_close") {
    const chunk = { type: "finish" };
    if (e.metadata && Object.keys(e.metadata).length) chunk.messageMetadata = e.metadata;
    return [{ ...base, index: -1, chunk }];
  }
  return e.chunks.map((chunk, index) => ({ ...base, index, chunk: { ...chunk } }));
}
function replyChunks(view, runId, options = {}) {
  let last = options.after ?? -1;
  const signal = options.signal ?? null;
  const queue = new IteratorQueue(() => {
    view._entryHooks.delete(onEntry);
    view._changed.delete(onChange);
    signal?.removeEventListener("abort", onAbort);
  });
  const runOver = () => {
    if (runId === null) return false;
    const info = view.run(runId);
    return info !== null && isTerminal(info.status);
  };
  const take = (e) => {
    if (queue.ended || typeof e.serial !== "number" || e.serial <= last) return;
    if (runId !== null && e.run_id !== runId) return;
    last = e.serial;
    for (const chunk of entryChunks(e)) queue.push(chunk);
  };
  const onEntry = (e) => {
    take(e);
    if (runOver()) queue.end();
  };
  const onChange = () => {
    if (view._closed || runOver()) queue.end();
  };
  const onAbort = () => queue.end();
  for (const e of view.tree._held()) take(e);
  if (view._closed || runOver() || signal?.aborted) queue.end();
  else {
    view._entryHooks.add(onEntry);
    view._changed.add(onChange);
    signal?.addEventListener("abort", onAbort, { once: true });
  }
  return queue;
}

// src/outcomes.ts
var OutcomeBook = class {
  /** @internal */
  _resolved;
  /** @internal */
  _ended;
  /** @internal */
  _seen;
  /** @internal */
  _pending;
  /** @internal */
  _runOf;
  constructor() {
    this._runOf = /* @__PURE__ */ new Map();
    this._pending = /* @__PURE__ */ new Map();
    this._seen = /* @__PURE__ */ new Map();
    this._ended = /* @__PURE__ */ new Map();
    this._resolved = /* @__PURE__ */ new Map();
  }
  /**
   * Start tracking a message aimed at `runId`; returns it if it resolved at once.
   * @param {string} messageId @param {string} runId @returns {OutcomeRecord[]}
   */
  track(messageId, runId) {
    if (this._runOf.has(messageId)) return [];
    this._runOf.set(messageId, runId);
    const reason = this._ended.get(runId);
    if (reason !== void 0) return [this._resolve(messageId, runId, reason)];
    if (!this._pending.has(runId)) this._pending.set(runId, /* @__PURE__ */ new Set());
    this._pending.get(runId).add(messageId);
    return [];
  }
  /** Record that a response of `runId` had seen `messageIds`. @param {string} runId @param {Iterable<string>} messageIds */
  saw(runId, messageIds) {
    if (!this._seen.has(runId)) this._seen.set(runId, /* @__PURE__ */ new Set());
    const seen = this._seen.get(runId);
    for (const id of messageIds) seen.add(id);
  }
  /** Apply a Run lifecycle status. @param {string} runId @param {string} status @returns {OutcomeRecord[]} */
  runStatus(runId, status) {
    if (this._ended.has(runId)) return [];
    const reason = endReason(status);
    if (reason !== null) {
      this._ended.set(runId, reason);
      const pending2 = this._pending.get(runId) || /* @__PURE__ */ new Set();
      this._pending.delete(runId);
      return [...pending2].map((mid) => this._resolve(mid, runId, reason));
    }
    if (status !== "suspended") return [];
    const pending = this._pending.get(runId) || /* @__PURE__ */ new Set();
    const seen = this._seen.get(runId) || /* @__PURE__ */ new Set();
    const done = [...pending].filter((mid) => seen.has(mid));
    for (const mid of done) pending.delete(mid);
    return done.map((mid) => this._resolve(mid, runId, null));
  }
  /**
   * An input check refused `messageId` (a `refused` entry): it resolves at once, not consumed,
   * `refused` set to the error, whether or not it was tracked; [] if it had resolved.
   * @param {string} messageId @param {string} runId @param {Record<string, unknown>} error @returns {OutcomeRecord[]}
   */
  refuse(messageId, runId, error) {
    if (this._resolved.has(messageId)) return [];
    if (!this._runOf.has(messageId)) this._runOf.set(messageId, runId);
    this._pending.get(runId)?.delete(messageId);
    const record = Object.freeze({ messageId, runId, consumed: false, runTerminalReason: null, refused: { ...error } });
    this._resolved.set(messageId, record);
    return [record];
  }
  /** True once an input check refused the message. @param {string} messageId */
  refused(messageId) {
    const record = this._resolved.get(messageId);
    return record !== void 0 && record.refused !== null;
  }
  /** The resolved outcome of a message; null while pending or unknown. @param {string} messageId */
  outcome(messageId) {
    return this._resolved.get(messageId) ?? null;
  }
  /** Ids of the Run's messages not resolved yet, in tracking order. @param {string} runId */
  pending(runId) {
    return [...this._pending.get(runId) || []];
  }
  /** True once a response of the message's Run has seen it. @param {string} messageId */
  consumed(messageId) {
    const runId = this._runOf.get(messageId);
    return runId !== void 0 && (this._seen.get(runId)?.has(messageId) ?? false);
  }
  /** Every resolved outcome, in the order they resolved. */
  resolved() {
    return [...this._resolved.values()];
  }
  /** @param {string} messageId @param {string} runId @param {RunEndReason | null} reason @internal */
  _resolve(messageId, runId, reason) {
    const record = Object.freeze({
      messageId,
      runId,
      consumed: this._seen.get(runId)?.has(messageId) ?? false,
      runTerminalReason: reason,
      refused: null
    });
    this._resolved.set(messageId, record);
    return record;
  }
};
function endedBeforeStored(messageId, runId, code, details) {
  if (code !== RUN_NOT_ACTIVE || details.run_id !== runId) return null;
  const reason = typeof details.status === "string" ? endReason(details.status) : null;
  if (reason === null) return null;
  return Object.freeze({ messageId, runId, consumed: false, runTerminalReason: reason, refused: null });
}

// src/runs.ts
var Deferred = class {
  promise;
  error;
  value;
  settled;
  reject;
  resolve;
  constructor() {
    this.resolve = () => {
    };
    this.reject = () => {
    };
    this.settled = false;
    this.value = void 0;
    this.error = void 0;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = (v) => {
        if (this.settled) return;
        this.settled = true;
        this.value = v;
        resolve(v);
      };
      this.reject = (e) => {
        if (this.settled) return;
        this.settled = true;
        this.error = e;
        reject(e);
      };
    });
    this.promise.catch(() => {
    });
  }
};
var Delivery = class {
  outcome;
  published;
  /** @internal */
  _outcome;
  /** @internal */
  _published;
  intent;
  runId;
  message;
  /** @param {UIMessage} message @param {string} runId @param {QueuedIntent} [intent] */
  constructor(message, runId, intent = "steer") {
    this.message = message;
    this.runId = runId;
    this.intent = intent;
    this._published = new Deferred();
    this._outcome = new Deferred();
    this.published = this._published.promise;
    this.outcome = this._outcome.promise;
  }
  /** @param {RunwireError} error @internal */
  _fail(error) {
    this._published.reject(error);
    this._outcome.reject(error);
  }
};
var ClientRun = class {
  /** @internal */
  _resets;
  /** @internal */
  _deliveries;
  prompt;
  runId;
  /** @internal */
  _session;
  /** @param {Session} session @param {string} runId @param {UIMessage | null} prompt */
  constructor(session, runId, prompt) {
    this._session = session;
    this.runId = runId;
    this.prompt = prompt;
    this._deliveries = [];
    this._resets = session._resets;
  }
  /**
   * The Run's status in the view: "queued" while it waits its turn, "pending" until the agent
   * starts it, and so on. @returns {RunStatus}
   */
  get status() {
    this._checkReadable("ClientRun.status");
    return this._session.view.run(this.runId)?.status ?? "pending";
  }
  /**
   * The raw UI message stream chunks of this Run's replies, in order: those the view holds
   * (after `options.after`, a serial), then live ones; ends once the Run ended, the session
   * closed or `options.signal` aborted. A reconnect neither skips nor repeats a chunk.
   * Throws NOT_ATTACHED on a write-only session.
   */
  chunks(options = {}) {
    this._checkReadable("ClientRun.chunks()");
    return replyChunks(this._session.view, this.runId, options);
  }
  /** @param {string} what @internal */
  _checkReadable(what) {
    if (!this._session.subscribe) throw writeOnlyError(this._session.sessionId, what);
  }
  /**
   * Messages sent through this handle that wait: not taken in, not refused, the Run not ended (one
   * still being published waits too). A Run that ends "error" leaves its untaken messages here.
   * @returns {UIMessage[]}
   */
  get queued() {
    this._checkReadable("ClientRun.queued");
    return this._untaken().filter((d) => !d._outcome.settled || d._outcome.value?.runTerminalReason === "error").map((d) => d.message);
  }
  /** Queued messages of this Run an input check refused, oldest first, with the error. @returns {Refused[]} */
  get refused() {
    this._checkReadable("ClientRun.refused");
    return this._session.view.tree.refusals(this.runId).map((r) => this._session._refused(r));
  }
  /**
   * Steer this Run: the message joins its current turn at the next model call. Returns
   * `{published, outcome}` at once; when the view shows the Run ended, both reject with
   * RUN_NOT_ACTIVE at once and nothing is published.
   * @param {string | UIMessage} message @returns {Delivery}
   */
  steer(message) {
    return this._queue("steer", message);
  }
  /**
   * Queue a follow-up: once the current answer is finished it starts a new turn of the Run (with
   * the iteration budget afresh). Returns at once, like `steer`.
   * @param {string | UIMessage} message @returns {Delivery}
   */
  followUp(message) {
    return this._queue("follow_up", message);
  }
  /**
   * Inject context: it joins the conversation at the next model call without causing one (saved
   * at the Run's end if no call was left). Returns at once, like `steer`.
   * @param {string | UIMessage} message @returns {Delivery}
   */
  inject(message) {
    return this._queue("inject", message);
  }
  /**
   * Publish a queued message (`metadata.queued` set to its kind) in the background.
   * @param {QueuedIntent} intent @param {string | UIMessage} message @returns {Delivery}
   * @internal
   */
  _queue(intent, message) {
    const session = this._session;
    let msg = asMessage(message);
    if (msg.metadata.queued !== intent) msg = { ...msg, metadata: { ...msg.metadata, queued: intent } };
    const delivery = new Delivery(msg, this.runId, intent);
    this._deliveries.push(delivery);
    const info = session.subscribe ? session.view.run(this.runId) : null;
    if (info !== null && isTerminal(info.status)) {
      delivery._fail(
        new RunwireError(RUN_NOT_ACTIVE, `run ${JSON.stringify(this.runId)} already ended (${info.status})`, {
          run_id: this.runId,
          status: info.status
        })
      );
      return delivery;
    }
    session._startDelivery(delivery, { kind: "message", id: msg.id, run_id: this.runId, intent, message: msg });
    return delivery;
  }
  /** Deliveries that went out (or are going out), were not refused and not taken in. @returns {Delivery[]} @internal */
  _untaken() {
    const book = this._session.view.tree.outcomes;
    return this._deliveries.filter((d) => {
      const outcome = d._outcome;
      if (outcome.settled && (outcome.error !== void 0 || outcome.value?.refused)) return false;
      return !book.consumed(d.message.id) && !book.refused(d.message.id);
    });
  }
  /**
   * Wait until the Run ends or suspends. `undelivered` lists the messages sent through this
   * handle that the Run did not take (none when it ended "error": they stay in `queued`); at a
   * suspend they are listed and stay queued, outcomes pending, for the resumed Run. Rejects with
   * RunwireError(CONNECTION_CLOSED) if the session closes first, EPOCH_MISMATCH (`details.run_id`)
   * if a reset (the relay lost the session's history) rebuilt the view without the Run.
   * @returns {Promise<RunResult>}
   */
  async result() {
    this._checkReadable("ClientRun.result()");
    const info = await this._session.view._until(() => {
      const i = this._session.view.run(this.runId);
      if (i === null) this._session._checkLost(this.runId, this._resets);
      return i !== null && (isTerminal(i.status) || i.status === "suspended") ? i : null;
    });
    const undelivered = info.status === "error" ? [] : this._untaken().filter((d) => d._outcome.settled || info.status === "suspended").map((d) => d.message);
    const ended = isTerminal(info.status) && info.error ? RunwireError.fromWire(info.error) : null;
    return {
      status: info.status,
      endReason: info.endReason,
      undelivered,
      interrupts: this._session.view.tree.interrupts(this.runId),
      error: ended,
      reason: ended && info.status === "cancelled" ? ended.text : null
    };
  }
  /**
   * Cancel this Run; resolves to the messages sent through this handle that it never took in
   * (and that no check refused). With `wait` (the default) it waits until the Run ends or
   * `timeout` ms pass, and rejects with RunwireError(CANCEL_DENIED) if the agent refuses the
   * cancel (the Run keeps running), EPOCH_MISMATCH if a reset loses the Run meanwhile. RUN_NOT_FOUND or UNAUTHORIZED reject too; a Run that already
   * ended is left as it is.
   * @param {{reason?: string, wait?: boolean, timeout?: number | null}} [options]
   * @returns {Promise<UIMessage[]>}
   */
  async cancel(options = {}) {
    const { reason, wait = true, timeout = 3e4 } = options;
    await this._session.cancel(this.runId, { reason, wait, timeout });
    if (!this._session.subscribe) return [];
    return this._untaken().map((d) => d.message);
  }
};
function asMessage(message) {
  if (typeof message === "string") return userMessage(message);
  if (isObject(message)) return validateMessage(message, "message");
  throw new RunwireError(VALIDATION_ERROR, `a message is a string or a UIMessage, not ${typeof message}`);
}
function denied(denial) {
  return new RunwireError(CANCEL_DENIED, denial.reason || "the agent refused the cancel", {
    run_id: denial.runId,
    cancel_id: denial.cancelId,
    client_id: denial.clientId,
    user_id: denial.userId
  });
}
function writeOnlyError(sessionId, what) {
  return new RunwireError(
    NOT_ATTACHED,
    `${what} reads session ${JSON.stringify(sessionId)}, which was connected with subscribe: false (write-only: it publishes without attaching and never sees the session's entries)`,
    { session_id: sessionId, subscribe: false }
  );
}
function reused(messageId, serial) {
  const details = { message_id: messageId };
  if (serial !== void 0) details.serial = serial;
  return new RunwireError(
    VALIDATION_ERROR,
    `message id ${JSON.stringify(messageId)} is already used in this session; send a new message`,
    details
  );
}

// src/fold.ts
var freezeView = (view) => Object.freeze(view);
function closedMessage(current, e) {
  let message = e.message ?? current;
  if (message.id !== e.message_id) message = { ...message, id: e.message_id };
  if (e.metadata !== void 0) message = { ...message, metadata: { ...e.metadata } };
  return message;
}
function replacingCloses(entries) {
  const first = /* @__PURE__ */ new Map();
  for (const e of entries) if (e.kind === "response_close" && !first.has(e.message_id)) first.set(e.message_id, e);
  const out = /* @__PURE__ */ new Map();
  for (const [mid, e] of first) if (e.message !== void 0) out.set(mid, e.serial);
  return out;
}
var heldView = (e) => freezeView({ message: e.message, runId: e.run_id, serial: e.serial, parentId: e.parent_id, intent: e.intent, refused: false });
function markedQueued(e) {
  if (e.intent === "prompt" || "queued" in e.message.metadata) return e;
  return { ...e, message: { ...e.message, metadata: { ...e.message.metadata, queued: e.intent } } };
}
var freezeRun = (info) => Object.freeze(info);
var Fold = class {
  refusedNow;
  added;
  refusals;
  denials;
  held;
  book;
  runs;
  latest;
  spinePos;
  spine;
  roots;
  nodes;
  selections;
  /** @param {Map<string | null, string> | null} selections */
  constructor(selections) {
    this.selections = selections;
    this.nodes = /* @__PURE__ */ new Map();
    this.roots = [];
    this.spine = [];
    this.spinePos = /* @__PURE__ */ new Map();
    this.latest = /* @__PURE__ */ new Map();
    this.runs = /* @__PURE__ */ new Map();
    this.book = new OutcomeBook();
    this.held = /* @__PURE__ */ new Map();
    this.denials = /* @__PURE__ */ new Map();
    this.refusals = /* @__PURE__ */ new Map();
    this.added = [];
    this.refusedNow = [];
  }
  /** Fold one entry (the newest so far); the events it caused. @param {Entry} e @returns {TreeEvent[]} */
  apply(e) {
    if (e.kind === "message") e = markedQueued(e);
    const events = [];
    const [run, created] = this._run(e);
    if (e.kind === "run") {
      if (e.seen) {
        for (const id of e.seen) run.seen.add(id);
        this.book.saw(e.run_id, e.seen);
      }
      const old = run.info;
      if (!isTerminal(old.status)) {
        run.info = freezeRun({ ...old, status: e.status, endReason: endReason(e.status), error: e.error });
      }
      if (created || !deepEqual(run.info, old)) events.push({ kind: "run", run: run.info, op: "changed" });
      const held = run.held;
      if (held !== null && run.info.status !== "queued") {
        run.held = null;
        const inputs = run.heldInputs;
        run.heldInputs = [];
        if (!isTerminal(run.info.status) && !this.nodes.has(held.message.id)) {
          [held, ...inputs].forEach((waiting, i) => {
            const node = i ? this._add(waiting.message, waiting.run_id, waiting.serial ?? 0, waiting.parent_id, waiting.intent, false) : this._place(waiting);
            this.held.delete(waiting.message.id);
            if (this.refusals.has(waiting.message.id)) node.view = freezeView({ ...node.view, refused: true });
            events.push({ kind: "message", message: node.view, op: "added" });
          });
        }
      }
      for (const r of this.book.runStatus(e.run_id, e.status)) events.push({ kind: "delivery", outcome: r });
      return events;
    }
    if (created) events.push({ kind: "run", run: run.info, op: "changed" });
    if (e.kind === "message") {
      const mid = e.message.id;
      if (this.nodes.has(mid) || this.held.has(mid) || this.refusals.has(mid)) return events;
      let node;
      if (e.intent === "prompt") {
        run.promptId = mid;
        if (e.queued && run.info.status === "queued") {
          run.held = e;
          this.held.set(mid, heldView(e));
          return events;
        }
        node = this._place(e);
      } else if (run.held !== null) {
        run.heldInputs.push(e);
        this.held.set(mid, heldView(e));
        run.inputs.push(mid);
        for (const r of this.book.track(mid, e.run_id)) events.push({ kind: "delivery", outcome: r });
        return events;
      } else {
        node = this._add(e.message, e.run_id, e.serial, e.parent_id, e.intent, false);
      }
      events.push({ kind: "message", message: node.view, op: "added" });
      if (e.intent !== "prompt") {
        run.inputs.push(mid);
        for (const r of this.book.track(mid, e.run_id)) events.push({ kind: "delivery", outcome: r });
      }
    } else if (e.kind === "cancel") {
      run.cancels.add(e.id);
      run.cancelRequested = true;
    } else if (e.kind === "cancel_denied") {
      if (e.cancel_id == null) run.cancels.clear();
      else run.cancels.delete(e.cancel_id);
      run.cancelRequested = run.cancels.size > 0;
      const denial = Object.freeze({
        runId: e.run_id,
        cancelId: e.cancel_id,
        serial: e.serial,
        reason: e.reason,
        clientId: e.client_id,
        userId: e.user_id
      });
      run.denials.push(denial);
      if (e.cancel_id !== null && !this.denials.has(e.cancel_id)) this.denials.set(e.cancel_id, denial);
    } else if (e.kind === "refused") {
      events.push(...this._refuse(e));
    } else if (e.kind === "checkpoint") {
      if (run.checkpoint === null || e.step >= run.checkpoint.step) run.checkpoint = e;
    } else if (e.kind === "interrupt") {
      if (e.status === "paused") {
        run.questions = e.interrupts;
        run.declined = false;
      } else if (e.status === "declined") run.declined = true;
      else for (const q of e.interrupts) run.answers.set(q.id, q.response);
    } else if (e.kind === "response_open") {
      for (const id of e.seen) run.seen.add(id);
      this.book.saw(e.run_id, e.seen);
      const existing = this.nodes.get(e.message_id);
      if (existing === void 0) {
        if (!this.held.has(e.message_id)) {
          const message = { id: e.message_id, role: "assistant", parts: [], metadata: { ...e.metadata } };
          const node = this._add(message, e.run_id, e.serial, e.parent_id, null, true);
          run.responses.set(e.message_id, [...e.seen]);
          events.push({ kind: "message", message: node.view, op: "added" });
        }
      } else if (existing.response && !existing.closed && existing.view.runId === e.run_id) {
        run.responses.set(e.message_id, [...e.seen]);
        existing.partIds.clear();
        const message = { ...existing.view.message, parts: [], metadata: { ...e.metadata } };
        if (!deepEqual(message, existing.view.message)) {
          existing.view = freezeView({ ...existing.view, message });
          events.push({ kind: "message", message: existing.view, op: "updated" });
        }
      }
    } else {
      const target = this.nodes.get(e.message_id);
      if (target !== void 0 && target.response && !target.closed) {
        let message;
        if (e.kind === "response_append") {
          message = foldChunks(target, e.chunks);
        } else {
          target.closed = true;
          message = closedMessage(target.view.message, e);
        }
        if (!deepEqual(message, target.view.message)) {
          target.view = freezeView({ ...target.view, message });
          events.push({ kind: "message", message: target.view, op: "updated" });
        }
      }
    }
    return events;
  }
  /** @param {Entry} e @returns {TreeEvent[]} @internal */
  _refuse(e) {
    if (this.refusals.has(e.message_id)) return [];
    this.refusals.set(
      e.message_id,
      Object.freeze({
        messageId: e.message_id,
        runId: e.run_id,
        intent: e.intent,
        error: e.error,
        serial: e.serial,
        clientId: e.client_id
      })
    );
    const events = [];
    const node = this.nodes.get(e.message_id);
    if (node !== void 0 && !node.response && !node.view.refused) {
      node.view = freezeView({ ...node.view, refused: true });
      if (this.selections !== null) this.refusedNow.push(e.message_id);
      events.push({ kind: "message", message: node.view, op: "updated" });
    }
    const held = this.held.get(e.message_id);
    if (held !== void 0 && held.intent !== "prompt") this.held.set(e.message_id, freezeView({ ...held, refused: true }));
    for (const r of this.book.refuse(e.message_id, e.run_id, e.error)) events.push({ kind: "delivery", outcome: r });
    return events;
  }
  /** @param {Entry} e @returns {[TreeRun, boolean]} @internal */
  _run(e) {
    const existing = this.runs.get(e.run_id);
    if (existing !== void 0) return [existing, false];
    let info = { runId: e.run_id, status: "pending", clientId: null, userId: null, endReason: null, error: null, agent: null };
    if (e.kind === "message" && e.intent === "prompt") {
      info = { ...info, status: e.queued ? "queued" : "pending", clientId: e.client_id, userId: e.user_id, agent: e.agent || "default" };
    }
    const run = {
      info: freezeRun(info),
      cancelRequested: false,
      cancels: /* @__PURE__ */ new Set(),
      inputs: [],
      seen: /* @__PURE__ */ new Set(),
      promptId: null,
      held: null,
      heldInputs: [],
      denials: [],
      responses: /* @__PURE__ */ new Map(),
      checkpoint: null,
      questions: [],
      answers: /* @__PURE__ */ new Map(),
      declined: false
    };
    this.runs.set(e.run_id, run);
    return [run, true];
  }
  /**
   * Add a prompt: under its parent, beside the turn it rolls back, or at the tip.
   * @param {Entry} e @returns {TreeNode}
   * @internal
   */
  _place(e) {
    if ((e.parent_id === null || !this.nodes.has(e.parent_id)) && e.multitask === "rollback" && e.interrupts && e.interrupts.length) {
      const prompts = [];
      for (const r of e.interrupts) {
        const pid = this.runs.get(r)?.promptId;
        const node = pid === null || pid === void 0 ? void 0 : this.nodes.get(pid);
        if (node !== void 0) prompts.push(node);
      }
      if (prompts.length) {
        const earliest = prompts.reduce((a, b) => b.view.serial < a.view.serial ? b : a);
        return this._add(e.message, e.run_id, e.serial, earliest.view.parentId, e.intent, false, true);
      }
    }
    return this._add(e.message, e.run_id, e.serial, e.parent_id, e.intent, false);
  }
  /**
   * @param {UIMessage} message @param {string} runId @param {number} serial
   * @param {string | null} parentId @param {Intent | null} intent @param {boolean} response
   * @param {boolean} [exact] take `parentId` as it is (null: a new root)
   * @returns {TreeNode}
   * @internal
   */
  _add(message, runId, serial, parentId, intent, response, exact = false) {
    if (!exact && (parentId === null || !this.nodes.has(parentId))) {
      const anchor = intent !== "prompt" ? this.latest.get(runId) : void 0;
      if (anchor !== void 0 && !this.spinePos.has(anchor)) {
        parentId = this.tipBelow(anchor);
      } else {
        parentId = this.spine.length ? this.spine[this.spine.length - 1] : null;
      }
    }
    const node = {
      view: freezeView({ message, runId, serial, parentId, intent, refused: false }),
      response,
      children: [],
      closed: false,
      partIds: /* @__PURE__ */ new Map()
    };
    this.nodes.set(message.id, node);
    this.latest.set(runId, message.id);
    if (parentId === null) {
      this.roots.push(message.id);
      this.spinePos.clear();
      this.spine.length = 0;
    } else {
      this.nodes.get(parentId).children.push(message.id);
      const pos = this.spinePos.get(parentId);
      if (pos !== void 0) {
        for (const dropped of this.spine.slice(pos + 1)) this.spinePos.delete(dropped);
        this.spine.length = pos + 1;
      }
    }
    if (parentId === null || this.spinePos.has(parentId)) {
      this.spinePos.set(message.id, this.spine.length);
      this.spine.push(message.id);
    }
    if (this.selections !== null) {
      this.selections.delete(parentId);
      this.added.push([parentId, message.id]);
    }
    return node;
  }
  /** From `mid`, at each node the newest child, down to a tip (entries only). @param {string} mid @returns {string} */
  tipBelow(mid) {
    let children = this.nodes.get(mid).children;
    while (children.length) {
      mid = children[children.length - 1];
      children = this.nodes.get(mid).children;
    }
    return mid;
  }
  /** @returns {string[]} */
  path() {
    if (!this.selections || this.selections.size === 0) return [...this.spine];
    const out = [];
    let key = null;
    let children = this.roots;
    while (children.length) {
      const pick = this.selections.get(key) || children[children.length - 1];
      out.push(pick);
      key = pick;
      children = this.nodes.get(pick).children;
    }
    return out;
  }
};
function foldChunks(node, chunks) {
  const parts = [...node.view.message.parts];
  let changed = false;
  for (const chunk of chunks) {
    const kind = chunk.type;
    if (kind === "text-start" || kind === "text-delta") {
      changed = stream(parts, node.partIds, "text", kind === "text-start", chunk) || changed;
    } else if (kind === "reasoning-start" || kind === "reasoning-delta") {
      changed = stream(parts, node.partIds, "reasoning", kind === "reasoning-start", chunk) || changed;
    } else {
      changed = foldPart(parts, chunk) || changed;
    }
  }
  if (!changed) return node.view.message;
  return { ...node.view.message, parts };
}
var TOOL_DENIED = "TOOL_DENIED";
function foldPart(parts, chunk) {
  const kind = chunk.type;
  if (typeof kind !== "string") return false;
  if (kind.startsWith("tool-")) return foldTool(parts, kind, chunk);
  if (kind.startsWith("data-")) return foldData(parts, kind, chunk);
  const str = (...v) => v.every((x) => typeof x === "string");
  const opt = (v) => v === void 0 || v === null || typeof v === "string";
  if (kind === "source-url") {
    const { sourceId, url, title } = chunk;
    if (!str(sourceId, url) || !opt(title)) return false;
    parts.push(typeof title === "string" ? { type: kind, source_id: sourceId, url, title } : { type: kind, source_id: sourceId, url });
    return true;
  }
  if (kind === "source-document") {
    const { sourceId, mediaType, title, filename } = chunk;
    if (!str(sourceId, mediaType, title) || !opt(filename)) return false;
    const part = { type: kind, source_id: sourceId, media_type: mediaType, title };
    parts.push(typeof filename === "string" ? { ...part, filename } : part);
    return true;
  }
  if (kind === "file") {
    const { url, mediaType } = chunk;
    if (!str(url, mediaType)) return false;
    parts.push({ type: kind, url, media_type: mediaType });
    return true;
  }
  return false;
}
function foldTool(parts, kind, chunk) {
  const callId = chunk.toolCallId;
  if (typeof callId !== "string") return false;
  if (kind === "tool-input-start") {
    const name2 = chunk.toolName;
    if (typeof name2 !== "string" || callIndex(parts, callId) !== void 0) return false;
    parts.push({ type: "tool-call", tool_call_id: callId, tool_name: name2, input: null, input_text: "" });
    return true;
  }
  if (kind === "tool-input-delta") {
    const delta = chunk.inputTextDelta;
    const index = callIndex(parts, callId);
    if (typeof delta !== "string" || !delta || index === void 0) return false;
    const call = parts[index];
    if (call.input_text === void 0) return false;
    parts[index] = { ...call, input_text: call.input_text + delta };
    return true;
  }
  if (kind === "tool-input-available" || kind === "tool-input-error") {
    const name2 = chunk.toolName;
    const error = chunk.errorText;
    if (typeof name2 !== "string" || kind === "tool-input-error" && typeof error !== "string") return false;
    const whole = { type: "tool-call", tool_call_id: callId, tool_name: name2, input: chunk.input ?? null };
    const index = callIndex(parts, callId);
    if (index === void 0) parts.push(whole);
    else parts[index] = whole;
    if (kind === "tool-input-error") parts.push({ type: "tool-result", tool_call_id: callId, tool_name: name2, output: error, is_error: true });
    return true;
  }
  const name = toolName(parts, callId, chunk.toolName);
  if (kind === "tool-output-available") {
    if (chunk.preliminary === true) return false;
    parts.push({ type: "tool-result", tool_call_id: callId, tool_name: name, output: chunk.output ?? null, is_error: false });
    return true;
  }
  if (kind === "tool-output-error") {
    const error = chunk.errorText;
    if (typeof error !== "string") return false;
    const code = chunk.errorCode;
    const output = typeof code === "string" ? { code, message: error } : error;
    parts.push({ type: "tool-result", tool_call_id: callId, tool_name: name, output, is_error: true });
    return true;
  }
  if (kind === "tool-output-denied") {
    const output = { code: TOOL_DENIED, message: "the tool call was denied" };
    parts.push({ type: "tool-result", tool_call_id: callId, tool_name: name, output, is_error: true });
    return true;
  }
  return false;
}
function foldData(parts, kind, chunk) {
  const id = chunk.id;
  if (chunk.transient === true || kind.length === 5) return false;
  if (id !== void 0 && id !== null && typeof id !== "string") return false;
  const type = kind;
  const part = typeof id === "string" ? { type, id, data: chunk.data ?? null } : { type, data: chunk.data ?? null };
  if (typeof id === "string") {
    const at = parts.findIndex((p) => p.type === kind && p.id === id);
    if (at >= 0) {
      parts[at] = part;
      return true;
    }
  }
  parts.push(part);
  return true;
}
function callIndex(parts, callId) {
  for (let i = parts.length - 1; i >= 0; i--) {
    const part = parts[i];
    if (part.type === "tool-call" && part.tool_call_id === callId) return i;
  }
  return void 0;
}
function stream(parts, ids, family, start, chunk) {
  const cid = chunk.id;
  if (cid !== void 0 && cid !== null && typeof cid !== "string") return false;
  const delta = start ? "" : chunk.delta;
  if (typeof delta !== "string") return false;
  const key = `${family}\0${cid}`;
  let index;
  if (start) index = void 0;
  else if (cid !== void 0 && cid !== null) index = ids.get(key);
  else index = parts.length && parts[parts.length - 1].type === family ? parts.length - 1 : void 0;
  if (index === void 0) {
    parts.push({ type: family, text: delta });
    if (cid !== void 0 && cid !== null) ids.set(key, parts.length - 1);
    return true;
  }
  if (!delta) return false;
  const old = parts[index];
  parts[index] = { type: family, text: old.text + delta };
  return true;
}
function toolName(parts, callId, fallback) {
  for (let i = parts.length - 1; i >= 0; i--) {
    const part = parts[i];
    if (part.type === "tool-call" && part.tool_call_id === callId) return part.tool_name;
  }
  return typeof fallback === "string" ? fallback : "";
}

// src/tree.ts
var ConversationTree = class {
  /** @internal */
  _pathPos;
  /** @internal */
  _path;
  /** @internal */
  _pathOf;
  /** @internal */
  _state;
  /** @internal */
  _reported;
  /** @internal */
  _selected;
  /** @internal */
  _newest;
  /** @internal */
  _oldest;
  /** @internal */
  _entries;
  constructor() {
    this._entries = /* @__PURE__ */ new Map();
    this._oldest = null;
    this._newest = null;
    this._selected = /* @__PURE__ */ new Map();
    this._reported = /* @__PURE__ */ new Set();
    this._state = new Fold(this._selected);
    this._pathOf = null;
    this._path = [];
    this._pathPos = /* @__PURE__ */ new Map();
  }
  /** Fold one stamped entry; the events it caused ([] for a serial already folded). @param {any} entry */
  fold(entry) {
    return this.foldOlder([entry]);
  }
  /**
   * Fold several stamped entries, in any order (a history page); the events they caused.
   * @param {Iterable<any>} entries @returns {TreeEvent[]}
   */
  foldOlder(entries) {
    const fresh = /* @__PURE__ */ new Map();
    for (const raw of entries) {
      const entry = decodeEntry(raw);
      if (entry.serial === null) {
        throw new RunwireError(VALIDATION_ERROR, "entry has no serial: only relay-stamped entries fold");
      }
      if (!this._entries.has(entry.serial) && !fresh.has(entry.serial)) fresh.set(entry.serial, entry);
    }
    if (fresh.size === 0) return [];
    const serials = [...fresh.keys()].sort((a, b) => a - b);
    const low = serials[0];
    const high = serials[serials.length - 1];
    const incremental = this._newest === null || low > this._newest;
    for (const [s, e] of fresh) this._entries.set(s, e);
    this._oldest = this._oldest === null ? low : Math.min(this._oldest, low);
    this._newest = this._newest === null ? high : Math.max(this._newest, high);
    if (!incremental) return this._rebuild();
    const events = [];
    for (const s of serials) {
      this._syncPath();
      events.push(...this._follow(this._state.apply(fresh.get(s))));
    }
    return this._once(events);
  }
  /** @returns {TreeEvent[]} @internal */
  _rebuild() {
    const old = this._state;
    const shown = this._shown();
    const before = new Set(shown.path);
    const fresh = new Fold(null);
    const serials = [...this._entries.keys()].sort((a, b) => a - b);
    const closedAt = replacingCloses(serials.map((s) => this._entries.get(s)));
    for (const s of serials) {
      const e = this._entries.get(s);
      if (e.kind === "response_append" && (closedAt.get(e.message_id) ?? -1) > s) continue;
      fresh.apply(e);
    }
    fresh.selections = this._selected;
    this._state = fresh;
    for (const [key, child] of [...this._selected]) {
      const node = fresh.nodes.get(child);
      if (node === void 0 || node.view.parentId !== key) this._selected.delete(key);
    }
    const events = [];
    const reported = /* @__PURE__ */ new Set();
    for (const [mid, node] of fresh.nodes) {
      const was = old.nodes.get(mid);
      if (was === void 0 || !deepEqual(was.view, node.view)) {
        events.push({ kind: "message", message: node.view, op: was === void 0 ? "added" : "updated", shown: this._shows(mid) });
        reported.add(mid);
      }
    }
    events.push(...this._removed(shown.path, shown.views));
    for (const mid of this._shownIds()) {
      if (!before.has(mid) && !reported.has(mid)) {
        events.push({ kind: "message", message: fresh.nodes.get(mid).view, op: "added", shown: true });
      }
    }
    for (const [runId, run] of fresh.runs) {
      const was = old.runs.get(runId);
      if (was === void 0 || !deepEqual(was.info, run.info)) events.push({ kind: "run", run: run.info, op: "changed" });
    }
    for (const r of fresh.book.resolved()) events.push({ kind: "delivery", outcome: r });
    return this._once(events);
  }
  /**
   * What a UI that showed `before` must take away to show this tree instead. First comes a
   * "removed" MessageEvent for each message of `before.messages()` that this tree does not show,
   * in that order. Next comes one for each other message that `before` held as a node and this
   * tree does not, in the order they were added. Last comes a "removed" RunEvent for each Run of
   * `before` that this tree does not know, in order of creation. A client's view reports these
   * after a reset.
   * @param {ConversationTree} before @returns {TreeEvent[]}
   */
  removedSince(before) {
    const shown = before._shown();
    const events = this._removed(shown.path, shown.views);
    for (const info of before.runs()) {
      if (this.run(info.runId) === null) events.push({ kind: "run", run: info, op: "removed" });
    }
    return events;
  }
  /** Ids of `messages()`, and every node's view (what `_removed` compares). @internal */
  _shown() {
    const views = /* @__PURE__ */ new Map();
    for (const [mid, node] of this._state.nodes) views.set(mid, node.view);
    return { path: this.messages().map((vm) => vm.message.id), views };
  }
  /**
   * "removed" MessageEvents for what `path` / `views` showed and this tree does not.
   * @param {string[]} path @param {Map<string, ViewMessage>} views @returns {TreeEvent[]}
   * @internal
   */
  _removed(path, views) {
    const nodes = this._state.nodes;
    const onPath = new Set(path);
    const gone = path.filter((mid) => !this._shows(mid));
    for (const mid of views.keys()) if (!onPath.has(mid) && !nodes.has(mid)) gone.push(mid);
    return gone.map((mid) => ({
      kind: "message",
      message: this.message(mid) ?? views.get(mid),
      op: "removed",
      shown: false
    }));
  }
  /** Compute the active path again unless it was kept for the current state. @internal */
  _syncPath() {
    if (this._pathOf !== this._state) {
      this._path = this._state.path();
      this._pathPos = new Map(this._path.map((mid, i) => [mid, i]));
      this._pathOf = this._state;
    }
  }
  /** Ids of `messages()`. @returns {string[]} @internal */
  _shownIds() {
    this._syncPath();
    const nodes = this._state.nodes;
    return this._path.filter((mid) => !nodes.get(mid).view.refused);
  }
  /** Whether `messages()` holds the message. @param {string} messageId @internal */
  _shows(messageId) {
    this._syncPath();
    const node = this._state.nodes.get(messageId);
    return node !== void 0 && !node.view.refused && this._pathPos.has(messageId);
  }
  /**
   * One live entry's events, with how `messages()` changed; keeps the path current. A node added
   * under a node of the active path (or as a root) becomes its tip: what was below leaves.
   * Refusing a message takes it out. Each message event gets `shown`; a "removed" one follows for
   * each message that left (in the order they showed), ahead of the delivery events. (Nothing
   * already held comes onto the path here.)
   * @param {TreeEvent[]} events @returns {TreeEvent[]}
   * @internal
   */
  _follow(events) {
    const state = this._state;
    const nodes = state.nodes;
    const path = this._path;
    const pos = this._pathPos;
    const added = new Set(state.added.map(([, mid]) => mid));
    const gone = /* @__PURE__ */ new Map();
    for (const [parent, mid] of state.added) {
      let cut;
      if (parent === null) cut = 0;
      else if (pos.has(parent)) cut = pos.get(parent) + 1;
      else continue;
      for (let at2 = cut; at2 < path.length; at2++) {
        const dropped = path[at2];
        pos.delete(dropped);
        if (!added.has(dropped) && !nodes.get(dropped).view.refused) gone.set(dropped, at2);
      }
      path.length = cut;
      pos.set(mid, path.length);
      path.push(mid);
    }
    for (const mid of state.refusedNow) {
      if (pos.has(mid) && !added.has(mid) && !gone.has(mid)) gone.set(mid, pos.get(mid));
    }
    state.added.length = 0;
    state.refusedNow.length = 0;
    for (const e of events) if (e.kind === "message") e.shown = this._shows(e.message.message.id);
    if (gone.size === 0) return events;
    const moved = [...gone.entries()].sort((a, b) => a[1] - b[1]).map(([mid]) => ({ kind: "message", message: nodes.get(mid).view, op: "removed", shown: false }));
    let at = events.findIndex((e) => e.kind === "delivery");
    if (at < 0) at = events.length;
    return [...events.slice(0, at), ...moved, ...events.slice(at)];
  }
  /** @param {TreeEvent[]} events @returns {TreeEvent[]} @internal */
  _once(events) {
    return events.filter((event) => {
      if (event.kind !== "delivery") return true;
      if (this._reported.has(event.outcome.messageId)) return false;
      this._reported.add(event.outcome.messageId);
      return true;
    });
  }
  /** The lowest serial folded, null when empty. */
  get oldestSerial() {
    return this._oldest;
  }
  /** The highest serial folded, null when empty. */
  get newestSerial() {
    return this._newest;
  }
  /**
   * The active branch, root to tip; ids in `tail` on it move last, in that order. Refused
   * messages are left out.
   * @param {string[]} [tail] @returns {ViewMessage[]}
   */
  messages(tail = []) {
    const nodes = this._state.nodes;
    const path = this._state.path().filter((mid) => !nodes.get(mid).view.refused);
    const view = (mid) => nodes.get(mid).view;
    if (!tail.length) return path.map(view);
    const onPath = new Set(path);
    const last = [...new Set(tail)].filter((mid) => onPath.has(mid));
    const moved = new Set(last);
    return [...path.filter((mid) => !moved.has(mid)).map(view), ...last.map(view)];
  }
  /** Any message of the tree (on the active branch or not, or a held prompt), by id. @param {string} messageId */
  message(messageId) {
    return this._state.nodes.get(messageId)?.view ?? this._state.held.get(messageId) ?? null;
  }
  /** Prompts of queued Runs, not yet in the conversation, oldest first. @returns {ViewMessage[]} */
  waiting() {
    const held = this._state.held;
    const out = [];
    for (const run of this._state.runs.values()) {
      const view = run.held === null ? void 0 : held.get(run.held.message.id);
      if (view !== void 0) out.push(view);
    }
    return out;
  }
  /** Ids of the message's siblings, itself included, in serial order. @param {string} messageId */
  branches(messageId) {
    const node = this._state.nodes.get(messageId);
    if (node === void 0) return [];
    const parent = node.view.parentId;
    return [...parent === null ? this._state.roots : this._state.nodes.get(parent).children];
  }
  /**
   * Make the path through `messageId` active (a local choice). Returns a "removed" event for each
   * message it took off `messages()` (in the order they showed), then an "added" one for each it
   * brought on (in path order); [] for an unknown id.
   * @param {string} messageId @returns {MessageEvent[]}
   */
  selectBranch(messageId) {
    const nodes = this._state.nodes;
    if (!nodes.has(messageId)) return [];
    const before = this._shownIds();
    let current = messageId;
    for (; ; ) {
      const parent = nodes.get(current).view.parentId;
      this._selected.set(parent, current);
      if (parent === null) break;
      current = parent;
    }
    this._pathOf = null;
    const after = this._shownIds();
    const shown = new Set(after);
    const known = new Set(before);
    const events = before.filter((mid) => !shown.has(mid)).map((mid) => ({ kind: "message", message: nodes.get(mid).view, op: "removed", shown: false }));
    for (const mid of after) {
      if (!known.has(mid)) events.push({ kind: "message", message: nodes.get(mid).view, op: "added", shown: true });
    }
    return events;
  }
  /** Every Run, in order of creation. @returns {RunInfo[]} */
  runs() {
    return [...this._state.runs.values()].map((r) => r.info);
  }
  /** One Run's snapshot, null if the tree has not seen it. @param {string} runId */
  run(runId) {
    return this._state.runs.get(runId)?.info ?? null;
  }
  /** True once a cancel entry for the Run was folded (and no refusal came after it). @param {string} runId */
  cancelRequested(runId) {
    return this._state.runs.get(runId)?.cancelRequested ?? false;
  }
  /** The agent's refusal of the cancel entry `cancelId`, if it refused. @param {string} cancelId @returns {CancelDenial | null} */
  cancelDenial(cancelId) {
    return this._state.denials.get(cancelId) ?? null;
  }
  /** Every refused cancel of the Run, in serial order. @param {string} runId @returns {CancelDenial[]} */
  cancelDenials(runId) {
    return [...this._state.runs.get(runId)?.denials ?? []];
  }
  /** Steer, follow-up and inject messages aimed at the Run, in serial order (refused ones left out). @param {string} runId */
  inputs(runId) {
    const run = this._state.runs.get(runId);
    if (run === void 0) return [];
    const out = [];
    for (const mid of run.inputs) {
      const vm = this.message(mid);
      if (vm !== null && !vm.refused) out.push(vm);
    }
    return out;
  }
  /** The prompt that started the Run, if the tree holds it (held while queued). @param {string} runId */
  prompt(runId) {
    const run = this._state.runs.get(runId);
    if (run === void 0 || run.promptId === null) return null;
    return this.message(run.promptId);
  }
  /** The Run's responses in the order they opened, with their state and `seen`. @param {string} runId @returns {ResponseState[]} */
  responses(runId) {
    const run = this._state.runs.get(runId);
    if (run === void 0) return [];
    const nodes = this._state.nodes;
    return [...run.responses].map(([mid, seen]) => {
      const node = nodes.get(mid);
      return Object.freeze({ view: node.view, closed: node.closed, seen: [...seen] });
    });
  }
  /** Refused messages (of one Run, or all), in serial order. @param {string | null} [runId] @returns {Refusal[]} */
  refusals(runId = null) {
    return [...this._state.refusals.values()].filter((r) => runId === null || r.runId === runId);
  }
  /** Every entry the tree holds, in serial order (internal: the chunk streams start from them). @internal */
  _held() {
    return [...this._entries.keys()].sort((a, b) => a - b).map((s) => this._entries.get(s));
  }
  /** The latest `checkpoint` entry of a Run, if the tree holds one. @param {string} runId @returns {Entry | null} */
  checkpoint(runId) {
    return this._state.runs.get(runId)?.checkpoint ?? null;
  }
  /**
   * The questions a suspended Run waits on (none once answered, declined or moved on).
   * @param {string} runId @returns {Interrupt[]}
   */
  interrupts(runId) {
    const run = this._state.runs.get(runId);
    if (!run || run.info.status !== "suspended" || run.declined) return [];
    return run.questions.filter((q) => !run.answers.has(q.id));
  }
  /** Steer messages aimed at the Run, in serial order. @param {string} runId */
  steering(runId) {
    return this.inputs(runId).filter((vm) => vm.intent === "steer");
  }
  /** Every message id the Run's responses listed as seen. @param {string} runId @returns {Set<string>} */
  seen(runId) {
    return new Set(this._state.runs.get(runId)?.seen ?? []);
  }
  /** The outcome book (read it; the tree feeds it). */
  get outcomes() {
    return this._state.book;
  }
  /** A steering message's resolved outcome; null while pending or unknown. @param {string} messageId */
  outcome(messageId) {
    return this._state.book.outcome(messageId);
  }
  /** Ids of the Run's steering messages whose outcome is not resolved yet. @param {string} runId */
  pending(runId) {
    return this._state.book.pending(runId);
  }
};

// src/view.ts
var View = class {
  /** @internal */
  _writeOnly;
  /** @internal */
  _closed;
  /** @internal */
  _older;
  /** @internal */
  _changed;
  /** @internal */
  _hooks;
  /** Called with each entry the view folds live, once folded (internal: the chunk streams). @internal */
  _entryHooks;
  /** @internal */
  _streams;
  /** @internal */
  _callbacks;
  /** @internal */
  _hasOlder;
  /** @internal */
  _oldest;
  /** @internal */
  _newest;
  /** @internal */
  _tree;
  /** @internal */
  _fetchOlder;
  sessionId;
  /**
   * @param {string} sessionId
   * @param {(before: number, limit: number) => Promise<{entries: any[], hasOlder: boolean}>} fetchOlder
   */
  constructor(sessionId, fetchOlder) {
    this.sessionId = sessionId;
    this._fetchOlder = fetchOlder;
    this._tree = new ConversationTree();
    this._newest = null;
    this._oldest = null;
    this._hasOlder = false;
    this._callbacks = { message: /* @__PURE__ */ new Set(), run: /* @__PURE__ */ new Set(), delivery: /* @__PURE__ */ new Set() };
    this._streams = /* @__PURE__ */ new Set();
    this._hooks = [];
    this._entryHooks = /* @__PURE__ */ new Set();
    this._changed = /* @__PURE__ */ new Set();
    this._older = null;
    this._closed = false;
    this._writeOnly = false;
  }
  /** False for the view of a write-only session: it is never fed, and reading it throws NOT_ATTACHED. */
  get readable() {
    return !this._writeOnly;
  }
  /** @param {string} what @internal */
  _checkReadable(what) {
    if (this._writeOnly) throw writeOnlyError(this.sessionId, what);
  }
  /** The underlying conversation tree (read it; do not fold into it). */
  get tree() {
    this._checkReadable("view.tree");
    return this._tree;
  }
  /** The newest serial this view holds (what a resume starts after). */
  get newestSerial() {
    return this._newest;
  }
  /** The oldest serial this view holds (what `loadOlder` pages before). */
  get oldestSerial() {
    return this._oldest;
  }
  /** The active branch of the conversation, oldest first. @returns {ViewMessage[]} */
  getMessages() {
    this._checkReadable("view.getMessages()");
    return this._tree.messages();
  }
  /** Prompts of queued Runs (not yet in `getMessages()`), oldest first. @returns {ViewMessage[]} */
  waiting() {
    this._checkReadable("view.waiting()");
    return this._tree.waiting();
  }
  /** Every Run the view knows, with its status. @returns {RunInfo[]} */
  runs() {
    this._checkReadable("view.runs()");
    return this._tree.runs();
  }
  /** One Run, or null if the view has not seen it. @param {string} runId */
  run(runId) {
    this._checkReadable("view.run()");
    return this._tree.run(runId);
  }
  /** True while the session has entries older than the view holds. */
  hasOlder() {
    this._checkReadable("view.hasOlder()");
    return this._hasOlder;
  }
  /** Ids of a message's alternatives (its siblings, itself included), oldest first. @param {string} messageId */
  branches(messageId) {
    this._checkReadable("view.branches()");
    return this._tree.branches(messageId);
  }
  /**
   * Show the branch through `messageId`; reports a "removed" event for each message it takes out of
   * view, then an "added" one for each it brings into view. @param {string} messageId
   */
  selectBranch(messageId) {
    this._checkReadable("view.selectBranch()");
    this._dispatch(this._tree.selectBranch(messageId));
  }
  /**
   * Fetch the page before the oldest entry the view holds and merge it; resolves to how many
   * entries the page had (0 when there is nothing older). Calls made meanwhile wait their turn.
   * @param {number} [limit] @returns {Promise<number>}
   */
  loadOlder(limit = 50) {
    if (this._writeOnly) return Promise.reject(writeOnlyError(this.sessionId, "view.loadOlder()"));
    if (!(limit >= 1)) return Promise.reject(new RunwireError(VALIDATION_ERROR, "limit must be at least 1"));
    const previous = this._older || Promise.resolve(0);
    const next = previous.catch(() => 0).then(async () => {
      if (!this._hasOlder || this._oldest === null) return 0;
      const { entries, hasOlder } = await this._fetchOlder(this._oldest, limit);
      this._hasOlder = hasOlder;
      for (const e of entries) {
        if (isObject(e) && Number.isInteger(e.serial) && this._oldest !== null) this._oldest = Math.min(this._oldest, e.serial);
      }
      this._dispatch(this._tree.foldOlder(entries));
      return entries.length;
    });
    this._older = next;
    return next;
  }
  /**
   * Call `callback(event)` for each "message", "run" or "delivery" event; returns a function
   * that unsubscribes. Throws RunwireError(VALIDATION_ERROR) for another event name.
   * @param {"message" | "run" | "delivery"} event @param {(event: any) => void} callback
   * @returns {() => void}
   */
  on(event, callback) {
    this._checkReadable("view.on()");
    const set = this._callbacks[event];
    if (set === void 0) {
      throw new RunwireError(VALIDATION_ERROR, `unknown view event ${JSON.stringify(event)}; expected one of ${EVENT_KINDS.join(", ")}`);
    }
    const wrapped = (e) => callback(e);
    set.add(wrapped);
    return () => {
      set.delete(wrapped);
    };
  }
  /**
   * An async iterator of every event from now on; ends when the session closes.
   * @returns {AsyncIterableIterator<TreeEvent>}
   */
  events() {
    this._checkReadable("view.events()");
    const queue = new IteratorQueue(() => {
      this._streams.delete(push);
      this._changed.delete(onClose);
    });
    const push = (event) => queue.push(event);
    const onClose = () => {
      if (this._closed) queue.end();
    };
    if (this._closed) queue.end();
    else {
      this._streams.add(push);
      this._changed.add(onClose);
    }
    return queue;
  }
  /** Fold entries newer than the view holds, in order; report their events. @param {any[]} entries @internal */
  _foldLive(entries) {
    for (const entry of entries) this._dispatch(this._foldOne(entry));
    this._notify();
  }
  /** Fold one entry if it is newer than the view holds; the events it caused. @param {any} entry @returns {TreeEvent[]} @internal */
  _foldOne(entry) {
    const serial = isObject(entry) && Number.isInteger(entry.serial) ? entry.serial : null;
    if (serial !== null) {
      if (this._newest !== null && serial <= this._newest) return [];
      this._newest = serial;
      if (this._oldest === null) this._oldest = serial;
    }
    try {
      const events = this._tree.fold(entry);
      const folded = serial === null ? void 0 : this._tree._entries.get(serial);
      if (folded !== void 0) for (const hook of [...this._entryHooks]) hook(folded);
      return events;
    } catch (err) {
      console.warn(`runwire: session ${this.sessionId}: skipping an entry the view cannot read:`, err);
      return [];
    }
  }
  /** A first attach: the newest page. @param {any[]} entries @param {number} head @param {boolean} hasOlder @internal */
  _attached(entries, head, hasOlder) {
    this._hasOlder = hasOlder;
    this._foldLive(entries);
    if (this._newest === null) this._newest = head;
  }
  /** A resume: everything after the newest serial the view held. @param {any[]} entries @param {number} head @internal */
  _resumed(entries, head) {
    this._foldLive(entries);
    if (this._newest === null) this._newest = head;
  }
  /**
   * The relay lost the history the view resumed from: rebuild from the page. Once the whole page
   * folded, reports its events (as a first attach does), then what the rebuilt view no longer
   * shows: "removed" message and Run events (`ConversationTree.removedSince`).
   * @param {any[]} entries @param {number} head @param {boolean} hasOlder
   * @internal
   */
  _reset(entries, head, hasOlder) {
    const old = this._tree;
    this._tree = new ConversationTree();
    this._newest = null;
    this._oldest = null;
    this._hasOlder = hasOlder;
    const events = [];
    for (const entry of entries) events.push(...this._foldOne(entry));
    if (this._newest === null) this._newest = head;
    events.push(...this._tree.removedSince(old));
    this._dispatch(events);
    this._notify();
  }
  /** @internal */
  _close() {
    this._closed = true;
    this._notify();
  }
  /** @param {TreeEvent[]} events @internal */
  _dispatch(events) {
    if (!events.length) return;
    for (const event of events) {
      for (const hook of this._hooks) hook(event);
      for (const callback of [...this._callbacks[event.kind]]) {
        try {
          callback(event);
        } catch (err) {
          console.error(`runwire: a view ${event.kind} callback failed:`, err);
        }
      }
      for (const push of [...this._streams]) push(event);
    }
    this._notify();
  }
  /** @internal */
  _notify() {
    for (const fn of [...this._changed]) fn();
  }
  /**
   * Resolve when `predicate()` holds (checked now and after each batch of events), or reject on
   * close; with `giveUp`, stop checking and resolve null once it settles.
   * @template T @param {() => T | null | undefined | false} predicate
   * @param {Promise<unknown> | null} [giveUp] @returns {Promise<T>}
   * @internal
   */
  _until(predicate, giveUp = null) {
    return new Promise((resolve, reject) => {
      const check = () => {
        let value;
        try {
          value = predicate();
        } catch (err) {
          this._changed.delete(check);
          reject(err);
          return;
        }
        if (value) {
          this._changed.delete(check);
          resolve(value);
        } else if (this._closed) {
          this._changed.delete(check);
          reject(new RunwireError(CONNECTION_CLOSED, "the session was closed"));
        }
      };
      this._changed.add(check);
      if (giveUp !== null) {
        giveUp.then(() => {
          if (this._changed.delete(check)) resolve(null);
        });
      }
      check();
    });
  }
};

// src/frames.ts
var RELAY_FRAME_FIELDS = {
  "welcome": {
    "v": ["int", "default"],
    "req": ["req", "optional"],
    "client_id": ["str", "required"],
    "user_id": ["str", "optional"],
    "connection_id": ["str", "required"],
    "max_frame_bytes": ["int", "required"],
    "multitask": ["multitask", "optional"],
    "agent_grace": ["seconds", "optional"]
  },
  "attached": {
    "req": ["req", "required"],
    "session_id": ["str", "required"],
    "epoch": ["str", "required"],
    "head": ["serial", "required"],
    "entries": ["entries", "required"],
    "has_older": ["bool", "required"],
    "reset": ["bool", "default"]
  },
  "ack": {
    "req": ["req", "required"],
    "serial": ["serial", "optional"],
    "duplicate": ["bool", "default"]
  },
  "page": {
    "req": ["req", "required"],
    "session_id": ["str", "required"],
    "entries": ["entries", "required"],
    "has_older": ["bool", "required"]
  },
  "deliver": {
    "session_id": ["str", "required"],
    "entries": ["entries", "required"]
  },
  "dispatch": {
    "session_id": ["str", "required"],
    "run_id": ["str", "required"],
    "agent": ["str", "required"],
    "message_id": ["str", "required"],
    "adopted": ["bool", "optional"],
    "checkpoint": ["object", "optional"]
  },
  "error": {
    "req": ["req", "optional"],
    "session_id": ["str", "optional"],
    "error": ["error", "required"]
  }
};
var FRAME_CHECKS = new Map(
  Object.entries(RELAY_FRAME_FIELDS).map(([type, fields]) => [
    type,
    Object.entries(fields).map(([name, [kind, rule]]) => ({ name, kind, rule, where: `${type}.${name}` }))
  ])
);
function checkFrameField(kind, v, where) {
  switch (kind) {
    case "int":
      if (!Number.isInteger(v)) invalid(where, "must be an integer");
      return;
    case "serial":
      if (!Number.isInteger(v) || v < 0) invalid(where, "must be a non-negative integer");
      return;
    case "req":
      if (!Number.isInteger(v) && (typeof v !== "string" || longerThan(v, 100))) {
        invalid(where, "must be an integer or a string of at most 100 characters");
      }
      return;
    case "str":
      if (typeof v !== "string") invalid(where, "must be a string");
      return;
    case "bool":
      if (typeof v !== "boolean") invalid(where, "must be a boolean");
      return;
    case "object":
      if (!isObject(v)) invalid(where, "must be an object");
      return;
    case "entries":
      if (!Array.isArray(v)) invalid(where, "must be a list");
      for (let i = 0; i < v.length; i++) if (!isObject(v[i])) invalid(`${where}.${i}`, "must be an object");
      return;
    case "multitask":
      if (!MULTITASK_STRATEGIES.includes(v)) invalid(where, `must be one of ${MULTITASK_STRATEGIES.join(", ")}`);
      return;
    case "seconds":
      if (typeof v !== "number" || !Number.isFinite(v) || v < 0) invalid(where, "must be a number of seconds, not negative");
      return;
    case "error":
      errorBody(v, where, true);
      return;
    default:
      throw new Error(`runwire: RELAY_FRAME_FIELDS names an unknown kind ${kind}`);
  }
}
function checkRelayFrame(frame) {
  if (!isObject(frame)) throw new RunwireError(PROTOCOL_ERROR, "frame must be a JSON object");
  const checks = FRAME_CHECKS.get(frame.type);
  if (checks === void 0) return;
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i];
    const v = frame[c.name];
    if (v === void 0) {
      if (c.rule === "required") invalid(c.where, "field required");
    } else if (v !== null || c.rule !== "optional") checkFrameField(c.kind, v, c.where);
  }
}

// src/connection.ts
var OPEN = 1;
function _start() {
  if (typeof globalThis.addEventListener === "function") {
    globalThis.addEventListener("online", this._onOnline);
    globalThis.addEventListener("offline", this._onOffline);
  }
  this._open();
  return this._first.promise;
}
function _shutdown(error) {
  const wasReady = this._ready;
  this._closed = true;
  this._ready = false;
  if (this._retryTimer !== null) clearTimeout(this._retryTimer);
  this._retryTimer = null;
  if (typeof globalThis.removeEventListener === "function") {
    globalThis.removeEventListener("online", this._onOnline);
    globalThis.removeEventListener("offline", this._onOffline);
  }
  for (const p of [...this._pending.values()]) p.reject(error);
  this._pending.clear();
  this._wakeLane();
  for (const list of this._deliveries.values()) for (const d of list) d._fail(error);
  this._deliveries.clear();
  this._first.reject(error);
  this.view._close();
  if (wasReady || this._first.settled) this._emit("closed");
}
function _emit(state) {
  for (const fn of [...this._stateCallbacks]) {
    try {
      fn(state);
    } catch (err) {
      console.error("runwire: a state callback failed:", err);
    }
  }
}
function _open() {
  if (this._closed) return;
  const fresh = this._tokenProvider !== null && (this._tries > 0 || this._token === null);
  this._tries += 1;
  if (!fresh) {
    this._openSocket();
    return;
  }
  this._freshToken().then(
    () => this._openSocket(),
    (error) => {
      if (!this._closed) this._fatalError(error);
    }
  );
}
async function _freshToken() {
  const provider = this._tokenProvider;
  let token;
  try {
    token = await provider();
  } catch (err) {
    throw new RunwireError(UNAUTHORIZED, `the token provider failed: ${err}`);
  }
  if (typeof token !== "string" || !token) throw new RunwireError(UNAUTHORIZED, "the token provider returned no token");
  this._token = token;
}
function _openSocket() {
  if (this._closed) return;
  let url = this.url;
  if (this._token) url += (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(this._token);
  let ws;
  try {
    ws = new this._WebSocket(url);
  } catch (err) {
    this._lost(null, err);
    return;
  }
  this._ws = ws;
  let welcomed = false;
  const timer = setTimeout(() => {
    if (!this._ready && this._ws === ws) ws.close(4e3, "timed out");
  }, this._openTimeout);
  ws.addEventListener("open", () => {
    const hello = { type: "hello", v: PROTOCOL_VERSION, role: "client" };
    if (this.clientId) hello.client_id = this.clientId;
    ws.send(JSON.stringify(hello));
  });
  ws.addEventListener("message", (ev) => {
    if (this._ws !== ws) return;
    let frame;
    try {
      frame = JSON.parse(typeof ev.data === "string" ? ev.data : String(ev.data));
    } catch {
      console.warn("runwire: dropping a frame this client cannot read");
      return;
    }
    if (!isObject(frame) || typeof frame.type !== "string") return;
    try {
      checkRelayFrame(frame);
    } catch (err) {
      console.warn(`runwire: dropping a frame this client cannot read: ${err instanceof Error ? err.message : err}`);
      if (!welcomed) {
        if (!this._first.settled) this._fatalError(err);
        ws.close(4002, "cannot read the welcome");
      }
      return;
    }
    if (!welcomed) {
      if (frame.type === "error") {
        this._refusal = RunwireError.fromWire(frame.error);
        ws.close();
        return;
      }
      if (frame.type !== "welcome") {
        ws.close(4002, "expected welcome");
        return;
      }
      welcomed = true;
      this._expired = 0;
      this.clientId = frame.client_id;
      this._defaultMultitask = MULTITASK_STRATEGIES.includes(frame.multitask) ? frame.multitask : null;
      if (Number.isInteger(frame.max_frame_bytes) && frame.max_frame_bytes > 0) this._maxFrameBytes = frame.max_frame_bytes;
      this._connects += 1;
      if (this.subscribe) this._attach(ws, timer);
      else this._up(ws, timer);
      return;
    }
    this._onFrame(frame);
  });
  ws.addEventListener("close", (ev) => {
    clearTimeout(timer);
    if (this._ws === ws) this._lost(ev, null);
  });
}
function _attach(ws, timer) {
  const first = this._epoch === null;
  const attach = { type: "attach", session_id: this.sessionId, limit: this.historyLimit };
  if (!first) {
    if (this.view.newestSerial !== null) attach.from_serial = this.view.newestSerial;
    attach.epoch = this._epoch;
  }
  const connects = this._connects;
  if (this._attachReq !== null) this._pending.delete(this._attachReq);
  this._attachReq = this._request(attach, {
    immediate: true,
    // Called synchronously from the socket's message handler: no deliver frame can fold between.
    resolve: (reply) => {
      if (this._ws !== ws || this._connects !== connects) return;
      if (reply.type !== "attached") {
        ws.close(4002, "expected attached");
        return;
      }
      clearTimeout(timer);
      if (first) {
        this._newsAfter = reply.head;
        this.view._attached(reply.entries, reply.head, reply.has_older);
      } else if (reply.reset) {
        console.warn(`runwire: session ${this.sessionId}: the relay lost history; rebuilding`);
        this._newsAfter = reply.head;
        this._resets += 1;
        this.view._reset(reply.entries, reply.head, reply.has_older);
        this._afterReset();
      } else this.view._resumed(reply.entries, reply.head);
      this._epoch = reply.epoch;
      this._up(ws, timer);
    },
    reject: (error) => {
      if (this._ws !== ws) return;
      console.warn(`runwire: attaching to ${this.sessionId} failed:`, error);
      if (!this._first.settled) this._fatalError(error);
      else if (error instanceof RunwireError && error.code === UNAUTHORIZED) this._refusal = error;
      ws.close();
    }
  });
}
function _up(ws, timer) {
  if (this._ws !== ws) return;
  clearTimeout(timer);
  this._attempt = 0;
  this._ready = true;
  this._first.resolve(this);
  this._emit("connected");
  for (const [req, p] of [...this._pending.entries()]) {
    if (p.sentOn === this._connects) continue;
    if (p.place !== 0 && p.again !== void 0 && !this._lane.resend(p.place)) {
      this._pending.delete(req);
      p.again();
      continue;
    }
    this._send(p);
  }
}
function _onFrame(frame) {
  const req = frame.req;
  if (req !== void 0 && req !== null) {
    const pending = typeof req === "number" ? this._pending.get(req) : void 0;
    if (pending !== void 0) {
      this._pending.delete(req);
      if (frame.type === "error") pending.reject(RunwireError.fromWire(frame.error));
      else pending.resolve(frame);
    }
    return;
  }
  try {
    if (frame.type === "deliver") {
      if (frame.session_id === this.sessionId && Array.isArray(frame.entries)) this.view._foldLive(frame.entries);
    } else if (frame.type === "error") {
      const e = isObject(frame.error) ? frame.error : {};
      console.warn(`runwire: relay reported on session ${frame.session_id}: ${e.code} ${e.message}`);
    }
  } catch (err) {
    console.error(`runwire: handling a ${frame.type} frame failed:`, err);
  }
}
function _lost(ev, err) {
  const wasReady = this._ready;
  this._ready = false;
  this._ws = null;
  if (this._attachReq !== null) this._pending.delete(this._attachReq);
  this._attachReq = null;
  const refused = this._credentialsError(ev);
  if (this._closed) return;
  if (refused !== null) {
    const retry = refused.code === TOKEN_EXPIRED && this._tokenProvider !== null && ++this._expired <= 3;
    if (!retry) {
      this._fatalError(refused);
      return;
    }
  } else if (!this._first.settled) {
    const code = ev ? ev.code : 0;
    const reason = err ? String(err) : `closed with code ${code}`;
    this._fatalError(new RunwireError(CONNECTION_CLOSED, `cannot connect to ${this.url}: ${reason}`));
    return;
  }
  if (wasReady || this._attempt === 0) this._emit("disconnected");
  const restarting = ev !== null && ev !== void 0 && ev.code === 1012 && this._attempt === 0;
  const delay = restarting ? 0 : backoff(this._backoffInitial, this._backoffMax, this._attempt);
  this._attempt = Math.min(this._attempt + 1, 16);
  this._retryTimer = setTimeout(() => {
    this._retryTimer = null;
    this._open();
  }, delay);
}
function _credentialsError(ev) {
  const refusal = this._refusal;
  this._refusal = null;
  if (refusal !== null) return refusal;
  const code = ev ? ev.code : 0;
  if (code !== 4001 && code !== 4003) return null;
  const raw = ev && ev.reason || "";
  const prefix = `${CLOSE_CODES[code]}: `;
  const reason = raw.startsWith(prefix) ? raw.slice(prefix.length) : raw;
  return new RunwireError(CLOSE_CODES[code], reason || "the relay refused the credentials");
}
function _fatalError(error) {
  this._fatal = error;
  this._shutdown(error);
}
function _request(frame, handlers) {
  if (this._closed) {
    handlers.reject(this._fatal || new RunwireError(CONNECTION_CLOSED, "connection closed"));
    return null;
  }
  const req = ++this._nextReq;
  const data = { ...frame, req };
  const text = JSON.stringify(data);
  const size = utf8Length(text, this._maxFrameBytes);
  if (size > this._maxFrameBytes) {
    handlers.reject(
      new RunwireError(PAYLOAD_TOO_LARGE, `frame of ${size} bytes exceeds the limit of ${this._maxFrameBytes}`, {
        size,
        limit: this._maxFrameBytes
      })
    );
    return null;
  }
  const pending = { data, text, sentOn: -1, place: handlers.place ?? 0, resolve: handlers.resolve, reject: handlers.reject, again: handlers.again };
  this._pending.set(req, pending);
  if (this._ready || handlers.immediate) this._send(pending);
  return req;
}
function _call(frame) {
  return new Promise((resolve, reject) => this._request(frame, { resolve, reject }));
}
function _send(pending) {
  const ws = this._ws;
  if (ws === null || ws.readyState !== OPEN) return;
  pending.sentOn = this._connects;
  ws.send(pending.text);
}
async function _publish(entry) {
  if (this._closed) throw this._fatal || new RunwireError(CONNECTION_CLOSED, "the session was closed");
  const lane = this._lane;
  const place = lane.reserve();
  let reply = null;
  try {
    while (reply === null) {
      await this._turn(place);
      try {
        const call = new Promise((resolve, reject) => {
          const frame = { type: "publish", session_id: this.sessionId, entry };
          this._request(frame, { place, again: () => resolve(null), resolve, reject });
        });
        if (lane.sent(place)) this._wakeLane();
        reply = await call;
      } catch (err) {
        if (err instanceof RunwireError && err.code === NOT_ATTACHED && !this.subscribe) {
          throw new RunwireError(
            NOT_ATTACHED,
            `the relay refused a publish to ${JSON.stringify(this.sessionId)} without an attach: a session connected with subscribe: false needs a token that grants rights in that session but not 'subscribe' (a token that may read it must attach)`,
            { ...err.details, session_id: this.sessionId, subscribe: false }
          );
        }
        if (!(err instanceof RunwireError) || lane.refused(place, entry.id, err, Date.now()) === null) throw err;
        continue;
      }
      if (reply !== null) lane.accepted(place);
    }
  } finally {
    if (lane.finish(place)) this._wakeLane();
  }
  if (reply.type !== "ack" || !Number.isInteger(reply.serial)) {
    throw new RunwireError(PROTOCOL_ERROR, `expected an ack with a serial, got ${reply.type}`);
  }
  return { serial: reply.serial, duplicate: Boolean(reply.duplicate) };
}
async function _turn(place) {
  for (; ; ) {
    if (this._closed) throw this._fatal || new RunwireError(CONNECTION_CLOSED, "the session was closed");
    const turn = this._lane.turn(place, Date.now());
    if (turn.go) return;
    await new Promise((resolve) => {
      let timer = null;
      const wake = () => {
        if (timer !== null) clearTimeout(timer);
        this._laneWaiters.delete(wake);
        resolve(void 0);
      };
      this._laneWaiters.add(wake);
      if (turn.wakeAt !== null) timer = setTimeout(wake, Math.max(0, turn.wakeAt - Date.now()));
    });
  }
}
function _wakeLane() {
  for (const wake of [...this._laneWaiters]) wake();
}
var connectionMethods = { _start, _shutdown, _emit, _open, _freshToken, _openSocket, _attach, _up, _onFrame, _lost, _credentialsError, _fatalError, _request, _call, _send, _publish, _turn, _wakeLane };

// src/lane.ts
var RATE_LIMIT_WAIT = 30;
var RATE_LIMIT_BACKOFF_FIRST = 0.05;
var RATE_LIMIT_BACKOFF_MAX = 2;
var STORE_WAIT = 60;
var STORE_RETRY_FIRST = 0.1;
var STORE_RETRY_MAX = 2;
var STORE_HELD_WAIT = 10;
var RETRIED = /* @__PURE__ */ new Set([RATE_LIMITED, STORE_UNAVAILABLE]);
function backoff2(first, most, attempt, jitter) {
  const cap = Math.min(most, first * 2 ** Math.min(attempt, 16));
  return cap / 2 + jitter * (cap / 2);
}
function retryDelay(error, attempt, jitter) {
  if (error.code === STORE_UNAVAILABLE) return backoff2(STORE_RETRY_FIRST, STORE_RETRY_MAX, attempt, jitter);
  const after = error.details ? error.details.retry_after : void 0;
  if (typeof after === "number" && Number.isFinite(after) && after >= 0 && after < 3600) return after;
  return backoff2(RATE_LIMIT_BACKOFF_FIRST, RATE_LIMIT_BACKOFF_MAX, attempt, jitter);
}
var GO = Object.freeze({ go: true, wakeAt: null });
var PublishLane = class {
  rateLimitWait;
  storeWait;
  jitter;
  second;
  newest = 0;
  unsent = [];
  held = [];
  places = /* @__PURE__ */ new Map();
  storeGaveUp = false;
  gaveUp = {
    last: 0,
    error: new RunwireError(STORE_UNAVAILABLE, "the relay's store is unavailable")
  };
  constructor(options) {
    this.jitter = options.jitter;
    this.second = options.second ?? 1;
    this.rateLimitWait = options.rateLimitWait ?? RATE_LIMIT_WAIT * this.second;
    this.storeWait = options.storeWait ?? STORE_WAIT * this.second;
  }
  /** Take the next place in the lane. It must be sent, released or finished. */
  reserve() {
    this.newest += 1;
    this.unsent.push(this.newest);
    return this.newest;
  }
  /** Give back a place no publish will use. Releasing twice does nothing. */
  release(place) {
    return this.sent(place);
  }
  /** The publish of `place` is queued on the socket: the next one may go. */
  sent(place) {
    const at = this.unsent.indexOf(place);
    if (at < 0) return false;
    this.unsent.splice(at, 1);
    return true;
  }
  /**
   * The link dropped before the reply to the publish of `place` came: may it go again at once on
   * the new connection? It may when no publish before it waits to go again or to be sent.
   * Otherwise it goes back in line, as if it was never sent: the driver asks turn() again before it
   * sends it. The new connection has no relay hold behind the earlier publish, so sent at once it
   * could be stored before it.
   */
  resend(place) {
    const held = this.held.length > 0 && this.held[0] < place;
    if (!held && !(this.unsent.length > 0 && this.unsent[0] < place)) return true;
    if (!this.unsent.includes(place)) {
      let at = this.unsent.length;
      while (at > 0 && this.unsent[at - 1] > place) at--;
      this.unsent.splice(at, 0, place);
    }
    return false;
  }
  /**
   * May the publish of `place` be sent at `now`? Throws its refusal when its deadline passed while
   * it waited, and the error of a publish that gave up on the store when this one was made before
   * that and waited behind it (it must not overtake it).
   */
  turn(place, now) {
    let p = this.places.get(place);
    if (p !== void 0 && now < p.retryAt) return { go: false, wakeAt: p.retryAt };
    const refusal = p === void 0 ? null : p.refusal;
    const { last, error } = this.gaveUp;
    if (place <= last && (refusal !== null || p !== void 0 && p.waited)) {
      throw refusal !== null && refusal.code === error.code ? refusal : error;
    }
    const held = this.held.length > 0 && this.held[0] < place;
    if (!held && !(this.unsent.length > 0 && this.unsent[0] < place)) return GO;
    let wakeAt = null;
    if (p !== void 0 && refusal !== null) {
      if (now >= p.deadline) throw refusal;
      wakeAt = p.deadline;
    }
    if (held) {
      if (p === void 0) this.places.set(place, p = newPlace());
      p.waited = true;
    }
    return { go: false, wakeAt };
  }
  /**
   * The relay refused the publish of `place` with `error` at `now`: when it goes again, or null
   * when it gives up (the driver throws `error`). Only RATE_LIMITED and STORE_UNAVAILABLE go again.
   */
  refused(place, entryId, error, now) {
    if (!RETRIED.has(error.code)) return null;
    let p = this.places.get(place);
    if (p === void 0) this.places.set(place, p = newPlace());
    if (p.refusal === null || p.refusal.code !== error.code) {
      p.since = now;
      p.attempt = 0;
    }
    p.refusal = error;
    const heldBy = error.details ? error.details.held : void 0;
    const behind = heldBy !== void 0 && heldBy !== null && heldBy !== entryId;
    const store = error.code === STORE_UNAVAILABLE && !behind;
    if (store && this.storeGaveUp) return null;
    const delay = retryDelay(error, p.attempt, this.jitter()) * this.second;
    p.attempt += 1;
    p.deadline = p.since + (error.code === RATE_LIMITED ? this.rateLimitWait : Math.max(this.storeWait, behind ? STORE_HELD_WAIT * this.second : 0));
    if (now + delay > p.deadline) {
      if (store) {
        this.storeGaveUp = true;
        this.gaveUp = { last: this.newest, error };
      }
      return null;
    }
    if (!this.held.includes(place)) {
      let at = this.held.length;
      while (at > 0 && this.held[at - 1] > place) at--;
      this.held.splice(at, 0, place);
    }
    p.retryAt = now + delay;
    return p.retryAt;
  }
  /** The relay took the publish of `place`: the store, if it was away, is back. */
  accepted(_place) {
    this.storeGaveUp = false;
  }
  /** The publish of `place` is over: it was taken, or it raised. */
  finish(place) {
    const woke = this.sent(place);
    const p = this.places.get(place);
    this.places.delete(place);
    if (p !== void 0 && p.refusal !== null) {
      const at = this.held.indexOf(place);
      if (at >= 0) this.held.splice(at, 1);
      return true;
    }
    return woke;
  }
};
function newPlace() {
  return { refusal: null, since: 0, deadline: 0, attempt: 0, retryAt: 0, waited: false };
}

// src/session.ts
var OWN_WAIT_MS = 3e4;
var Session = class {
  /** @internal */
  _resets;
  /** @internal */
  _onOffline;
  /** @internal */
  _onOnline;
  /** @internal */
  _first;
  /** @internal */
  _attachReq;
  /** @internal */
  _retryTimer;
  /** @internal */
  _stateCallbacks;
  /** @internal */
  _newsAfter;
  /** Called the moment an input check refuses a queued message; see ConnectOptions. */
  onRefusedMessage;
  /** @internal */
  _refusedMessages;
  /** @internal */
  _deliveries;
  /** @internal */
  _laneWaiters;
  /** @internal */
  _lane;
  /** @internal */
  _pending;
  /** @internal */
  _nextReq;
  /** @internal */
  _attempt;
  /** @internal */
  _connects;
  /** @internal */
  _maxFrameBytes;
  /** @internal */
  _defaultMultitask;
  /** @internal */
  _epoch;
  /** @internal */
  _fatal;
  /** @internal */
  _closed;
  /** @internal */
  _ready;
  /** @internal */
  _ws;
  view;
  /** @internal */
  _WebSocket;
  /** @internal */
  _storeWait;
  /** @internal */
  _rateLimitWait;
  /** @internal */
  _openTimeout;
  /** @internal */
  _backoffMax;
  /** @internal */
  _backoffInitial;
  /** @internal */
  _refusal;
  /** @internal */
  _expired;
  /** @internal */
  _tries;
  /** @internal */
  _tokenProvider;
  /** @internal */
  _token;
  clientId;
  historyLimit;
  agent;
  subscribe;
  sessionId;
  url;
  /** @param {string} url @param {string} sessionId @param {ConnectOptions} [options] */
  constructor(url, sessionId, options = {}) {
    const historyLimit = options.historyLimit ?? 100;
    if (!(historyLimit >= 1 && historyLimit <= 1e3)) {
      throw new RunwireError(VALIDATION_ERROR, "historyLimit must be between 1 and 1000");
    }
    const subscribe = options.subscribe ?? true;
    if (typeof subscribe !== "boolean") throw new RunwireError(VALIDATION_ERROR, "subscribe must be a boolean");
    if (!subscribe && options.onRefusedMessage) {
      throw new RunwireError(
        VALIDATION_ERROR,
        "a session connected with subscribe: false never sees refusals: onRefusedMessage is not taken (a refused publish rejects with its error)"
      );
    }
    this.url = url;
    this.sessionId = sessionId;
    this.subscribe = subscribe;
    this.agent = options.agent || "default";
    this.historyLimit = historyLimit;
    this.clientId = options.clientId || null;
    this._token = options.token || null;
    this._tokenProvider = options.tokenProvider || null;
    this._tries = 0;
    this._expired = 0;
    this._refusal = null;
    this._backoffInitial = options.backoffInitial ?? 50;
    this._backoffMax = options.backoffMax ?? 5e3;
    this._openTimeout = options.openTimeout ?? 1e4;
    this._rateLimitWait = options.rateLimitWait ?? 3e4;
    this._storeWait = options.storeWait ?? 6e4;
    this._WebSocket = options.WebSocket || globalThis.WebSocket;
    if (typeof this._WebSocket !== "function") {
      throw new RunwireError(VALIDATION_ERROR, "no WebSocket class: pass options.WebSocket");
    }
    this.view = new View(sessionId, (before, limit) => this._fetchOlder(before, limit));
    this.view._writeOnly = !subscribe;
    this.view._hooks.push((event) => this._onEvent(event));
    this._ws = null;
    this._ready = false;
    this._closed = false;
    this._fatal = null;
    this._epoch = null;
    this._resets = 0;
    this._defaultMultitask = null;
    this._maxFrameBytes = 1024 * 1024;
    this._connects = 0;
    this._attempt = 0;
    this._nextReq = 0;
    this._pending = /* @__PURE__ */ new Map();
    this._lane = new PublishLane({ jitter: Math.random, rateLimitWait: this._rateLimitWait, storeWait: this._storeWait, second: 1e3 });
    this._laneWaiters = /* @__PURE__ */ new Set();
    this._deliveries = /* @__PURE__ */ new Map();
    this._refusedMessages = /* @__PURE__ */ new Map();
    this.onRefusedMessage = options.onRefusedMessage || null;
    this._newsAfter = null;
    this._stateCallbacks = /* @__PURE__ */ new Set();
    this._retryTimer = null;
    this._attachReq = null;
    this._first = new Deferred();
    this._onOnline = () => {
      if (this._retryTimer !== null && !this._closed) {
        clearTimeout(this._retryTimer);
        this._retryTimer = null;
        this._open();
      }
    };
    this._onOffline = () => {
      const ws = this._ws;
      if (this._closed || ws === null || !this._first.settled) return;
      this._lost(null, null);
      try {
        ws.close(4e3, "offline");
      } catch {
      }
    };
  }
  /** True while the socket is up and attached (up, for a write-only session). */
  get connected() {
    return this._ready;
  }
  /** True once the session was closed (by `close()` or for good by the relay). */
  get closed() {
    return this._closed;
  }
  /**
   * Call `fn(state)` on each change of the connection ("connected", "disconnected", "closed");
   * returns a function that unsubscribes. `on("state", fn)` does the same.
   * @param {(state: ConnectionState) => void} fn @returns {() => void}
   */
  onState(fn) {
    const wrapped = (s) => fn(s);
    this._stateCallbacks.add(wrapped);
    return () => {
      this._stateCallbacks.delete(wrapped);
    };
  }
  /**
   * `on("state", fn)`: the connection's state changes (see `onState`).
   * @param {"state"} event @param {(state: ConnectionState) => void} fn @returns {() => void}
   */
  on(event, fn) {
    if (event !== "state") throw new RunwireError(VALIDATION_ERROR, `unknown session event ${JSON.stringify(event)}; expected "state"`);
    return this.onState(fn);
  }
  /**
   * Start a Run with `message`; resolves once the relay acknowledged the prompt.
   *
   * `multitask` says what the Run does to the Runs already running in the session. Without it,
   * the relay's default applies, which is "alongside" unless set. A paused Run counts as running
   * when its questions are settled, since it is about to resume. They are settled when answered,
   * declined, or moved on by this very prompt. The strategies:
   * - "alongside": they run side by side;
   * - "reject": rejects with RunwireError(THREAD_BUSY) while one is running;
   * - "enqueue": the Run is "queued" until they settle, then starts;
   * - "interrupt": they are cancelled, then the Run starts;
   * - "rollback": as interrupt, and the interrupted turn goes onto a branch of its own: the
   *   conversation continues from before it.
   *
   * Any strategy but alongside rejects with THREAD_ACCESS_DENIED while another user's Run is
   * running, unless the session is shared (its first prompt sent `threadAccess: "shared"`, or the
   * relay shares sessions by default). `parentId` names the message to continue from (by
   * default the view's tail for alongside and reject; the relay's placement for the others);
   * `parentRunId` the Run whose tool call starts this one (never held back). With `signal`
   * already aborted nothing is sent and it rejects with RunwireError(ABORTED); aborted later, it
   * cancels the Run. Rejects with VALIDATION_ERROR for an unknown strategy, with
   * PAYLOAD_TOO_LARGE (nothing sent) when the prompt is over the relay's `max_frame_bytes`, and
   * with the relay's RunwireError if it refuses the prompt.
   * @param {string | UIMessage} message
   * @param {{multitask?: Multitask | null, parentId?: string | null, parentRunId?: string | null, threadAccess?: ThreadAccess | null, signal?: AbortSignal | null}} [options]
   * @returns {Promise<ClientRun>}
   */
  async send(message, options = {}) {
    const { multitask, parentRunId, threadAccess, signal } = options;
    let parentId = options.parentId ?? null;
    if (multitask !== void 0 && multitask !== null && !MULTITASK_STRATEGIES.includes(multitask)) {
      throw new RunwireError(
        VALIDATION_ERROR,
        `unknown multitask strategy ${JSON.stringify(multitask)}; expected one of ${MULTITASK_STRATEGIES.join(", ")}`,
        { multitask }
      );
    }
    if (signal && signal.aborted) throw new RunwireError(ABORTED, "the send's signal was aborted; nothing was sent");
    const msg = asMessage(message);
    if (this.subscribe && this.view.tree.message(msg.id) !== null) throw reused(msg.id);
    const runId = newId();
    const effective = multitask || this._defaultMultitask || "alongside";
    if (this.subscribe && parentId === null && (effective === "alongside" || effective === "reject")) {
      const tail = this.view.getMessages();
      if (tail.length) parentId = tail[tail.length - 1].message.id;
    }
    const entry = { kind: "message", id: msg.id, run_id: runId, intent: "prompt", agent: this.agent, message: msg };
    if (parentId !== null) entry.parent_id = parentId;
    if (multitask !== void 0 && multitask !== null) entry.multitask = multitask;
    if (parentRunId !== void 0 && parentRunId !== null) entry.parent_run_id = parentRunId;
    if (threadAccess !== void 0 && threadAccess !== null) entry.thread_access = threadAccess;
    const ack = await this._publish(entry);
    if (ack.duplicate && this.subscribe && !await this._isOwn(msg.id, runId, "prompt", ack.serial)) throw reused(msg.id, ack.serial);
    if (signal) {
      if (signal.aborted) this._cancelSoon(runId);
      else signal.addEventListener("abort", () => this._cancelSoon(runId), { once: true });
    }
    return new ClientRun(this, runId, msg);
  }
  /**
   * Ask the agent of `runId` to stop; resolves once the relay acknowledged it. Cancelling a Run
   * that has already ended does nothing; a queued Run stops waiting. With `wait`, it also waits
   * until the Run ends, for up to `timeout` ms, or with no limit when `timeout` is null. It then
   * rejects with RunwireError(CANCEL_DENIED) if its agent refuses this cancel, and with
   * CONNECTION_CLOSED if the session closes first. It rejects with EPOCH_MISMATCH, naming
   * `details.run_id`, if a reset meanwhile rebuilt the view without the Run. Rejects with the
   * relay's RunwireError (RUN_NOT_FOUND, UNAUTHORIZED without the right, ...) when it refuses
   * the cancel.
   * @param {string} runId @param {{reason?: string | null, wait?: boolean, timeout?: number | null}} [options]
   * @returns {Promise<void>}
   */
  async cancel(runId, options = {}) {
    const { reason, wait = false, timeout = 3e4 } = options;
    if (wait && !this.subscribe) throw writeOnlyError(this.sessionId, "cancel({wait: true})");
    const entry = { kind: "cancel", id: newId(), run_id: runId };
    if (reason !== void 0 && reason !== null) entry.reason = reason;
    const resets = this._resets;
    try {
      await this._publish(entry);
    } catch (err) {
      if (!(err instanceof RunwireError) || err.code !== RUN_NOT_ACTIVE) throw err;
      return;
    }
    if (wait) await this._settled(runId, entry.id, timeout, resets);
  }
  /**
   * Answer questions a paused Run waits on (`{interruptId: answer}`); resolves once the relay
   * took them. Rejects with VALIDATION_ERROR (a question not waited on, or answered already),
   * INTERRUPT_ANSWER_INVALID (details.interrupt_id) or INTERRUPT_EXPIRED; nothing is taken then.
   * @param {string} runId @param {Record<string, unknown>} responses @returns {Promise<void>}
   */
  async resume(runId, responses) {
    await this._publish({ kind: "interrupt", id: newId(), run_id: runId, status: "resumed", responses });
  }
  /** The oldest Run that waits on questions, with them; null if none. @returns {{runId: string, interrupts: Interrupt[]} | null} */
  pausedRun() {
    if (!this.subscribe) throw writeOnlyError(this.sessionId, "pausedRun()");
    for (const info of this.view.runs()) {
      const questions = this.view.tree.interrupts(info.runId);
      if (questions.length) return { runId: info.runId, interrupts: questions };
    }
    return null;
  }
  /**
   * End a pause without answers: each waiting call gets "The user declined to answer ...".
   * @param {string} runId @param {{reason?: string | null}} [options] @returns {Promise<void>}
   */
  async cancelPause(runId, options = {}) {
    const entry = { kind: "interrupt", id: newId(), run_id: runId, status: "declined" };
    if (options.reason !== void 0 && options.reason !== null) entry.reason = options.reason;
    await this._publish(entry);
  }
  /**
   * Wait until the Run ends or `timeout` ms pass; reject with CANCEL_DENIED if the cancel
   * `cancelId` is refused, with CONNECTION_CLOSED if the session closes first, with EPOCH_MISMATCH
   * if a reset after `resets` lost the Run.
   * @param {string} runId @param {string} cancelId @param {number | null} timeout @param {number} resets
   * @internal
   */
  async _settled(runId, cancelId, timeout, resets) {
    const view = this.view;
    let timer;
    const late = new Promise((resolve) => {
      if (timeout !== null && timeout !== void 0 && Number.isFinite(timeout)) timer = setTimeout(() => resolve(null), timeout);
    });
    const settled = view._until(() => {
      const denial = view.tree.cancelDenial(cancelId);
      if (denial !== null) return { denial };
      const info = view.run(runId);
      if (info === null) this._checkLost(runId, resets);
      return info !== null && isTerminal(info.status) ? { denial: null } : null;
    }, late);
    try {
      const result = await Promise.race([settled, late]);
      if (result && result.denial) throw denied(result.denial);
    } finally {
      clearTimeout(timer);
    }
  }
  /**
   * Throw EPOCH_MISMATCH if a reset since `resets` left the view without the Run.
   * @param {string} runId @param {number} resets
   * @internal
   */
  _checkLost(runId, resets) {
    if (this._resets > resets && this.view.run(runId) === null) {
      throw new RunwireError(EPOCH_MISMATCH, "the relay lost the session's history; how the Run ended is unknown", { run_id: runId });
    }
  }
  /** A send's signal fired: cancel its Run unless it ended (failures are logged). @param {string} runId @internal */
  _cancelSoon(runId) {
    const info = this.subscribe ? this.view.run(runId) : null;
    if (this._closed || info !== null && isTerminal(info.status)) return;
    this.cancel(runId, { reason: "the send's signal was aborted" }).catch((err) => {
      console.warn(`runwire: cancelling run ${runId} after its signal fired failed:`, err);
    });
  }
  /**
   * The raw UI message stream chunks of every Run's replies in this session, in order, each
   * with its Run and message. First come those the view holds after the serial `options.after`,
   * then live ones; without `options.after` it starts from now on. It ends when the session
   * closes or `options.signal` aborts. A
   * reconnect neither skips nor repeats a chunk. Throws NOT_ATTACHED on a write-only session.
   */
  chunks(options = {}) {
    if (!this.subscribe) throw writeOnlyError(this.sessionId, "session.chunks()");
    const after = options.after === void 0 ? this.view._newest : options.after;
    return replyChunks(this.view, null, { ...options, after });
  }
  /**
   * A handle on a Run the view knows (one this client or another one started). Throws
   * RunwireError(RUN_NOT_FOUND) if the view has not seen it.
   * @param {string} runId @returns {ClientRun}
   */
  run(runId) {
    if (!this.subscribe) return new ClientRun(this, runId, null);
    if (this.view.run(runId) === null) {
      throw new RunwireError(RUN_NOT_FOUND, `the view has no run ${JSON.stringify(runId)}`, { run_id: runId });
    }
    const prompt = this.view.tree.prompt(runId);
    return new ClientRun(this, runId, prompt ? prompt.message : null);
  }
  /** Close the connection; pending steering outcomes reject with CONNECTION_CLOSED. @returns {Promise<void>} */
  async close() {
    if (this._closed) return;
    this._shutdown(new RunwireError(CONNECTION_CLOSED, "the session was closed"));
    const ws = this._ws;
    this._ws = null;
    if (ws !== null && ws.readyState <= OPEN) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, 1e3);
        ws.addEventListener("close", () => {
          clearTimeout(timer);
          resolve(void 0);
        });
        try {
          ws.close(1e3, "closed");
        } catch {
          clearTimeout(timer);
          resolve(void 0);
        }
      });
    }
  }
  // ----------------------------------------------------------------- internal --
  /** @param {number} before @param {number} limit @internal */
  async _fetchOlder(before, limit) {
    if (this._closed) throw new RunwireError(CONNECTION_CLOSED, "the session was closed");
    const reply = await this._call({ type: "history", session_id: this.sessionId, before, limit });
    if (reply.type !== "page") throw new RunwireError(PROTOCOL_ERROR, `expected a page, got ${reply.type}`);
    return { entries: reply.entries, hasOlder: Boolean(reply.has_older) };
  }
  /** @param {Delivery} delivery @param {Entry} entry @internal */
  _startDelivery(delivery, entry) {
    if (this._closed) {
      delivery._fail(this._fatal || new RunwireError(CONNECTION_CLOSED, "the session was closed"));
      return;
    }
    const id = delivery.message.id;
    if (!this._deliveries.has(id)) this._deliveries.set(id, []);
    this._deliveries.get(id).push(delivery);
    if (!this.subscribe) delivery._outcome.reject(writeOnlyError(this.sessionId, "Delivery.outcome"));
    this._publish(entry).then(
      async (ack) => {
        if (!this.subscribe) {
          delivery._published.resolve({ serial: ack.serial });
          this._forget(delivery);
          return;
        }
        if (ack.duplicate) {
          let own;
          try {
            own = await this._isOwn(id, delivery.runId, delivery.intent, ack.serial);
          } catch (err) {
            delivery._fail(err instanceof RunwireError ? err : new RunwireError("INTERNAL_ERROR", `publishing failed: ${err}`));
            this._forget(delivery);
            return;
          }
          if (!own) {
            delivery._fail(reused(id, ack.serial));
            this._forget(delivery);
            return;
          }
          const record = this.view.tree.outcome(id);
          if (record !== null) this._settle(delivery, record);
        }
        delivery._published.resolve({ serial: ack.serial });
      },
      (err) => {
        if (!this.subscribe) {
          delivery._published.reject(err instanceof RunwireError ? err : new RunwireError("INTERNAL_ERROR", `publishing failed: ${err}`));
          this._forget(delivery);
          return;
        }
        const late = err instanceof RunwireError ? endedBeforeStored(id, delivery.runId, err.code, err.details) : null;
        if (late !== null) {
          delivery._published.reject(err);
          this._settle(delivery, late);
          return;
        }
        delivery._fail(err instanceof RunwireError ? err : new RunwireError("INTERNAL_ERROR", `publishing failed: ${err}`));
        this._forget(delivery);
      }
    );
  }
  /**
   * After a reset: settle the outcomes the rebuilt view can tell; reject EPOCH_MISMATCH those of
   * acknowledged messages whose Run it does not know (they would never resolve), as the seed's
   * clients do when continuity is lost. A publish still in flight is re-sent and answered.
   * @internal
   */
  _afterReset() {
    for (const list of [...this._deliveries.values()]) {
      for (const delivery of [...list]) {
        if (!delivery._published.settled) continue;
        const record = this.view.tree.outcome(delivery.message.id);
        if (record !== null) this._settle(delivery, record);
        else if (this.view.run(delivery.runId) === null) {
          delivery._outcome.reject(
            new RunwireError(EPOCH_MISMATCH, "the relay lost the session's history; whether the agent saw this message is unknown", {
              run_id: delivery.runId,
              message_id: delivery.message.id
            })
          );
          this._forget(delivery);
        }
      }
    }
  }
  /**
   * After a duplicate ack: is the entry stored at `serial` this one (a retry)?
   * @param {string} messageId @param {string} runId @param {Intent} intent @param {number} serial @internal
   */
  async _isOwn(messageId, runId, intent, serial) {
    const told = () => {
      const vm = this.view.tree.message(messageId);
      if (vm !== null) return { own: vm.runId === runId && vm.intent === intent };
      const newest = this.view.newestSerial;
      return newest !== null && newest >= serial ? { own: false } : null;
    };
    let timer;
    const giveUp = new Promise((resolve) => {
      timer = setTimeout(resolve, OWN_WAIT_MS);
    });
    try {
      const found = await this.view._until(told, giveUp);
      return found !== null && found.own;
    } finally {
      clearTimeout(timer);
    }
  }
  /** @param {Delivery} delivery @internal */
  _forget(delivery) {
    const list = this._deliveries.get(delivery.message.id);
    if (list === void 0) return;
    const i = list.indexOf(delivery);
    if (i >= 0) list.splice(i, 1);
    if (!list.length) this._deliveries.delete(delivery.message.id);
  }
  /** @param {Delivery} delivery @param {OutcomeRecord} record @internal */
  _settle(delivery, record) {
    if (record.refused) this._refusedMessages.set(delivery.message.id, delivery.message);
    delivery._outcome.resolve({
      consumed: record.consumed,
      runTerminalReason: record.runTerminalReason,
      refused: record.refused ? RunwireError.fromWire(record.refused) : null
    });
    this._forget(delivery);
  }
  /** The client's record of a refusal, with the message if this device has it. @param {Refusal} refusal @returns {Refused} @internal */
  _refused(refusal) {
    const vm = this.view.tree.message(refusal.messageId);
    const message = this._refusedMessages.get(refusal.messageId) ?? (vm !== null ? vm.message : null);
    return Object.freeze({
      messageId: refusal.messageId,
      runId: refusal.runId,
      intent: refusal.intent,
      error: RunwireError.fromWire(refusal.error),
      message
    });
  }
  /** @param {TreeEvent} event @internal */
  _onEvent(event) {
    if (event.kind !== "delivery") return;
    const record = event.outcome;
    for (const delivery of [...this._deliveries.get(record.messageId) || []]) {
      if (delivery.runId === record.runId) this._settle(delivery, record);
    }
    if (record.refused && this.onRefusedMessage) this._tellRefused(record.messageId);
  }
  /** Call `onRefusedMessage` for the refusal of `messageId` unless it is history. @param {string} messageId @internal */
  _tellRefused(messageId) {
    const refusal = this.view.tree.refusals().findLast((r) => r.messageId === messageId);
    if (refusal === void 0 || this._newsAfter !== null && refusal.serial <= this._newsAfter) return;
    try {
      this.onRefusedMessage?.(this._refused(refusal));
    } catch (err) {
      console.error("runwire: onRefusedMessage failed:", err);
    }
  }
};
Object.assign(Session.prototype, connectionMethods);

// src/index.ts
function connect(url, sessionId, options = {}) {
  try {
    return new Session(url, sessionId, options)._start();
  } catch (err) {
    return Promise.reject(err);
  }
}
export {
  CLOSE_CODES,
  CONNECTION_CLOSED,
  ClientRun,
  ConversationTree,
  CredentialsError,
  Delivery,
  ERROR_GROUPS,
  EVENT_KINDS,
  FinalError,
  MULTITASK_STRATEGIES,
  OutcomeBook,
  PROTOCOL_VERSION,
  PublishLane,
  RequestError,
  RetryableError,
  RunwireError,
  Session,
  TERMINAL,
  View,
  checkRelayFrame,
  connect,
  decodeEntry,
  endReason,
  endedBeforeStored,
  entryChunks,
  errorGroup,
  messageText,
  newId,
  userMessage
};
