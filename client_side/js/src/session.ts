import type { ChunksOptions, ReplyChunk } from "./chunks.js";
import { replyChunks } from "./chunks.js";
import type { CancelDenial, ConnectOptions, ConnectionState, Entry, Intent, Interrupt, Multitask, OutcomeRecord, Refusal, Refused, RefusedMessageHandler, ThreadAccess, TreeEvent, UIMessage, PendingRequest } from "./types.js";
import { ABORTED, CANCEL_DENIED, CLOSE_CODES, CONNECTION_CLOSED, EPOCH_MISMATCH, MULTITASK_STRATEGIES, NOT_ATTACHED, PAYLOAD_TOO_LARGE, PROTOCOL_ERROR, PROTOCOL_VERSION, RATE_LIMITED, RUN_NOT_ACTIVE, RUN_NOT_FOUND, RunwireError, STORE_UNAVAILABLE, TERMINAL, TOKEN_EXPIRED, UNAUTHORIZED, VALIDATION_ERROR, backoff, isObject, newId, utf8Length, isTerminal } from "./errors.js";
import { checkRelayFrame } from "./frames.js";
import { connect } from "./index.js";
import { endedBeforeStored } from "./outcomes.js";
import { ClientRun, Deferred, Delivery, asMessage, denied, reused, writeOnlyError } from "./runs.js";
import { View } from "./view.js";
import { type ConnectionMethods, OPEN, connectionMethods } from "./connection.js";
import { PublishLane } from "./lane.js";

// -------------------------------------------------------------------------- session ---

/** How long a duplicate ack waits for its entry to reach the view (`_isOwn`), in ms. */
const OWN_WAIT_MS = 30_000;




/**
 * One session on a relay, seen and driven by a client: one self-healing WebSocket. Every time the
 * socket comes up it attaches (the first time for the newest page, afterwards from the newest
 * serial the view holds, with the epoch), then re-sends every request still waiting for a reply;
 * entry ids make the re-sends safe. Made by `connect()`. A write-only session (`subscribe:
 * false`) never attaches: see ConnectOptions.subscribe; without a view a prompt names no parent
 * and a reused message id cannot be told from a re-sent publish (give each message a fresh id).
 */
/** Session's connection methods live in connection.ts (internal). */
export interface Session extends ConnectionMethods {}

export class Session {
  /** @internal */
  _resets: any;
  /** @internal */
  _onOffline: () => void;
  /** @internal */
  _onOnline: () => void;
  /** @internal */
  _first: Deferred<Session>;
  /** @internal */
  _attachReq: number | null;
  /** @internal */
  _retryTimer: ReturnType<typeof setTimeout> | null;
  /** @internal */
  _stateCallbacks: Set<(state: ConnectionState) => void>;
  /** @internal */
  _newsAfter: number | null;
  /** Called the moment an input check refuses a queued message; see ConnectOptions. */
  onRefusedMessage: RefusedMessageHandler | null;
  /** @internal */
  _refusedMessages: Map<string, UIMessage>;
  /** @internal */
  _deliveries: Map<string, Delivery[]>;
  /** @internal */
  _laneWaiters: Set<() => void>;
  /** @internal */
  _lane: PublishLane;
  /** @internal */
  _pending: Map<number, PendingRequest>;
  /** @internal */
  _nextReq: number;
  /** @internal */
  _attempt: number;
  /** @internal */
  _connects: number;
  /** @internal */
  _maxFrameBytes: number;
  /** @internal */
  _defaultMultitask: Multitask | null;
  /** @internal */
  _epoch: string | null;
  /** @internal */
  _fatal: RunwireError | null;
  /** @internal */
  _closed: boolean;
  /** @internal */
  _ready: boolean;
  /** @internal */
  _ws: WebSocket | null;
  view: View;
  /** @internal */
  _WebSocket: { new(url: string | URL, protocols?: string | string[]): WebSocket; prototype: WebSocket; readonly CONNECTING: 0; readonly OPEN: 1; readonly CLOSING: 2; readonly CLOSED: 3; };
  /** @internal */
  _storeWait: number;
  /** @internal */
  _rateLimitWait: number;
  /** @internal */
  _openTimeout: number;
  /** @internal */
  _backoffMax: number;
  /** @internal */
  _backoffInitial: number;
  /** @internal */
  _refusal: RunwireError | null;
  /** @internal */
  _expired: number;
  /** @internal */
  _tries: number;
  /** @internal */
  _tokenProvider: (() => string | Promise<string>) | null;
  /** @internal */
  _token: string | null;
  clientId: string | null;
  historyLimit: number;
  agent: string;
  subscribe: boolean;
  sessionId: string;
  url: string;
  /** @param {string} url @param {string} sessionId @param {ConnectOptions} [options] */
  constructor(url: string, sessionId: string, options: ConnectOptions = {}) {
    const historyLimit = options.historyLimit ?? 100;
    if (!(historyLimit >= 1 && historyLimit <= 1000)) {
      throw new RunwireError(VALIDATION_ERROR, "historyLimit must be between 1 and 1000");
    }
    const subscribe = options.subscribe ?? true;
    if (typeof subscribe !== "boolean") throw new RunwireError(VALIDATION_ERROR, "subscribe must be a boolean");
    if (!subscribe && options.onRefusedMessage) {
      throw new RunwireError(
        VALIDATION_ERROR,
        "a session connected with subscribe: false never sees refusals: onRefusedMessage is not taken (a refused publish rejects with its error)",
      );
    }
    this.url = url;
    this.sessionId = sessionId;
    /** False for a write-only session (it never attaches). */
    this.subscribe = subscribe;
    this.agent = options.agent || "default";
    this.historyLimit = historyLimit;
    /** @type {string | null} The client id the relay stamps on this client's entries (known once connected). */
    this.clientId = options.clientId || null;
    this._token = options.token || null;
    this._tokenProvider = options.tokenProvider || null;
    this._tries = 0; // connects begun (a token is asked for before each but a first with one)
    this._expired = 0; // tokens refused as expired since the last welcome
    /** @type {RunwireError | null} The error frame a refused hello got. */ this._refusal = null;
    this._backoffInitial = options.backoffInitial ?? 50;
    this._backoffMax = options.backoffMax ?? 5000;
    this._openTimeout = options.openTimeout ?? 10000;
    this._rateLimitWait = options.rateLimitWait ?? 30000;
    this._storeWait = options.storeWait ?? 60000;
    this._WebSocket = options.WebSocket || globalThis.WebSocket;
    if (typeof this._WebSocket !== "function") {
      throw new RunwireError(VALIDATION_ERROR, "no WebSocket class: pass options.WebSocket");
    }
    this.view = new View(sessionId, (before, limit) => this._fetchOlder(before, limit));
    this.view._writeOnly = !subscribe;
    this.view._hooks.push((event: TreeEvent) => this._onEvent(event));
    /** @type {WebSocket | null} */ this._ws = null;
    this._ready = false;
    this._closed = false;
    /** @type {RunwireError | null} */ this._fatal = null;
    /** @type {string | null} */ this._epoch = null;
    this._resets = 0; // how many resets rebuilt the view
    /** @type {Multitask | null} The relay's default strategy (its welcome says). */ this._defaultMultitask = null;
    /** The largest frame the relay takes, in bytes of UTF-8 (its welcome says). */ this._maxFrameBytes = 1024 * 1024;
    this._connects = 0;
    this._attempt = 0;
    this._nextReq = 0;
    /** @type {Map<number, PendingRequest>} */ this._pending = new Map();
    /** The order of this session's publishes and their refusals (lane.ts). */
    this._lane = new PublishLane({ jitter: Math.random, rateLimitWait: this._rateLimitWait, storeWait: this._storeWait, second: 1000 });
    /** @type {Set<() => void>} Publishes waiting for their turn. */ this._laneWaiters = new Set();
    /** @type {Map<string, Delivery[]>} */ this._deliveries = new Map();
    /** @type {Map<string, UIMessage>} What this client sent that a check refused. */ this._refusedMessages = new Map();
    this.onRefusedMessage = options.onRefusedMessage || null;
    /** @type {number | null} Refusals up to this serial are history, not news. */ this._newsAfter = null;
    /** @type {Set<(state: ConnectionState) => void>} */ this._stateCallbacks = new Set();
    /** @type {ReturnType<typeof setTimeout> | null} */ this._retryTimer = null;
    /** @type {number | null} */ this._attachReq = null;
    /** @type {Deferred<Session>} */ this._first = new Deferred();
    this._onOnline = () => {
      if (this._retryTimer !== null && !this._closed) {
        clearTimeout(this._retryTimer);
        this._retryTimer = null;
        this._open();
      }
    };
    // The browser lost its network: the socket is as good as dead, but it can take minutes
    // (until TCP gives up) before it says so, and meanwhile the session would claim to be
    // connected. Drop it now: "disconnected" at once, retries with backoff, and "online"
    // reconnects at once, resuming from the newest serial (requests in flight are re-sent).
    this._onOffline = () => {
      const ws = this._ws;
      if (this._closed || ws === null || !this._first.settled) return;
      this._lost(null, null);
      try {
        ws.close(4000, "offline");
      } catch {
        // already closing
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
  onState(fn: (state: ConnectionState) => void): () => void {
    const wrapped = (/** @type {ConnectionState} */ s: ConnectionState) => fn(s);
    this._stateCallbacks.add(wrapped);
    return () => {
      this._stateCallbacks.delete(wrapped);
    };
  }

  /**
   * `on("state", fn)`: the connection's state changes (see `onState`).
   * @param {"state"} event @param {(state: ConnectionState) => void} fn @returns {() => void}
   */
  on(event: "state", fn: (state: ConnectionState) => void): () => void {
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
  async send(message: string | UIMessage, options: { multitask?: Multitask | null; parentId?: string | null; parentRunId?: string | null; threadAccess?: ThreadAccess | null; signal?: AbortSignal | null; } = {}): Promise<ClientRun> {
    const { multitask, parentRunId, threadAccess, signal } = options;
    let parentId = options.parentId ?? null;
    if (multitask !== undefined && multitask !== null && !MULTITASK_STRATEGIES.includes(multitask)) {
      throw new RunwireError(
        VALIDATION_ERROR,
        `unknown multitask strategy ${JSON.stringify(multitask)}; expected one of ${MULTITASK_STRATEGIES.join(", ")}`,
        { multitask },
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
    /** @type {Entry} */
    const entry: Entry = { kind: "message", id: msg.id, run_id: runId, intent: "prompt", agent: this.agent, message: msg };
    if (parentId !== null) entry.parent_id = parentId;
    if (multitask !== undefined && multitask !== null) entry.multitask = multitask;
    if (parentRunId !== undefined && parentRunId !== null) entry.parent_run_id = parentRunId;
    if (threadAccess !== undefined && threadAccess !== null) entry.thread_access = threadAccess;
    const ack = await this._publish(entry);
    if (ack.duplicate && this.subscribe && !(await this._isOwn(msg.id, runId, "prompt", ack.serial))) throw reused(msg.id, ack.serial);
    if (signal) {
      // Aborted while the prompt was being published: no "abort" event comes any more.
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
  async cancel(runId: string, options: { reason?: string | null; wait?: boolean; timeout?: number | null; } = {}): Promise<void> {
    const { reason, wait = false, timeout = 30000 } = options;
    if (wait && !this.subscribe) throw writeOnlyError(this.sessionId, "cancel({wait: true})");
    /** @type {Entry} */
    const entry: Entry = { kind: "cancel", id: newId(), run_id: runId };
    if (reason !== undefined && reason !== null) entry.reason = reason;
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
  async resume(runId: string, responses: Record<string, unknown>): Promise<void> {
    await this._publish({ kind: "interrupt", id: newId(), run_id: runId, status: "resumed", responses });
  }

  /** The oldest Run that waits on questions, with them; null if none. @returns {{runId: string, interrupts: Interrupt[]} | null} */
  pausedRun(): { runId: string; interrupts: Interrupt[]; } | null {
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
  async cancelPause(runId: string, options: { reason?: string | null; } = {}): Promise<void> {
    /** @type {Entry} */
    const entry: Entry = { kind: "interrupt", id: newId(), run_id: runId, status: "declined" };
    if (options.reason !== undefined && options.reason !== null) entry.reason = options.reason;
    await this._publish(entry);
  }

  /**
   * Wait until the Run ends or `timeout` ms pass; reject with CANCEL_DENIED if the cancel
   * `cancelId` is refused, with CONNECTION_CLOSED if the session closes first, with EPOCH_MISMATCH
   * if a reset after `resets` lost the Run.
   * @param {string} runId @param {string} cancelId @param {number | null} timeout @param {number} resets
   * @internal
   */
  async _settled(runId: string, cancelId: string, timeout: number | null, resets: number) {
    const view = this.view;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<null>((resolve) => {
      if (timeout !== null && timeout !== undefined && Number.isFinite(timeout)) timer = setTimeout(() => resolve(null), timeout);
    });
    // Given up at the timeout: the check leaves the view then.
    const settled = view._until<{ denial: CancelDenial | null } | null>(() => {
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
  _checkLost(runId: string, resets: number) {
    if (this._resets > resets && this.view.run(runId) === null) {
      throw new RunwireError(EPOCH_MISMATCH, "the relay lost the session's history; how the Run ended is unknown", { run_id: runId });
    }
  }

  /** A send's signal fired: cancel its Run unless it ended (failures are logged). @param {string} runId @internal */
  _cancelSoon(runId: string) {
    const info = this.subscribe ? this.view.run(runId) : null;
    if (this._closed || (info !== null && isTerminal(info.status))) return;
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
  chunks(options: ChunksOptions = {}): AsyncIterableIterator<ReplyChunk> {
    if (!this.subscribe) throw writeOnlyError(this.sessionId, "session.chunks()");
    const after = options.after === undefined ? this.view._newest : options.after;
    return replyChunks(this.view, null, { ...options, after });
  }

  /**
   * A handle on a Run the view knows (one this client or another one started). Throws
   * RunwireError(RUN_NOT_FOUND) if the view has not seen it.
   * @param {string} runId @returns {ClientRun}
   */
  run(runId: string): ClientRun {
    // Write-only: no view to check; the relay refuses what does not fit the Run.
    if (!this.subscribe) return new ClientRun(this, runId, null);
    if (this.view.run(runId) === null) {
      throw new RunwireError(RUN_NOT_FOUND, `the view has no run ${JSON.stringify(runId)}`, { run_id: runId });
    }
    // The tree's, not the active branch's: a fork above the Run may have left it on another
    // branch (and a queued Run's prompt is held out of the conversation).
    const prompt = this.view.tree.prompt(runId);
    return new ClientRun(this, runId, prompt ? prompt.message : null);
  }

  /** Close the connection; pending steering outcomes reject with CONNECTION_CLOSED. @returns {Promise<void>} */
  async close(): Promise<void> {
    if (this._closed) return;
    this._shutdown(new RunwireError(CONNECTION_CLOSED, "the session was closed"));
    const ws = this._ws;
    this._ws = null;
    if (ws !== null && ws.readyState <= OPEN) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, 1000);
        ws.addEventListener("close", () => {
          clearTimeout(timer);
          resolve(undefined);
        });
        try {
          ws.close(1000, "closed");
        } catch {
          clearTimeout(timer);
          resolve(undefined);
        }
      });
    }
  }

  // ----------------------------------------------------------------- internal --

  /** @param {number} before @param {number} limit @internal */
  async _fetchOlder(before: number, limit: number) {
    if (this._closed) throw new RunwireError(CONNECTION_CLOSED, "the session was closed");
    const reply = await this._call({ type: "history", session_id: this.sessionId, before, limit });
    if (reply.type !== "page") throw new RunwireError(PROTOCOL_ERROR, `expected a page, got ${reply.type}`);
    return { entries: reply.entries, hasOlder: Boolean(reply.has_older) };
  }

  /** @param {Delivery} delivery @param {Entry} entry @internal */
  _startDelivery(delivery: Delivery, entry: Entry) {
    if (this._closed) {
      delivery._fail(this._fatal || new RunwireError(CONNECTION_CLOSED, "the session was closed"));
      return;
    }
    const id = delivery.message.id;
    if (!this._deliveries.has(id)) this._deliveries.set(id, []);
    (this._deliveries.get(id) as Delivery[]).push(delivery);
    // Write-only: the outcome is told by entries this session never sees.
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
          // Steered again: its outcome may have resolved before this handle existed.
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
          // The Run ended before the relay got it: never published, never seen.
          delivery._published.reject(err);
          this._settle(delivery, late);
          return;
        }
        delivery._fail(err instanceof RunwireError ? err : new RunwireError("INTERNAL_ERROR", `publishing failed: ${err}`));
        this._forget(delivery);
      },
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
              message_id: delivery.message.id,
            }),
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
  async _isOwn(messageId: string, runId: string, intent: Intent, serial: number): Promise<boolean> {
    // The first try may be stored but not yet delivered: its ack was lost (in a Redis failover,
    // say) and the retry's ack came first. So wait until the view holds `serial` to tell.
    const told = () => {
      const vm = this.view.tree.message(messageId);
      if (vm !== null) return { own: vm.runId === runId && vm.intent === intent };
      const newest = this.view.newestSerial;
      return newest !== null && newest >= serial ? { own: false } : null;
    };
    let timer: ReturnType<typeof setTimeout> | undefined;
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
  _forget(delivery: Delivery) {
    const list = this._deliveries.get(delivery.message.id);
    if (list === undefined) return;
    const i = list.indexOf(delivery);
    if (i >= 0) list.splice(i, 1);
    if (!list.length) this._deliveries.delete(delivery.message.id);
  }

  /** @param {Delivery} delivery @param {OutcomeRecord} record @internal */
  _settle(delivery: Delivery, record: OutcomeRecord) {
    if (record.refused) this._refusedMessages.set(delivery.message.id, delivery.message);
    delivery._outcome.resolve({
      consumed: record.consumed,
      runTerminalReason: record.runTerminalReason,
      refused: record.refused ? RunwireError.fromWire(record.refused) : null,
    });
    this._forget(delivery);
  }

  /** The client's record of a refusal, with the message if this device has it. @param {Refusal} refusal @returns {Refused} @internal */
  _refused(refusal: Refusal): Refused {
    const vm = this.view.tree.message(refusal.messageId);
    const message = this._refusedMessages.get(refusal.messageId) ?? (vm !== null ? vm.message : null);
    return Object.freeze({
      messageId: refusal.messageId,
      runId: refusal.runId,
      intent: refusal.intent,
      error: RunwireError.fromWire(refusal.error),
      message,
    });
  }

  /** @param {TreeEvent} event @internal */
  _onEvent(event: TreeEvent) {
    if (event.kind !== "delivery") return;
    const record = event.outcome;
    for (const delivery of [...(this._deliveries.get(record.messageId) || [])]) {
      if (delivery.runId === record.runId) this._settle(delivery, record);
    }
    if (record.refused && this.onRefusedMessage) this._tellRefused(record.messageId);
  }

  /** Call `onRefusedMessage` for the refusal of `messageId` unless it is history. @param {string} messageId @internal */
  _tellRefused(messageId: string) {
    const refusal = this.view.tree.refusals().findLast((r: { messageId: string; }) => r.messageId === messageId);
    if (refusal === undefined || (this._newsAfter !== null && refusal.serial <= this._newsAfter)) return;
    try {
      this.onRefusedMessage?.(this._refused(refusal));
    } catch (err) {
      console.error("runwire: onRefusedMessage failed:", err);
    }
  }
}

Object.assign(Session.prototype, connectionMethods);
