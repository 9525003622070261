import type { CancelDenial, Entry, Interrupt, MessageEvent, Refusal, Refused, ResponseState, RunEvent, RunInfo, TreeEvent, TreeNode, ViewMessage } from "./types.js";
import { decodeEntry } from "./entries.js";
import { RunwireError, VALIDATION_ERROR, deepEqual } from "./errors.js";
import { Fold, replacingCloses } from "./fold.js";

export class ConversationTree {
  /** @internal */
  _pathPos: Map<string, number>;
  /** @internal */
  _path: string[];
  /** @internal */
  _pathOf: Fold | null;
  /** @internal */
  _state: Fold;
  /** @internal */
  _reported: Set<string>;
  /** @internal */
  _selected: Map<string | null, string>;
  /** @internal */
  _newest: number | null;
  /** @internal */
  _oldest: number | null;
  /** @internal */
  _entries: Map<number, Entry>;
  constructor() {
    /** @type {Map<number, Entry>} */ this._entries = new Map();
    /** @type {number | null} */ this._oldest = null;
    /** @type {number | null} */ this._newest = null;
    /** @type {Map<string | null, string>} */ this._selected = new Map();
    /** @type {Set<string>} */ this._reported = new Set();
    this._state = new Fold(this._selected);
    // The active path (refused messages included) and each id's place on it, kept for _pathOf;
    // live folds move it along (_follow), anything else computes it again.
    /** @type {Fold | null} */ this._pathOf = null;
    /** @type {string[]} */ this._path = [];
    /** @type {Map<string, number>} */ this._pathPos = new Map();
  }

  /** Fold one stamped entry; the events it caused ([] for a serial already folded). @param {any} entry */
  fold(entry: any) {
    return this.foldOlder([entry]);
  }

  /**
   * Fold several stamped entries, in any order (a history page); the events they caused.
   * @param {Iterable<any>} entries @returns {TreeEvent[]}
   */
  foldOlder(entries: Iterable<any>): TreeEvent[] {
    /** @type {Map<number, Entry>} */
    const fresh: Map<number, Entry> = new Map();
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
    /** @type {TreeEvent[]} */
    const events: TreeEvent[] = [];
    for (const s of serials) {
      this._syncPath();
      events.push(...this._follow(this._state.apply((fresh.get(s) as Entry))));
    }
    return this._once(events);
  }

  /** @returns {TreeEvent[]} @internal */
  _rebuild(): TreeEvent[] {
    const old = this._state;
    const shown = this._shown();
    const before = new Set(shown.path);
    const fresh = new Fold(null);
    const serials = [...this._entries.keys()].sort((a, b) => a - b);
    // A close carrying its message replaces the whole content, so appends before it cannot
    // change the result (a close without one keeps what they built).
    const closedAt = replacingCloses(serials.map((s) => (this._entries.get(s) as Entry)));
    for (const s of serials) {
      const e = (this._entries.get(s) as Entry);
      if (e.kind === "response_append" && (closedAt.get(e.message_id) ?? -1) > s) continue;
      fresh.apply(e);
    }
    fresh.selections = this._selected;
    this._state = fresh;
    for (const [key, child] of [...this._selected]) {
      const node = fresh.nodes.get(child);
      if (node === undefined || node.view.parentId !== key) this._selected.delete(key);
    }
    /** @type {TreeEvent[]} */
    const events: TreeEvent[] = [];
    /** @type {Set<string>} */
    const reported: Set<string> = new Set();
    for (const [mid, node] of fresh.nodes) {
      const was = old.nodes.get(mid);
      if (was === undefined || !deepEqual(was.view, node.view)) {
        events.push({ kind: "message", message: node.view, op: was === undefined ? "added" : "updated", shown: this._shows(mid) });
        reported.add(mid);
      }
    }
    events.push(...this._removed(shown.path, shown.views));
    for (const mid of this._shownIds()) {
      if (!before.has(mid) && !reported.has(mid)) {
        events.push({ kind: "message", message: (fresh.nodes.get(mid) as TreeNode).view, op: "added", shown: true });
      }
    }
    for (const [runId, run] of fresh.runs) {
      const was = old.runs.get(runId);
      if (was === undefined || !deepEqual(was.info, run.info)) events.push({ kind: "run", run: run.info, op: "changed" });
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
  removedSince(before: ConversationTree): TreeEvent[] {
    const shown = before._shown();
    /** @type {TreeEvent[]} */
    const events: TreeEvent[] = this._removed(shown.path, shown.views);
    for (const info of before.runs()) {
      if (this.run(info.runId) === null) events.push({ kind: "run", run: info, op: "removed" });
    }
    return events;
  }

  /** Ids of `messages()`, and every node's view (what `_removed` compares). @internal */
  _shown() {
    /** @type {Map<string, ViewMessage>} */
    const views: Map<string, ViewMessage> = new Map();
    for (const [mid, node] of this._state.nodes) views.set(mid, node.view);
    return { path: this.messages().map((vm) => vm.message.id), views };
  }

  /**
   * "removed" MessageEvents for what `path` / `views` showed and this tree does not.
   * @param {string[]} path @param {Map<string, ViewMessage>} views @returns {TreeEvent[]}
   * @internal
   */
  _removed(path: string[], views: Map<string, ViewMessage>): TreeEvent[] {
    const nodes = this._state.nodes;
    const onPath = new Set(path);
    const gone = path.filter((mid) => !this._shows(mid));
    for (const mid of views.keys()) if (!onPath.has(mid) && !nodes.has(mid)) gone.push(mid);
    return gone.map((mid) => ({
      kind: "message",
      message: this.message(mid) ?? (views.get(mid) as ViewMessage),
      op: "removed",
      shown: false,
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
  _shownIds(): string[] {
    this._syncPath();
    const nodes = this._state.nodes;
    return this._path.filter((mid) => !((nodes.get(mid) as TreeNode).view.refused));
  }

  /** Whether `messages()` holds the message. @param {string} messageId @internal */
  _shows(messageId: string) {
    this._syncPath();
    const node = this._state.nodes.get(messageId);
    return node !== undefined && !node.view.refused && this._pathPos.has(messageId);
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
  _follow(events: TreeEvent[]): TreeEvent[] {
    const state = this._state;
    const nodes = state.nodes;
    const path = this._path;
    const pos = this._pathPos;
    const added = new Set(state.added.map(([, mid]) => mid));
    /** @type {Map<string, number>} */
    const gone: Map<string, number> = new Map();
    for (const [parent, mid] of state.added) {
      let cut;
      if (parent === null) cut = 0;
      else if (pos.has(parent)) cut = (pos.get(parent) as number) + 1;
      else continue; // under a node off the active path: it is off it too
      for (let at = cut; at < path.length; at++) {
        const dropped = path[at];
        pos.delete(dropped);
        if (!added.has(dropped) && !((nodes.get(dropped) as TreeNode).view.refused)) gone.set(dropped, at);
      }
      path.length = cut;
      pos.set(mid, path.length);
      path.push(mid);
    }
    for (const mid of state.refusedNow) {
      if (pos.has(mid) && !added.has(mid) && !gone.has(mid)) gone.set(mid, (pos.get(mid) as number));
    }
    state.added.length = 0;
    state.refusedNow.length = 0;
    for (const e of events) if (e.kind === "message") e.shown = this._shows(e.message.message.id);
    if (gone.size === 0) return events;
    /** @type {TreeEvent[]} */
    const moved: TreeEvent[] = [...gone.entries()]
      .sort((a, b) => a[1] - b[1])
      .map(([mid]) => ({ kind: "message", message: (nodes.get(mid) as TreeNode).view, op: "removed", shown: false }));
    let at = events.findIndex((e) => e.kind === "delivery");
    if (at < 0) at = events.length;
    return [...events.slice(0, at), ...moved, ...events.slice(at)];
  }

  /** @param {TreeEvent[]} events @returns {TreeEvent[]} @internal */
  _once(events: TreeEvent[]): TreeEvent[] {
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
  messages(tail: string[] = []): ViewMessage[] {
    const nodes = this._state.nodes;
    const path = this._state.path().filter((mid) => !((nodes.get(mid) as TreeNode).view.refused));
    const view = (/** @type {string} */ mid: string) => (nodes.get(mid) as TreeNode).view;
    if (!tail.length) return path.map(view);
    const onPath = new Set(path);
    const last = [...new Set(tail)].filter((mid) => onPath.has(mid));
    const moved = new Set(last);
    return [...path.filter((mid) => !moved.has(mid)).map(view), ...last.map(view)];
  }

  /** Any message of the tree (on the active branch or not, or a held prompt), by id. @param {string} messageId */
  message(messageId: string) {
    return this._state.nodes.get(messageId)?.view ?? this._state.held.get(messageId) ?? null;
  }

  /** Prompts of queued Runs, not yet in the conversation, oldest first. @returns {ViewMessage[]} */
  waiting(): ViewMessage[] {
    const held = this._state.held;
    /** @type {ViewMessage[]} */
    const out: ViewMessage[] = [];
    for (const run of this._state.runs.values()) {
      const view = run.held === null ? undefined : held.get(run.held.message.id);
      if (view !== undefined) out.push(view);
    }
    return out;
  }

  /** Ids of the message's siblings, itself included, in serial order. @param {string} messageId */
  branches(messageId: string) {
    const node = this._state.nodes.get(messageId);
    if (node === undefined) return [];
    const parent = node.view.parentId;
    return [...(parent === null ? this._state.roots : (this._state.nodes.get(parent) as TreeNode).children)];
  }

  /**
   * Make the path through `messageId` active (a local choice). Returns a "removed" event for each
   * message it took off `messages()` (in the order they showed), then an "added" one for each it
   * brought on (in path order); [] for an unknown id.
   * @param {string} messageId @returns {MessageEvent[]}
   */
  selectBranch(messageId: string): MessageEvent[] {
    const nodes = this._state.nodes;
    if (!nodes.has(messageId)) return [];
    const before = this._shownIds();
    let current = messageId;
    for (;;) {
      const parent = (nodes.get(current) as TreeNode).view.parentId;
      this._selected.set(parent, current);
      if (parent === null) break;
      current = parent;
    }
    this._pathOf = null;
    const after = this._shownIds();
    const shown = new Set(after);
    const known = new Set(before);
    /** @type {MessageEvent[]} */
    const events: MessageEvent[] = before.filter((mid) => !shown.has(mid)).map((mid) => ({ kind: "message", message: (nodes.get(mid) as TreeNode).view, op: "removed", shown: false }));
    for (const mid of after) {
      if (!known.has(mid)) events.push({ kind: "message", message: (nodes.get(mid) as TreeNode).view, op: "added", shown: true });
    }
    return events;
  }

  /** Every Run, in order of creation. @returns {RunInfo[]} */
  runs(): RunInfo[] {
    return [...this._state.runs.values()].map((r) => r.info);
  }

  /** One Run's snapshot, null if the tree has not seen it. @param {string} runId */
  run(runId: string) {
    return this._state.runs.get(runId)?.info ?? null;
  }

  /** True once a cancel entry for the Run was folded (and no refusal came after it). @param {string} runId */
  cancelRequested(runId: string) {
    return this._state.runs.get(runId)?.cancelRequested ?? false;
  }

  /** The agent's refusal of the cancel entry `cancelId`, if it refused. @param {string} cancelId @returns {CancelDenial | null} */
  cancelDenial(cancelId: string): CancelDenial | null {
    return this._state.denials.get(cancelId) ?? null;
  }

  /** Every refused cancel of the Run, in serial order. @param {string} runId @returns {CancelDenial[]} */
  cancelDenials(runId: string): CancelDenial[] {
    return [...(this._state.runs.get(runId)?.denials ?? [])];
  }

  /** Steer, follow-up and inject messages aimed at the Run, in serial order (refused ones left out). @param {string} runId */
  inputs(runId: string) {
    const run = this._state.runs.get(runId);
    if (run === undefined) return [];
    /** @type {ViewMessage[]} */
    const out: ViewMessage[] = [];
    for (const mid of run.inputs) {
      const vm = this.message(mid);
      if (vm !== null && !vm.refused) out.push(vm);
    }
    return out;
  }

  /** The prompt that started the Run, if the tree holds it (held while queued). @param {string} runId */
  prompt(runId: string) {
    const run = this._state.runs.get(runId);
    if (run === undefined || run.promptId === null) return null;
    return this.message(run.promptId);
  }

  /** The Run's responses in the order they opened, with their state and `seen`. @param {string} runId @returns {ResponseState[]} */
  responses(runId: string): ResponseState[] {
    const run = this._state.runs.get(runId);
    if (run === undefined) return [];
    const nodes = this._state.nodes;
    return [...run.responses].map(([mid, seen]) => {
      const node = (nodes.get(mid) as TreeNode);
      return Object.freeze({ view: node.view, closed: node.closed, seen: [...seen] });
    });
  }

  /** Refused messages (of one Run, or all), in serial order. @param {string | null} [runId] @returns {Refusal[]} */
  refusals(runId: string | null = null): Refusal[] {
    return [...this._state.refusals.values()].filter((r) => runId === null || r.runId === runId);
  }

  /** Every entry the tree holds, in serial order (internal: the chunk streams start from them). @internal */
  _held(): Entry[] {
    return [...this._entries.keys()].sort((a, b) => a - b).map((s) => this._entries.get(s) as Entry);
  }

  /** The latest `checkpoint` entry of a Run, if the tree holds one. @param {string} runId @returns {Entry | null} */
  checkpoint(runId: string): Entry | null {
    return this._state.runs.get(runId)?.checkpoint ?? null;
  }

  /**
   * The questions a suspended Run waits on (none once answered, declined or moved on).
   * @param {string} runId @returns {Interrupt[]}
   */
  interrupts(runId: string): Interrupt[] {
    const run = this._state.runs.get(runId);
    if (!run || run.info.status !== "suspended" || run.declined) return [];
    return run.questions.filter((q: { id: any; }) => !run.answers.has(q.id));
  }

  /** Steer messages aimed at the Run, in serial order. @param {string} runId */
  steering(runId: string) {
    return this.inputs(runId).filter((vm) => vm.intent === "steer");
  }

  /** Every message id the Run's responses listed as seen. @param {string} runId @returns {Set<string>} */
  seen(runId: string): Set<string> {
    return new Set(this._state.runs.get(runId)?.seen ?? []);
  }

  /** The outcome book (read it; the tree feeds it). */
  get outcomes() {
    return this._state.book;
  }

  /** A steering message's resolved outcome; null while pending or unknown. @param {string} messageId */
  outcome(messageId: string) {
    return this._state.book.outcome(messageId);
  }

  /** Ids of the Run's steering messages whose outcome is not resolved yet. @param {string} runId */
  pending(runId: string) {
    return this._state.book.pending(runId);
  }
}
