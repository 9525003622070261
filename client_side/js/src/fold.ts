import type { CancelDenial, DataPart, Entry, Intent, Part, ReasoningPart, Refusal, RunInfo, SourceDocumentPart, TextPart, ToolCallPart, TreeEvent, TreeNode, TreeRun, UIMessage, ViewMessage } from "./types.js";
import { RunwireError, TERMINAL, VALIDATION_ERROR, deepEqual, endReason, isTerminal } from "./errors.js";
import { OutcomeBook } from "./outcomes.js";

// ---------------------------------------------------------------------- conversation tree ---


/** @param {ViewMessage} view @returns {ViewMessage} */
export const freezeView = (view: ViewMessage): ViewMessage => Object.freeze(view);
/**
 * A response's message once close `e` closed it (`current`: the content folded so far).
 * The carried message replaces the content (keeping id `message_id`); a close without one keeps
 * `current`. The close's `metadata`, if given, replaces the message's metadata either way.
 * @param {UIMessage} current @param {any} e @returns {UIMessage}
 */
export function closedMessage(current: UIMessage, e: any): UIMessage {
  let message = e.message ?? current;
  if (message.id !== e.message_id) message = { ...message, id: e.message_id };
  if (e.metadata !== undefined) message = { ...message, metadata: { ...e.metadata } };
  return message;
}

/**
 * The serial of each response's first close, for responses whose first close carries a message:
 * only the first close takes effect, and one carrying the message replaces the appends before it.
 * @param {Entry[]} entries in serial order @returns {Map<string, number>}
 */
export function replacingCloses(entries: Entry[]): Map<string, number> {
  /** @type {Map<string, any>} */
  const first: Map<string, any> = new Map();
  for (const e of entries) if (e.kind === "response_close" && !first.has(e.message_id)) first.set(e.message_id, e);
  /** @type {Map<string, number>} */
  const out: Map<string, number> = new Map();
  for (const [mid, e] of first) if (e.message !== undefined) out.set(mid, e.serial);
  return out;
}

/** A held (queued) message entry's view. @param {Entry} e @returns {ViewMessage} */
export const heldView = (e: Entry): ViewMessage => freezeView({ message: e.message, runId: e.run_id, serial: e.serial, parentId: e.parent_id, intent: e.intent, refused: false });
/**
 * A steer / follow-up / inject gets `metadata.queued` set to its intent (unless the sender set it).
 * @param {Entry} e @returns {Entry}
 */
export function markedQueued(e: Entry): Entry {
  if (e.intent === "prompt" || "queued" in e.message.metadata) return e;
  return { ...e, message: { ...e.message, metadata: { ...e.message.metadata, queued: e.intent } } };
}
/** @param {RunInfo} info @returns {RunInfo} */
export const freezeRun = (info: RunInfo): RunInfo => Object.freeze(info);

/** Everything derived from entries; rebuilt from scratch when older entries arrive. */
export class Fold {
  refusedNow: string[];
  added: [string | null, string][];
  refusals: Map<string, Refusal>;
  denials: Map<string, CancelDenial>;
  held: Map<string, ViewMessage>;
  book: OutcomeBook;
  runs: Map<string, TreeRun>;
  latest: Map<string, string>;
  spinePos: Map<string, number>;
  spine: string[];
  roots: string[];
  nodes: Map<string, TreeNode>;
  selections: Map<string | null, string> | null;
  /** @param {Map<string | null, string> | null} selections */
  constructor(selections: Map<string | null, string> | null) {
    this.selections = selections; // null while rebuilding: only live folds move them
    /** @type {Map<string, TreeNode>} */ this.nodes = new Map();
    /** @type {string[]} */ this.roots = [];
    /** @type {string[]} */ this.spine = []; // the default path (newest child at each node)
    /** @type {Map<string, number>} */ this.spinePos = new Map();
    /** @type {Map<string, string>} */ this.latest = new Map(); // run id -> id of its newest node
    /** @type {Map<string, TreeRun>} */ this.runs = new Map();
    this.book = new OutcomeBook();
    /** @type {Map<string, ViewMessage>} */ this.held = new Map(); // queued prompts by message id (kept once dropped)
    /** @type {Map<string, CancelDenial>} */ this.denials = new Map();
    /** @type {Map<string, Refusal>} */ this.refusals = new Map();
    // What a live fold changed that may move path(), for the tree to follow (it clears them):
    // [parent, id] of each node added, ids of nodes refused.
    /** @type {[string | null, string][]} */ this.added = [];
    /** @type {string[]} */ this.refusedNow = [];
  }

  /** Fold one entry (the newest so far); the events it caused. @param {Entry} e @returns {TreeEvent[]} */
  apply(e: Entry): TreeEvent[] {
    if (e.kind === "message") e = markedQueued(e);
    /** @type {TreeEvent[]} */
    const events: TreeEvent[] = [];
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
            const node = i
              ? this._add(waiting.message, waiting.run_id, waiting.serial ?? 0, waiting.parent_id, waiting.intent, false)
              : this._place(waiting);
            this.held.delete(waiting.message.id);
            if (this.refusals.has(waiting.message.id)) node.view = freezeView({ ...node.view, refused: true });
            events.push({ kind: "message", message: node.view, op: "added" } as TreeEvent);
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
        // Aimed at a queued Run: it waits with its prompt (its outcome is tracked at once).
        run.heldInputs.push(e);
        this.held.set(mid, heldView(e));
        run.inputs.push(mid);
        for (const r of this.book.track(mid, e.run_id)) events.push({ kind: "delivery", outcome: r });
        return events;
      } else {
        node = this._add(e.message, e.run_id, e.serial, e.parent_id, e.intent, false);
      }
      events.push({ kind: "message", message: node.view, op: "added" } as TreeEvent);
      if (e.intent !== "prompt") {
        run.inputs.push(mid);
        for (const r of this.book.track(mid, e.run_id)) events.push({ kind: "delivery", outcome: r });
      }
    } else if (e.kind === "cancel") {
      run.cancels.add(e.id);
      run.cancelRequested = true;
    } else if (e.kind === "cancel_denied") {
      // Answers the cancel it names (all of them when it names none): another device's
      // cancel may still stand.
      if (e.cancel_id == null) run.cancels.clear();
      else run.cancels.delete(e.cancel_id);
      run.cancelRequested = run.cancels.size > 0;
      /** @type {CancelDenial} */
      const denial: CancelDenial = Object.freeze({
        runId: e.run_id,
        cancelId: e.cancel_id,
        serial: e.serial,
        reason: e.reason,
        clientId: e.client_id,
        userId: e.user_id,
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
      if (existing === undefined) {
        // The id of a queued message, held out of the conversation, adds no node either: the
        // message takes its place when its Run's turn comes.
        if (!this.held.has(e.message_id)) {
          /** @type {UIMessage} */
          const message: UIMessage = { id: e.message_id, role: "assistant", parts: [], metadata: { ...e.metadata } };
          const node = this._add(message, e.run_id, e.serial, e.parent_id, null, true);
          run.responses.set(e.message_id, [...e.seen]);
          events.push({ kind: "message", message: node.view, op: "added" } as TreeEvent);
        }
      } else if (existing.response && !existing.closed && existing.view.runId === e.run_id) {
        // A retried step: start the response over.
        run.responses.set(e.message_id, [...e.seen]);
        existing.partIds.clear();
        const message = { ...existing.view.message, parts: [], metadata: { ...e.metadata } };
        if (!deepEqual(message, existing.view.message)) {
          existing.view = freezeView({ ...existing.view, message });
          events.push({ kind: "message", message: existing.view, op: "updated" } as TreeEvent);
        }
      }
    } else {
      const target = this.nodes.get(e.message_id);
      if (target !== undefined && target.response && !target.closed) {
        let message;
        if (e.kind === "response_append") {
          message = foldChunks(target, e.chunks);
        } else {
          target.closed = true;
          message = closedMessage(target.view.message, e);
        }
        if (!deepEqual(message, target.view.message)) {
          target.view = freezeView({ ...target.view, message });
          events.push({ kind: "message", message: target.view, op: "updated" } as TreeEvent);
        }
      }
    }
    return events;
  }

  /** @param {Entry} e @returns {TreeEvent[]} @internal */
  _refuse(e: Entry): TreeEvent[] {
    if (this.refusals.has(e.message_id)) return [];
    this.refusals.set(
      e.message_id,
      Object.freeze({
        messageId: e.message_id,
        runId: e.run_id,
        intent: e.intent,
        error: e.error,
        serial: e.serial,
        clientId: e.client_id,
      }),
    );
    /** @type {TreeEvent[]} */
    const events: TreeEvent[] = [];
    const node = this.nodes.get(e.message_id);
    if (node !== undefined && !node.response && !node.view.refused) {
      node.view = freezeView({ ...node.view, refused: true });
      if (this.selections !== null) this.refusedNow.push(e.message_id);
      events.push({ kind: "message", message: node.view, op: "updated" } as TreeEvent);
    }
    const held = this.held.get(e.message_id);
    if (held !== undefined && held.intent !== "prompt") this.held.set(e.message_id, freezeView({ ...held, refused: true }));
    for (const r of this.book.refuse(e.message_id, e.run_id, e.error)) events.push({ kind: "delivery", outcome: r });
    return events;
  }

  /** @param {Entry} e @returns {[TreeRun, boolean]} @internal */
  _run(e: Entry): [TreeRun, boolean] {
    const existing = this.runs.get(e.run_id);
    if (existing !== undefined) return [existing, false];
    /** @type {RunInfo} */
    let info: RunInfo = { runId: e.run_id, status: "pending", clientId: null, userId: null, endReason: null, error: null, agent: null };
    if (e.kind === "message" && e.intent === "prompt") {
      info = { ...info, status: e.queued ? "queued" : "pending", clientId: e.client_id, userId: e.user_id, agent: e.agent || "default" };
    }
    /** @type {TreeRun} */
    const run: TreeRun = {
      info: freezeRun(info),
      cancelRequested: false,
      cancels: new Set(),
      inputs: [],
      seen: new Set(),
      promptId: null,
      held: null,
      heldInputs: [],
      denials: [],
      responses: new Map(),
      checkpoint: null,
      questions: [],
      answers: new Map(),
      declined: false,
    };
    this.runs.set(e.run_id, run);
    return [run, true];
  }

  /**
   * Add a prompt: under its parent, beside the turn it rolls back, or at the tip.
   * @param {Entry} e @returns {TreeNode}
   * @internal
   */
  _place(e: Entry): TreeNode {
    if ((e.parent_id === null || !this.nodes.has(e.parent_id)) && e.multitask === "rollback" && e.interrupts && e.interrupts.length) {
      /** @type {TreeNode[]} */
      const prompts: TreeNode[] = [];
      for (const r of e.interrupts) {
        const pid = this.runs.get(r)?.promptId;
        const node = pid === null || pid === undefined ? undefined : this.nodes.get(pid);
        if (node !== undefined) prompts.push(node);
      }
      if (prompts.length) {
        // The first of the lowest serial, as Python's min().
        const earliest = prompts.reduce((a, b) => (b.view.serial < a.view.serial ? b : a));
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
  _add(message: UIMessage, runId: string, serial: number, parentId: string | null, intent: Intent | null, response: boolean, exact: boolean = false): TreeNode {
    if (!exact && (parentId === null || !this.nodes.has(parentId))) {
      const anchor = intent !== "prompt" ? this.latest.get(runId) : undefined;
      if (anchor !== undefined && !this.spinePos.has(anchor)) {
        parentId = this.tipBelow(anchor); // the tip of the Run's own branch
      } else {
        parentId = this.spine.length ? this.spine[this.spine.length - 1] : null;
      }
    }
    /** @type {TreeNode} */
    const node: TreeNode = {
      view: freezeView({ message, runId, serial, parentId, intent, refused: false }),
      response,
      children: [],
      closed: false,
      partIds: new Map(),
    };
    this.nodes.set(message.id, node);
    this.latest.set(runId, message.id);
    if (parentId === null) {
      this.roots.push(message.id);
      this.spinePos.clear();
      this.spine.length = 0;
    } else {
      (this.nodes.get(parentId) as TreeNode).children.push(message.id);
      const pos = this.spinePos.get(parentId);
      if (pos !== undefined) {
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
  tipBelow(mid: string): string {
    let children = (this.nodes.get(mid) as TreeNode).children;
    while (children.length) {
      mid = children[children.length - 1];
      children = (this.nodes.get(mid) as TreeNode).children;
    }
    return mid;
  }

  /** @returns {string[]} */
  path(): string[] {
    if (!this.selections || this.selections.size === 0) return [...this.spine];
    const out = [];
    /** @type {string | null} */
    let key: string | null = null;
    let children = this.roots;
    while (children.length) {
      /** @type {string} */
      const pick: string = this.selections.get(key) || children[children.length - 1];
      out.push(pick);
      key = pick;
      children = (this.nodes.get(pick) as TreeNode).children;
    }
    return out;
  }
}

/**
 * The node's message with `chunks` folded in (a new object; the old one is untouched).
 * @param {TreeNode} node @param {Record<string, any>[]} chunks @returns {UIMessage}
 */
export function foldChunks(node: TreeNode, chunks: Record<string, any>[]): UIMessage {
  /** @type {Part[]} */
  const parts: Part[] = [...node.view.message.parts];
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

export const TOOL_DENIED = "TOOL_DENIED";

/**
 * Fold one chunk other than text and reasoning (transport/chunks.py's rules); true if the
 * parts changed. Parts are only replaced in place or appended, so indexes stay valid.
 */
export function foldPart(parts: Part[], chunk: Record<string, any>): boolean {
  const kind = chunk.type;
  if (typeof kind !== "string") return false;
  if (kind.startsWith("tool-")) return foldTool(parts, kind, chunk);
  if (kind.startsWith("data-")) return foldData(parts, kind, chunk);
  const str = (...v: unknown[]) => v.every((x) => typeof x === "string");
  const opt = (v: unknown) => v === undefined || v === null || typeof v === "string";
  if (kind === "source-url") {
    const { sourceId, url, title } = chunk;
    if (!str(sourceId, url) || !opt(title)) return false;
    parts.push(typeof title === "string" ? { type: kind, source_id: sourceId, url, title } : { type: kind, source_id: sourceId, url });
    return true;
  }
  if (kind === "source-document") {
    const { sourceId, mediaType, title, filename } = chunk;
    if (!str(sourceId, mediaType, title) || !opt(filename)) return false;
    const part: SourceDocumentPart = { type: kind, source_id: sourceId, media_type: mediaType, title };
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

export function foldTool(parts: Part[], kind: string, chunk: Record<string, any>): boolean {
  const callId = chunk.toolCallId;
  if (typeof callId !== "string") return false;
  if (kind === "tool-input-start") {
    const name = chunk.toolName;
    if (typeof name !== "string" || callIndex(parts, callId) !== undefined) return false;
    parts.push({ type: "tool-call", tool_call_id: callId, tool_name: name, input: null, input_text: "" });
    return true;
  }
  if (kind === "tool-input-delta") {
    const delta = chunk.inputTextDelta;
    const index = callIndex(parts, callId);
    if (typeof delta !== "string" || !delta || index === undefined) return false;
    const call = parts[index] as ToolCallPart;
    if (call.input_text === undefined) return false;
    parts[index] = { ...call, input_text: call.input_text + delta };
    return true;
  }
  if (kind === "tool-input-available" || kind === "tool-input-error") {
    const name = chunk.toolName;
    const error = chunk.errorText;
    if (typeof name !== "string" || (kind === "tool-input-error" && typeof error !== "string")) return false;
    const whole: ToolCallPart = { type: "tool-call", tool_call_id: callId, tool_name: name, input: chunk.input ?? null };
    const index = callIndex(parts, callId);
    if (index === undefined) parts.push(whole);
    else parts[index] = whole;
    if (kind === "tool-input-error") parts.push({ type: "tool-result", tool_call_id: callId, tool_name: name, output: error, is_error: true });
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
    // With a string errorCode the output carries it (runwire's tool runner and history repair).
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

export function foldData(parts: Part[], kind: string, chunk: Record<string, any>): boolean {
  const id = chunk.id;
  if (chunk.transient === true || kind.length === 5) return false;
  if (id !== undefined && id !== null && typeof id !== "string") return false;
  const type = kind as `data-${string}`;
  const part: DataPart = typeof id === "string" ? { type, id, data: chunk.data ?? null } : { type, data: chunk.data ?? null };
  if (typeof id === "string") {
    const at = parts.findIndex((p) => p.type === kind && (p as DataPart).id === id);
    if (at >= 0) {
      parts[at] = part;
      return true;
    }
  }
  parts.push(part);
  return true;
}

export function callIndex(parts: Part[], callId: string): number | undefined {
  for (let i = parts.length - 1; i >= 0; i--) {
    const part = parts[i];
    if (part.type === "tool-call" && part.tool_call_id === callId) return i;
  }
  return undefined;
}

/**
 * Fold one text/reasoning start or delta; true if the parts changed.
 * @param {Part[]} parts @param {Map<string, number>} ids @param {"text" | "reasoning"} family
 * @param {boolean} start @param {Record<string, any>} chunk
 */
export function stream(parts: Part[], ids: Map<string, number>, family: "text" | "reasoning", start: boolean, chunk: Record<string, any>) {
  const cid = chunk.id;
  if (cid !== undefined && cid !== null && typeof cid !== "string") return false;
  const delta = start ? "" : chunk.delta;
  if (typeof delta !== "string") return false;
  const key = `${family}\u0000${cid}`;
  /** @type {number | undefined} */
  let index: number | undefined;
  if (start) index = undefined;
  else if (cid !== undefined && cid !== null) index = ids.get(key);
  else index = parts.length && parts[parts.length - 1].type === family ? parts.length - 1 : undefined;
  if (index === undefined) {
    parts.push({ type: family, text: delta });
    if (cid !== undefined && cid !== null) ids.set(key, parts.length - 1);
    return true;
  }
  if (!delta) return false;
  const old = (parts[index] as TextPart | ReasoningPart);
  parts[index] = { type: family, text: old.text + delta };
  return true;
}

/** @param {Part[]} parts @param {string} callId @param {unknown} fallback @returns {string} */
export function toolName(parts: Part[], callId: string, fallback: unknown): string {
  for (let i = parts.length - 1; i >= 0; i--) {
    const part = parts[i];
    if (part.type === "tool-call" && part.tool_call_id === callId) return part.tool_name;
  }
  return typeof fallback === "string" ? fallback : "";
}

/**
 * A session's entries folded into a conversation tree, Runs and steering outcomes (a port of
 * transport/tree.py: read that module's docstring for the rules). Feed it every entry the relay
 * delivers with `fold` / `foldOlder`; both throw RunwireError(VALIDATION_ERROR) for an entry that
 * does not validate or has no serial (nothing is folded then).
 */
