// The raw UI message stream chunks of a session's replies, in serial order, as async iterables:
// `run.chunks()` for one Run, `session.chunks()` for every Run. They follow the view, which
// resumes from the newest serial it holds after a reconnect, so a reconnect neither skips nor
// repeats a chunk.

import { IteratorQueue } from "./queue.js";
import type { Entry } from "./types.js";
import type { View } from "./view.js";
import { isTerminal } from "./errors.js";

/**
 * One chunk of a reply, with where it came from. `chunk` is a UI message stream chunk as the agent
 * published it (`text-delta`, `tool-input-available`, ...), or one the client adds at a reply's
 * edges: `{type: "start", messageId}` where a reply opens and `{type: "finish"}` where it closes.
 * `serial` is the entry's serial and `index` the chunk's place in it (-1 for the added ones).
 */
export interface ReplyChunk {
  runId: string;
  messageId: string;
  serial: number;
  index: number;
  chunk: { type: string; [key: string]: unknown };
}

/** What `chunks()` takes. */
export interface ChunksOptions {
  /** Only chunks of entries after this serial (default: every one the view holds). */
  after?: number | null;
  /** Stop waiting for more (the iterator ends). */
  signal?: AbortSignal | null;
}

const REPLY_KINDS = new Set(["response_open", "response_append", "response_close"]);

/** The chunks one reply entry stands for (none for other entries). */
export function entryChunks(e: Entry): ReplyChunk[] {
  if (!REPLY_KINDS.has(e.kind)) return [];
  const base = { runId: e.run_id as string, messageId: e.message_id as string, serial: e.serial as number };
  if (e.kind === "response_open") {
    const chunk: ReplyChunk["chunk"] = { type: "start", messageId: e.message_id };
    if (e.metadata && Object.keys(e.metadata).length) chunk.messageMetadata = e.metadata;
    return [{ ...base, index: -1, chunk }];
  }
  if (e.kind === "response_close") {
    const chunk: ReplyChunk["chunk"] = { type: "finish" };
    if (e.metadata && Object.keys(e.metadata).length) chunk.messageMetadata = e.metadata;
    return [{ ...base, index: -1, chunk }];
  }
  return (e.chunks as ReplyChunk["chunk"][]).map((chunk, index) => ({ ...base, index, chunk: { ...chunk } }));
}

/**
 * The reply chunks of one Run (`runId`) or of every Run (null), from the entries the view holds
 * after `after`, then live. One Run's iterator ends once that Run ended; both end when the session
 * closes or `signal` aborts.
 */
export function replyChunks(view: View, runId: string | null, options: ChunksOptions = {}): AsyncIterableIterator<ReplyChunk> {
  let last = options.after ?? -1;
  const signal = options.signal ?? null;
  const queue = new IteratorQueue<ReplyChunk>(() => {
    view._entryHooks.delete(onEntry);
    view._changed.delete(onChange);
    signal?.removeEventListener("abort", onAbort);
  });
  const runOver = () => {
    if (runId === null) return false;
    const info = view.run(runId);
    return info !== null && isTerminal(info.status);
  };
  const take = (e: Entry) => {
    if (queue.ended || typeof e.serial !== "number" || e.serial <= last) return;
    if (runId !== null && e.run_id !== runId) return;
    last = e.serial;
    for (const chunk of entryChunks(e)) queue.push(chunk);
  };
  const onEntry = (e: Entry) => {
    take(e);
    if (runOver()) queue.end();
  };
  const onChange = () => {
    if (view._closed || runOver()) queue.end();
  };
  const onAbort = () => queue.end();

  // What the view already holds, in serial order, then live entries as they fold.
  for (const e of view.tree._held()) take(e);
  if (view._closed || runOver() || signal?.aborted) queue.end();
  else {
    view._entryHooks.add(onEntry);
    view._changed.add(onChange);
    signal?.addEventListener("abort", onAbort, { once: true });
  }
  return queue;
}
