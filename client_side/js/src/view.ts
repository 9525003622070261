import { IteratorQueue } from "./queue.js";
import type { Entry, RunInfo, TreeEvent, ViewMessage } from "./types.js";
import { CONNECTION_CLOSED, EVENT_KINDS, NOT_ATTACHED, RunwireError, VALIDATION_ERROR, isObject } from "./errors.js";
import { Fold } from "./fold.js";
import { connect } from "./index.js";
import { writeOnlyError } from "./runs.js";
import { ConversationTree } from "./tree.js";

// ----------------------------------------------------------------------------------- view ---

/**
 * A client's live picture of one session's conversation (`session.view`). Entries of each
 * `attached` and `deliver` frame fold into its tree in serial order; every event the tree reports
 * goes to the session's bookkeeping, then to the `on()` callbacks of its kind, then to every open
 * `events()` iterator. Serials the view holds are skipped, so a resume never shows a message twice.
 * The view of a write-only session (`connect(..., {subscribe: false})`) is never fed: every
 * reading method and event subscription throws RunwireError(NOT_ATTACHED) at once.
 */
export class View {
  /** @internal */
  _writeOnly: boolean;
  /** @internal */
  _closed: boolean;
  /** @internal */
  _older: Promise<number> | null;
  /** @internal */
  _changed: Set<() => void>;
  /** @internal */
  _hooks: ((event: TreeEvent) => void)[];
  /** Called with each entry the view folds live, once folded (internal: the chunk streams). @internal */
  _entryHooks: Set<(entry: Entry) => void>;
  /** @internal */
  _streams: Set<(event: TreeEvent) => void>;
  /** @internal */
  _callbacks: Record<string, Set<(event: any) => void>>;
  /** @internal */
  _hasOlder: boolean;
  /** @internal */
  _oldest: number | null;
  /** @internal */
  _newest: number | null;
  /** @internal */
  _tree: ConversationTree;
  /** @internal */
  _fetchOlder: (before: number, limit: number) => Promise<{ entries: any[]; hasOlder: boolean; }>;
  sessionId: string;
  /**
   * @param {string} sessionId
   * @param {(before: number, limit: number) => Promise<{entries: any[], hasOlder: boolean}>} fetchOlder
   */
  constructor(sessionId: string, fetchOlder: (before: number, limit: number) => Promise<{ entries: any[]; hasOlder: boolean; }>) {
    this.sessionId = sessionId;
    this._fetchOlder = fetchOlder;
    this._tree = new ConversationTree();
    /** @type {number | null} */ this._newest = null;
    /** @type {number | null} */ this._oldest = null;
    this._hasOlder = false;
    /** @type {Record<string, Set<(event: any) => void>>} */
    this._callbacks = { message: new Set(), run: new Set(), delivery: new Set() };
    /** @type {Set<(event: TreeEvent) => void>} */ this._streams = new Set();
    /** @type {((event: TreeEvent) => void)[]} */ this._hooks = [];
    this._entryHooks = new Set();
    /** @type {Set<() => void>} */ this._changed = new Set();
    /** @type {Promise<number> | null} */ this._older = null;
    this._closed = false;
    this._writeOnly = false;
  }

  /** False for the view of a write-only session: it is never fed, and reading it throws NOT_ATTACHED. */
  get readable() {
    return !this._writeOnly;
  }

  /** @param {string} what @internal */
  _checkReadable(what: string) {
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
  getMessages(): ViewMessage[] {
    this._checkReadable("view.getMessages()");
    return this._tree.messages();
  }

  /** Prompts of queued Runs (not yet in `getMessages()`), oldest first. @returns {ViewMessage[]} */
  waiting(): ViewMessage[] {
    this._checkReadable("view.waiting()");
    return this._tree.waiting();
  }

  /** Every Run the view knows, with its status. @returns {RunInfo[]} */
  runs(): RunInfo[] {
    this._checkReadable("view.runs()");
    return this._tree.runs();
  }

  /** One Run, or null if the view has not seen it. @param {string} runId */
  run(runId: string) {
    this._checkReadable("view.run()");
    return this._tree.run(runId);
  }

  /** True while the session has entries older than the view holds. */
  hasOlder() {
    this._checkReadable("view.hasOlder()");
    return this._hasOlder;
  }

  /** Ids of a message's alternatives (its siblings, itself included), oldest first. @param {string} messageId */
  branches(messageId: string) {
    this._checkReadable("view.branches()");
    return this._tree.branches(messageId);
  }

  /**
   * Show the branch through `messageId`; reports a "removed" event for each message it takes out of
   * view, then an "added" one for each it brings into view. @param {string} messageId
   */
  selectBranch(messageId: string) {
    this._checkReadable("view.selectBranch()");
    this._dispatch(this._tree.selectBranch(messageId));
  }

  /**
   * Fetch the page before the oldest entry the view holds and merge it; resolves to how many
   * entries the page had (0 when there is nothing older). Calls made meanwhile wait their turn.
   * @param {number} [limit] @returns {Promise<number>}
   */
  loadOlder(limit: number = 50): Promise<number> {
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
  on(event: "message" | "run" | "delivery", callback: (event: any) => void): () => void {
    this._checkReadable("view.on()");
    const set = this._callbacks[event];
    if (set === undefined) {
      throw new RunwireError(VALIDATION_ERROR, `unknown view event ${JSON.stringify(event)}; expected one of ${EVENT_KINDS.join(", ")}`);
    }
    const wrapped = (/** @type {any} */ e: any) => callback(e);
    set.add(wrapped);
    return () => {
      set.delete(wrapped);
    };
  }

  /**
   * An async iterator of every event from now on; ends when the session closes.
   * @returns {AsyncIterableIterator<TreeEvent>}
   */
  events(): AsyncIterableIterator<TreeEvent> {
    this._checkReadable("view.events()");
    const queue = new IteratorQueue<TreeEvent>(() => {
      this._streams.delete(push);
      this._changed.delete(onClose);
    });
    const push = (event: TreeEvent) => queue.push(event);
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
  _foldLive(entries: any[]) {
    for (const entry of entries) this._dispatch(this._foldOne(entry));
    this._notify(); // entries that raise no event (a refused cancel) still wake waiters
  }

  /** Fold one entry if it is newer than the view holds; the events it caused. @param {any} entry @returns {TreeEvent[]} @internal */
  _foldOne(entry: any): TreeEvent[] {
    const serial = isObject(entry) && Number.isInteger(entry.serial) ? entry.serial : null;
    if (serial !== null) {
      if (this._newest !== null && serial <= this._newest) return [];
      this._newest = serial;
      if (this._oldest === null) this._oldest = serial;
    }
    try {
      const events = this._tree.fold(entry);
      const folded = serial === null ? undefined : this._tree._entries.get(serial);
      if (folded !== undefined) for (const hook of [...this._entryHooks]) hook(folded);
      return events;
    } catch (err) {
      console.warn(`runwire: session ${this.sessionId}: skipping an entry the view cannot read:`, err);
      return [];
    }
  }

  /** A first attach: the newest page. @param {any[]} entries @param {number} head @param {boolean} hasOlder @internal */
  _attached(entries: any[], head: number, hasOlder: boolean) {
    this._hasOlder = hasOlder;
    this._foldLive(entries);
    if (this._newest === null) this._newest = head;
  }

  /** A resume: everything after the newest serial the view held. @param {any[]} entries @param {number} head @internal */
  _resumed(entries: any[], head: number) {
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
  _reset(entries: any[], head: number, hasOlder: boolean) {
    const old = this._tree;
    this._tree = new ConversationTree();
    this._newest = null;
    this._oldest = null;
    this._hasOlder = hasOlder;
    /** @type {TreeEvent[]} */
    const events: TreeEvent[] = [];
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
  _dispatch(events: TreeEvent[]) {
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
  _until<T>(predicate: () => T | null | undefined | false, giveUp: Promise<unknown> | null = null): Promise<T> {
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
          if (this._changed.delete(check)) resolve((null as any));
        });
      }
      check();
    });
  }
}
