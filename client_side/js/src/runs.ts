import type { ChunksOptions, ReplyChunk } from "./chunks.js";
import { replyChunks } from "./chunks.js";
import type { CancelDenial, Outcome, Published, QueuedIntent, Refused, RunResult, RunStatus, UIMessage } from "./types.js";
import { count, validateMessage } from "./entries.js";
import { CANCEL_DENIED, CONNECTION_CLOSED, EPOCH_MISMATCH, NOT_ATTACHED, RUN_NOT_ACTIVE, RUN_NOT_FOUND, RunwireError, TERMINAL, UNAUTHORIZED, VALIDATION_ERROR, endReason, isObject, userMessage, isTerminal } from "./errors.js";
import { Session } from "./session.js";

// ---------------------------------------------------------------------------- runs ---


/** A promise with its resolve and reject outside (internal). */
export class Deferred<T> {
  promise: Promise<T>;
  error: unknown;
  value: T | undefined;
  settled: boolean;
  reject: (error: unknown) => void;
  resolve: (value: T) => void;
  constructor() {
    /** @type {(value: T) => void} */ this.resolve = (): void => {};
    /** @type {(error: unknown) => void} */ this.reject = (): void => {};
    this.settled = false;
    /** @type {T | undefined} */ this.value = undefined;
    /** @type {unknown} */ this.error = undefined;
    /** @type {Promise<T>} */
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = (v: T) => {
        if (this.settled) return;
        this.settled = true;
        this.value = v;
        resolve(v);
      };
      this.reject = (e: unknown) => {
        if (this.settled) return;
        this.settled = true;
        this.error = e;
        reject(e);
      };
    });
    // Nobody has to await it: a rejection left alone is not an "unhandled rejection".
    this.promise.catch(() => {});
  }
}

/** What `run.steer()`, `followUp()` and `inject()` return: the message and two promises. */
export class Delivery {
  outcome: Promise<Outcome>;
  published: Promise<Published>;
  /** @internal */
  _outcome: Deferred<Outcome>;
  /** @internal */
  _published: Deferred<Published>;
  intent: QueuedIntent;
  runId: string;
  message: UIMessage;
  /** @param {UIMessage} message @param {string} runId @param {QueuedIntent} [intent] */
  constructor(message: UIMessage, runId: string, intent: QueuedIntent = "steer") {
    this.message = message;
    this.runId = runId;
    /** @type {QueuedIntent} */
    this.intent = intent;
    /** @type {Deferred<Published>} */ this._published = new Deferred();
    /** @type {Deferred<Outcome>} */ this._outcome = new Deferred();
    /** Resolves to `{serial}` once the relay sequenced the message. @type {Promise<Published>} */
    this.published = this._published.promise;
    /** Resolves to `{consumed, runTerminalReason, refused}` (see the protocol's outcomes). @type {Promise<Outcome>} */
    this.outcome = this._outcome.promise;
  }

  /** @param {RunwireError} error @internal */
  _fail(error: RunwireError) {
    this._published.reject(error);
    this._outcome.reject(error);
  }
}

/**
 * A handle on one Run of a Session (made by `session.send` or `session.run`). `queued` and the
 * results count only messages sent through this handle; `refused` lists every refusal of the Run.
 */
export class ClientRun {
  /** @internal */
  _resets: any;
  /** @internal */
  _deliveries: Delivery[];
  prompt: UIMessage | null;
  runId: string;
  /** @internal */
  _session: Session;
  /** @param {Session} session @param {string} runId @param {UIMessage | null} prompt */
  constructor(session: Session, runId: string, prompt: UIMessage | null) {
    this._session = session;
    this.runId = runId;
    this.prompt = prompt;
    /** @type {Delivery[]} */ this._deliveries = [];
    this._resets = session._resets; // a reset after this one that loses the Run fails its waits
  }

  /**
   * The Run's status in the view: "queued" while it waits its turn, "pending" until the agent
   * starts it, and so on. @returns {RunStatus}
   */
  get status(): RunStatus {
    this._checkReadable("ClientRun.status");
    return this._session.view.run(this.runId)?.status ?? "pending";
  }

  /**
   * The raw UI message stream chunks of this Run's replies, in order: those the view holds
   * (after `options.after`, a serial), then live ones; ends once the Run ended, the session
   * closed or `options.signal` aborted. A reconnect neither skips nor repeats a chunk.
   * Throws NOT_ATTACHED on a write-only session.
   */
  chunks(options: ChunksOptions = {}): AsyncIterableIterator<ReplyChunk> {
    this._checkReadable("ClientRun.chunks()");
    return replyChunks(this._session.view, this.runId, options);
  }

  /** @param {string} what @internal */
  _checkReadable(what: string) {
    if (!this._session.subscribe) throw writeOnlyError(this._session.sessionId, what);
  }

  /**
   * Messages sent through this handle that wait: not taken in, not refused, the Run not ended (one
   * still being published waits too). A Run that ends "error" leaves its untaken messages here.
   * @returns {UIMessage[]}
   */
  get queued(): UIMessage[] {
    this._checkReadable("ClientRun.queued");
    return this._untaken()
      .filter((d) => !d._outcome.settled || d._outcome.value?.runTerminalReason === "error")
      .map((d) => d.message);
  }

  /** Queued messages of this Run an input check refused, oldest first, with the error. @returns {Refused[]} */
  get refused(): Refused[] {
    this._checkReadable("ClientRun.refused");
    return this._session.view.tree.refusals(this.runId).map((r) => this._session._refused(r));
  }

  /**
   * Steer this Run: the message joins its current turn at the next model call. Returns
   * `{published, outcome}` at once; when the view shows the Run ended, both reject with
   * RUN_NOT_ACTIVE at once and nothing is published.
   * @param {string | UIMessage} message @returns {Delivery}
   */
  steer(message: string | UIMessage): Delivery {
    return this._queue("steer", message);
  }

  /**
   * Queue a follow-up: once the current answer is finished it starts a new turn of the Run (with
   * the iteration budget afresh). Returns at once, like `steer`.
   * @param {string | UIMessage} message @returns {Delivery}
   */
  followUp(message: string | UIMessage): Delivery {
    return this._queue("follow_up", message);
  }

  /**
   * Inject context: it joins the conversation at the next model call without causing one (saved
   * at the Run's end if no call was left). Returns at once, like `steer`.
   * @param {string | UIMessage} message @returns {Delivery}
   */
  inject(message: string | UIMessage): Delivery {
    return this._queue("inject", message);
  }

  /**
   * Publish a queued message (`metadata.queued` set to its kind) in the background.
   * @param {QueuedIntent} intent @param {string | UIMessage} message @returns {Delivery}
   * @internal
   */
  _queue(intent: QueuedIntent, message: string | UIMessage): Delivery {
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
          status: info.status,
        }),
      );
      return delivery;
    }
    session._startDelivery(delivery, { kind: "message", id: msg.id, run_id: this.runId, intent, message: msg });
    return delivery;
  }

  /** Deliveries that went out (or are going out), were not refused and not taken in. @returns {Delivery[]} @internal */
  _untaken(): Delivery[] {
    const book = this._session.view.tree.outcomes;
    return this._deliveries.filter((d) => {
      const outcome = d._outcome;
      if (outcome.settled && (outcome.error !== undefined || outcome.value?.refused)) return false;
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
  async result(): Promise<RunResult> {
    this._checkReadable("ClientRun.result()");
    const info = await this._session.view._until(() => {
      const i = this._session.view.run(this.runId);
      if (i === null) this._session._checkLost(this.runId, this._resets);
      return i !== null && (isTerminal(i.status) || i.status === "suspended") ? i : null;
    });
    const undelivered =
      info.status === "error"
        ? []
        : this._untaken()
            .filter((d) => d._outcome.settled || info.status === "suspended")
            .map((d) => d.message);
    const ended = isTerminal(info.status) && info.error ? RunwireError.fromWire(info.error) : null;
    return {
      status: info.status,
      endReason: info.endReason,
      undelivered,
      interrupts: this._session.view.tree.interrupts(this.runId),
      error: ended,
      reason: ended && info.status === "cancelled" ? ended.text : null,
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
  async cancel(options: { reason?: string; wait?: boolean; timeout?: number | null; } = {}): Promise<UIMessage[]> {
    const { reason, wait = true, timeout = 30000 } = options;
    await this._session.cancel(this.runId, { reason, wait, timeout });
    // Write-only: which messages the Run took cannot be seen from here.
    if (!this._session.subscribe) return [];
    return this._untaken().map((d) => d.message);
  }
}

/** @param {string | UIMessage} message @returns {UIMessage} */
export function asMessage(message: string | UIMessage): UIMessage {
  if (typeof message === "string") return userMessage(message);
  if (isObject(message)) return validateMessage(message, "message");
  throw new RunwireError(VALIDATION_ERROR, `a message is a string or a UIMessage, not ${typeof message}`);
}

/** The error a refused cancel raises. @param {CancelDenial} denial */
export function denied(denial: CancelDenial) {
  return new RunwireError(CANCEL_DENIED, denial.reason || "the agent refused the cancel", {
    run_id: denial.runId,
    cancel_id: denial.cancelId,
    client_id: denial.clientId,
    user_id: denial.userId,
  });
}

/**
 * The NOT_ATTACHED error for reading a session connected with `subscribe: false`.
 * @param {string} sessionId @param {string} what
 */
export function writeOnlyError(sessionId: string, what: string) {
  return new RunwireError(
    NOT_ATTACHED,
    `${what} reads session ${JSON.stringify(sessionId)}, which was connected with subscribe: false (write-only: it publishes without attaching and never sees the session's entries)`,
    { session_id: sessionId, subscribe: false },
  );
}

/** @param {string} messageId @param {number} [serial] */
export function reused(messageId: string, serial?: number) {
  /** @type {Record<string, unknown>} */
  const details: Record<string, unknown> = { message_id: messageId };
  if (serial !== undefined) details.serial = serial;
  return new RunwireError(
    VALIDATION_ERROR,
    `message id ${JSON.stringify(messageId)} is already used in this session; send a new message`,
    details,
  );
}
