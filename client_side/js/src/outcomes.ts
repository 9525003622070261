import type { OutcomeRecord, RunEndReason } from "./types.js";
import { RUN_NOT_ACTIVE, endReason } from "./errors.js";

// ------------------------------------------------------------------------------ outcomes ---

/**
 * Pending and resolved steering outcomes of one session, fed in serial order (transport/outcomes.py).
 * Each message resolves exactly once; the methods return the records they resolved.
 */
export class OutcomeBook {
  /** @internal */
  _resolved: Map<string, OutcomeRecord>;
  /** @internal */
  _ended: Map<string, RunEndReason>;
  /** @internal */
  _seen: Map<string, Set<string>>;
  /** @internal */
  _pending: Map<string, Set<string>>;
  /** @internal */
  _runOf: Map<string, string>;
  constructor() {
    /** @type {Map<string, string>} */ this._runOf = new Map();
    /** @type {Map<string, Set<string>>} */ this._pending = new Map();
    /** @type {Map<string, Set<string>>} */ this._seen = new Map();
    /** @type {Map<string, RunEndReason>} */ this._ended = new Map();
    /** @type {Map<string, OutcomeRecord>} */ this._resolved = new Map();
  }

  /**
   * Start tracking a message aimed at `runId`; returns it if it resolved at once.
   * @param {string} messageId @param {string} runId @returns {OutcomeRecord[]}
   */
  track(messageId: string, runId: string): OutcomeRecord[] {
    if (this._runOf.has(messageId)) return [];
    this._runOf.set(messageId, runId);
    const reason = this._ended.get(runId);
    if (reason !== undefined) return [this._resolve(messageId, runId, reason)];
    if (!this._pending.has(runId)) this._pending.set(runId, new Set());
    (this._pending.get(runId) as Set<string>).add(messageId);
    return [];
  }

  /** Record that a response of `runId` had seen `messageIds`. @param {string} runId @param {Iterable<string>} messageIds */
  saw(runId: string, messageIds: Iterable<string>) {
    if (!this._seen.has(runId)) this._seen.set(runId, new Set());
    const seen = (this._seen.get(runId) as Set<string>);
    for (const id of messageIds) seen.add(id);
  }

  /** Apply a Run lifecycle status. @param {string} runId @param {string} status @returns {OutcomeRecord[]} */
  runStatus(runId: string, status: string): OutcomeRecord[] {
    if (this._ended.has(runId)) return [];
    const reason = endReason(status);
    if (reason !== null) {
      this._ended.set(runId, reason);
      const pending = this._pending.get(runId) || new Set();
      this._pending.delete(runId);
      return [...pending].map((mid) => this._resolve(mid, runId, reason));
    }
    if (status !== "suspended") return [];
    const pending = this._pending.get(runId) || new Set();
    const seen = this._seen.get(runId) || new Set();
    const done = [...pending].filter((mid) => seen.has(mid));
    for (const mid of done) pending.delete(mid);
    return done.map((mid) => this._resolve(mid, runId, null));
  }

  /**
   * An input check refused `messageId` (a `refused` entry): it resolves at once, not consumed,
   * `refused` set to the error, whether or not it was tracked; [] if it had resolved.
   * @param {string} messageId @param {string} runId @param {Record<string, unknown>} error @returns {OutcomeRecord[]}
   */
  refuse(messageId: string, runId: string, error: Record<string, unknown>): OutcomeRecord[] {
    if (this._resolved.has(messageId)) return [];
    if (!this._runOf.has(messageId)) this._runOf.set(messageId, runId);
    this._pending.get(runId)?.delete(messageId);
    /** @type {OutcomeRecord} */
    const record: OutcomeRecord = Object.freeze({ messageId, runId, consumed: false, runTerminalReason: null, refused: { ...error } });
    this._resolved.set(messageId, record);
    return [record];
  }

  /** True once an input check refused the message. @param {string} messageId */
  refused(messageId: string) {
    const record = this._resolved.get(messageId);
    return record !== undefined && record.refused !== null;
  }

  /** The resolved outcome of a message; null while pending or unknown. @param {string} messageId */
  outcome(messageId: string) {
    return this._resolved.get(messageId) ?? null;
  }

  /** Ids of the Run's messages not resolved yet, in tracking order. @param {string} runId */
  pending(runId: string) {
    return [...(this._pending.get(runId) || [])];
  }

  /** True once a response of the message's Run has seen it. @param {string} messageId */
  consumed(messageId: string) {
    const runId = this._runOf.get(messageId);
    return runId !== undefined && (this._seen.get(runId)?.has(messageId) ?? false);
  }

  /** Every resolved outcome, in the order they resolved. */
  resolved() {
    return [...this._resolved.values()];
  }

  /** @param {string} messageId @param {string} runId @param {RunEndReason | null} reason @internal */
  _resolve(messageId: string, runId: string, reason: RunEndReason | null) {
    /** @type {OutcomeRecord} */
    const record: OutcomeRecord = Object.freeze({
      messageId,
      runId,
      consumed: this._seen.get(runId)?.has(messageId) ?? false,
      runTerminalReason: reason,
      refused: null,
    });
    this._resolved.set(messageId, record);
    return record;
  }
}

/**
 * The outcome of a queued message the relay refused with RUN_NOT_ACTIVE because its Run had ended
 * by the time it came. It was sent while the view still showed the Run running, or while offline.
 * It was never published and never seen, so it is not consumed with the Run's end reason
 * (`details.status`). Null for any other refusal (transport/outcomes.py `ended_before_stored`).
 * @param {string} messageId @param {string} runId @param {string} code @param {Record<string, unknown>} details
 * @returns {OutcomeRecord | null}
 */
export function endedBeforeStored(messageId: string, runId: string, code: string, details: Record<string, unknown>): OutcomeRecord | null {
  if (code !== RUN_NOT_ACTIVE || details.run_id !== runId) return null;
  const reason = typeof details.status === "string" ? endReason(details.status) : null;
  if (reason === null) return null;
  return Object.freeze({ messageId, runId, consumed: false, runTerminalReason: reason, refused: null });
}
