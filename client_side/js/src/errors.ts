import type { Multitask, Part, RunEndReason, TextPart, UIMessage } from "./types.js";
import { validateMessage } from "./entries.js";

export const PROTOCOL_VERSION: 1 = 1;
export const TERMINAL: readonly RunEndReason[] = Object.freeze(["complete", "cancelled", "error"]);
/** Whether a Run status is terminal (TERMINAL holds it). */
export function isTerminal(status: string): status is RunEndReason {
  return (TERMINAL as readonly string[]).includes(status);
}
export const EVENT_KINDS = Object.freeze(["message", "run", "delivery"] as const);
export const CONNECTION_CLOSED: "CONNECTION_CLOSED" = "CONNECTION_CLOSED";
/** WebSocket close codes the relay uses, by the error code each stands for. */
export const CLOSE_CODES: Readonly<Record<number, string>> = Object.freeze({
  1000: "NORMAL",
  1001: "GOING_AWAY",
  1009: "PAYLOAD_TOO_LARGE",
  1012: "SERVICE_RESTART",
  4001: "UNAUTHORIZED",
  4002: "PROTOCOL_ERROR",
  4003: "TOKEN_EXPIRED",
  4008: "SLOW_CONSUMER",
});

export const VALIDATION_ERROR = "VALIDATION_ERROR";
export const PROTOCOL_ERROR = "PROTOCOL_ERROR";
export const RUN_NOT_ACTIVE = "RUN_NOT_ACTIVE";
export const RUN_NOT_FOUND = "RUN_NOT_FOUND";
export const UNAUTHORIZED = "UNAUTHORIZED";
export const CANCEL_DENIED = "CANCEL_DENIED";
export const TOKEN_EXPIRED = "TOKEN_EXPIRED";
export const ABORTED = "ABORTED";
export const PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE";
export const EPOCH_MISMATCH = "EPOCH_MISMATCH";
export const RATE_LIMITED = "RATE_LIMITED";
export const NOT_ATTACHED = "NOT_ATTACHED";
export const STORE_UNAVAILABLE = "STORE_UNAVAILABLE";
/** The multitask strategies a prompt may name (`session.send(message, {multitask})`). */
export const MULTITASK_STRATEGIES: readonly Multitask[] = Object.freeze(["alongside", "reject", "enqueue", "interrupt", "rollback"]);
export const THREAD_ACCESS = ["own", "shared"];

// ------------------------------------------------------------------------------- basics ---

/**
 * The one error runwire reports: a stable `code`, a `message` for people, JSON `details`.
 *
 * `new RunwireError(code, ...)` builds an instance of the code's group (`RetryableError`,
 * `CredentialsError`, `RequestError` or `FinalError`; see `ERROR_GROUPS`), so
 * `instanceof RunwireError` still holds for every error. A code of no group gives a plain
 * `RunwireError`.
 */
export class RunwireError extends Error {
  text: string;
  details: Record<string, unknown>;
  code: string;
  /**
   * @param {string} code
   * @param {string} [message]
   * @param {Record<string, unknown>} [details]
   */
  constructor(code: string, message?: string, details?: Record<string, unknown>) {
    super(`${code}: ${message || code}`);
    this.name = "RunwireError";
    /** @type {string} */
    this.code = code;
    /** @type {Record<string, unknown>} */
    this.details = { ...(details || {}) };
    /** The message without the code in front. */
    this.text = message || code;
    const group = new.target === RunwireError ? groupName(code) : undefined;
    if (group !== undefined) {
      Object.setPrototypeOf(this, GROUP_CLASSES[group].prototype);
      this.name = group;
    }
  }

  /**
   * Rebuild an error from the `error` object of a frame; tolerant of junk.
   * @param {any} data
   * @returns {RunwireError}
   */
  static fromWire(data: any): RunwireError {
    const obj = isObject(data) ? data : {};
    const code = typeof obj.code === "string" && obj.code ? obj.code : "INTERNAL_ERROR";
    const message = typeof obj.message === "string" ? obj.message : undefined;
    return new RunwireError(code, message, isObject(obj.details) ? obj.details : undefined);
  }

  /** @returns {{code: string, message: string, details: Record<string, unknown>}} */
  toWire(): { code: string; message: string; details: Record<string, unknown>; } {
    return { code: this.code, message: this.text, details: this.details };
  }
}

/** Retry: the request may work later, as it stands (after a backoff or a new attach). */
export class RetryableError extends RunwireError {
  constructor(code: string, message?: string, details?: Record<string, unknown>) {
    super(code, message, details);
    this.name = "RetryableError";
  }
}

/** Authenticate again: the token is missing, expired or lacks the right. */
export class CredentialsError extends RunwireError {
  constructor(code: string, message?: string, details?: Record<string, unknown>) {
    super(code, message, details);
    this.name = "CredentialsError";
  }
}

/** Fix the request: as sent, it will be refused again. */
export class RequestError extends RunwireError {
  constructor(code: string, message?: string, details?: Record<string, unknown>) {
    super(code, message, details);
    this.name = "RequestError";
  }
}

/** Give up: the Run or the question moved on, and no retry changes that. */
export class FinalError extends RunwireError {
  constructor(code: string, message?: string, details?: Record<string, unknown>) {
    super(code, message, details);
    this.name = "FinalError";
  }
}

/** The name of an error group: what the caller should do about its codes. */
export type ErrorGroupName = "RetryableError" | "CredentialsError" | "RequestError" | "FinalError";

/**
 * Which codes belong to which group, as the Python SDK's `transport.errors.ERROR_GROUPS` has
 * them (tests/vectors/errors/groups.json holds the table both SDKs are checked against).
 */
export const ERROR_GROUPS: Readonly<Record<ErrorGroupName, readonly string[]>> = Object.freeze({
  RetryableError: Object.freeze([
    "CONFLICT",
    "CONNECTION_CLOSED",
    "EPOCH_MISMATCH",
    "INTERNAL_ERROR",
    "RATE_LIMITED",
    "SLOW_CONSUMER",
    "STORE_UNAVAILABLE",
    "THREAD_BUSY",
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
    "VALIDATION_ERROR",
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
    "THREAD_ACCESS_DENIED",
  ]),
});

/** A `RunwireError` class: `RunwireError` itself or one of its groups. */
export type ErrorClass = new (code: string, message?: string, details?: Record<string, unknown>) => RunwireError;

const GROUP_CLASSES: Readonly<Record<ErrorGroupName, ErrorClass>> = {
  RetryableError,
  CredentialsError,
  RequestError,
  FinalError,
};

let groupNames: Map<string, ErrorGroupName> | null = null;

/** The name of the group `code` belongs to, or undefined for a code of no group. */
function groupName(code: string): ErrorGroupName | undefined {
  if (groupNames === null) {
    groupNames = new Map();
    for (const [name, codes] of Object.entries(ERROR_GROUPS)) {
      for (const each of codes) groupNames.set(each, name as ErrorGroupName);
    }
  }
  return groupNames.get(code);
}

/** The class `new RunwireError(code)` builds: the code's group, else `RunwireError`. */
export function errorGroup(code: string): ErrorClass {
  const name = groupName(code);
  return name === undefined ? RunwireError : GROUP_CLASSES[name];
}

/** A fresh random id (32 hex digits, like the Python SDK's). */
export function newId() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID().replace(/-/g, "");
  let out = "";
  for (let i = 0; i < 32; i++) out += Math.floor(Math.random() * 16).toString(16);
  return out;
}

/**
 * A user message from text or parts (the seed's `createUserMessage`).
 * @param {string | Part[]} textOrParts
 * @param {{id?: string, metadata?: Record<string, unknown>}} [options]
 * @returns {UIMessage}
 */
export function userMessage(textOrParts: string | Part[], options: { id?: string; metadata?: Record<string, unknown>; } = {}): UIMessage {
  const parts = typeof textOrParts === "string" ? [{ type: "text", text: textOrParts }] : [...textOrParts];
  return validateMessage(
    { id: options.id || newId(), role: "user", parts, metadata: { ...(options.metadata || {}) } },
    "message",
  );
}

/**
 * The text a person would read: every text part, in order.
 * @param {UIMessage} message
 */
export function messageText(message: UIMessage) {
  return message.parts.filter((p) => p.type === "text").map((p) => (p as TextPart).text).join("");
}

/** @param {string} status @returns {RunEndReason | null} */
export function endReason(status: string): RunEndReason | null {
  return status === "complete" || status === "cancelled" || status === "error" ? status : null;
}

/**
 * Ms to wait before try `attempt` (0 first) goes again: `first` doubling up to `most`, with
 * jitter (between half of that and all of it).
 * @param {number} first @param {number} most @param {number} attempt @returns {number}
 */
export function backoff(first: number, most: number, attempt: number): number {
  const cap = Math.min(most, first * 2 ** Math.min(attempt, 16));
  return cap / 2 + Math.random() * (cap / 2);
}

/**
 * The bytes `text` takes in UTF-8 (JSON text: no lone surrogates). A text too short to pass
 * `limit` even at 3 bytes a character is not counted: its length is returned.
 * @param {string} text @param {number} limit @returns {number}
 */
export function utf8Length(text: string, limit: number): number {
  if (text.length * 3 <= limit) return text.length;
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x80) n += c < 0x800 || (c >= 0xd800 && c <= 0xdfff) ? 1 : 2;
  }
  return n;
}

/** @param {unknown} v @returns {v is Record<string, any>} */
export function isObject(v: unknown): v is Record<string, any> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** @param {unknown} a @param {unknown} b @returns {boolean} */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  }
  const ak = Object.keys(a);
  const bk = Object.keys(b);
  if (ak.length !== bk.length) return false;
  // @ts-ignore: both are plain objects here
  return ak.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k]));
}
