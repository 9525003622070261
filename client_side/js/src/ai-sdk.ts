// @runwire/client/ai-sdk: a Vercel AI SDK ChatTransport over a runwire session, for useChat:
//
//   const transport = new RunwireChatTransport({ session });
//   const chat = useChat({ transport, messages: transport.uiMessages() });
//
// sendMessages starts a Run and streams its replies as UI message chunks; the stream's abort
// (useChat's stop) cancels the Run; reconnectToStream replays the Run still going after a reload;
// steer() steers it, and the agent's take-up shows as the AI SDK's steering-message part.

import type { ChatTransport, UIMessage as AIMessage, UIMessageChunk } from "ai";

import type { ReplyChunk } from "./chunks.js";
import { RunwireError, VALIDATION_ERROR, isTerminal, newId } from "./errors.js";
import type { ClientRun, Delivery } from "./runs.js";
import type { Session } from "./session.js";
import type { Part, UIMessage, ViewMessage } from "./types.js";

/** What the transport takes. */
export interface RunwireChatTransportOptions {
  /** A connected session (`await connect(url, chatId)`): one chat is one session. */
  session: Session;
  /** Cancel the Run when useChat stops the stream (default true). */
  cancelOnStop?: boolean;
}

type Chunk = { type: string; [key: string]: unknown };

/** Chunk types the AI SDK's stream takes as they are (text and reasoning are rebuilt). */
const PASSED = new Set([
  "error",
  "tool-input-start",
  "tool-input-delta",
  "tool-input-available",
  "tool-input-error",
  "tool-approval-request",
  "tool-approval-response",
  "tool-output-available",
  "tool-output-error",
  "tool-output-denied",
  "source-url",
  "source-document",
  "file",
  "reasoning-file",
  "custom",
  "message-metadata",
]);

/**
 * Turns one Run's reply chunks into one AI SDK message stream. The stream has `start` once and
 * a step per reply. It has text and reasoning parts with the ids the AI SDK needs, since runwire
 * lets an agent leave them out. It has steering-message parts for steers the Run took in, and
 * `finish`, `abort` or `error` at its end.
 */
export class ChunkMapper {
  readonly session: Session;
  readonly runId: string;
  started = false;
  private _open = new Map<string, string>(); // family -> the open part's id
  private _known = new Set<string>(); // "family\0id" of parts started
  private _count = 0;
  private _steers = new Set<string>();

  constructor(session: Session, runId: string) {
    this.session = session;
    this.runId = runId;
  }

  /** The AI SDK chunks for one reply chunk. */
  map(item: ReplyChunk): UIMessageChunk[] {
    const out: Chunk[] = [];
    const chunk = item.chunk;
    const kind = chunk.type;
    if (kind === "start" && item.index === -1) {
      if (!this.started) out.push({ type: "start", messageId: item.messageId });
      this.started = true;
      out.push({ type: "start-step" });
      out.push(...this._steering());
    } else if (kind === "finish" && item.index === -1) {
      out.push(...this._closeAll(), { type: "finish-step" });
    } else if (kind.startsWith("text-") || kind.startsWith("reasoning-")) {
      out.push(...this._stream(kind.startsWith("text-") ? "text" : "reasoning", kind.slice(kind.indexOf("-") + 1), chunk));
    } else if (PASSED.has(kind) || kind.startsWith("data-")) {
      out.push({ ...chunk });
    }
    if (!this.started && out.length) {
      this.started = true;
      out.unshift({ type: "start", messageId: item.messageId });
    }
    return out as UIMessageChunk[];
  }

  /** The chunks that end the stream, by how the Run ended (null: it did not). */
  end(): UIMessageChunk[] {
    const out: Chunk[] = [];
    if (!this.started) out.push({ type: "start" });
    this.started = true;
    out.push(...this._closeAll());
    const info = this.session.view.run(this.runId);
    if (info?.status === "cancelled") out.push({ type: "abort", reason: "cancelled" });
    else if (info?.status === "error") {
      const error = info.error as { code?: unknown; message?: unknown } | null;
      const text = typeof error?.message === "string" ? error.message : "the Run failed";
      out.push({ type: "error", errorText: typeof error?.code === "string" ? `${error.code}: ${text}` : text });
    } else out.push({ type: "finish", finishReason: "stop" });
    return out as UIMessageChunk[];
  }

  /** An abort chunk (the stream stopped before the Run ended). */
  abort(): UIMessageChunk[] {
    const out: Chunk[] = this.started ? [] : [{ type: "start" }];
    this.started = true;
    out.push(...this._closeAll(), { type: "abort", reason: "stopped" });
    return out as UIMessageChunk[];
  }

  private _stream(family: "text" | "reasoning", what: string, chunk: Chunk): Chunk[] {
    const given = typeof chunk.id === "string" ? chunk.id : null;
    const out: Chunk[] = [];
    if (what === "start") {
      const id = given ?? `${this.runId}-${family}-${++this._count}`;
      out.push({ type: `${family}-start`, id });
      this._open.set(family, id);
      this._known.add(`${family}\u0000${id}`);
    } else if (what === "delta") {
      if (typeof chunk.delta !== "string") return [];
      let id = given ?? this._open.get(family) ?? null;
      if (id === null || !this._known.has(`${family}\u0000${id}`)) {
        id = id ?? `${this.runId}-${family}-${++this._count}`;
        out.push({ type: `${family}-start`, id });
        this._known.add(`${family}\u0000${id}`);
      }
      this._open.set(family, id);
      out.push({ type: `${family}-delta`, id, delta: chunk.delta });
    } else if (what === "end") {
      const id = given ?? this._open.get(family) ?? null;
      if (id === null || !this._known.has(`${family}\u0000${id}`)) return [];
      out.push({ type: `${family}-end`, id });
      this._known.delete(`${family}\u0000${id}`);
      if (this._open.get(family) === id) this._open.delete(family);
    }
    return out;
  }

  private _closeAll(): Chunk[] {
    const out: Chunk[] = [];
    for (const key of this._known) {
      const [family, id] = key.split("\u0000");
      out.push({ type: `${family}-end`, id });
    }
    this._known.clear();
    this._open.clear();
    return out;
  }

  private _steering(): Chunk[] {
    const tree = this.session.view.tree;
    const seen = tree.seen(this.runId);
    const out: Chunk[] = [];
    for (const vm of tree.steering(this.runId)) {
      const id = vm.message.id;
      if (this._steers.has(id) || !seen.has(id)) continue;
      this._steers.add(id);
      out.push({ type: "steering-message", id, parts: textParts(vm.message) });
    }
    return out;
  }
}

function textParts(message: UIMessage): { type: "text"; text: string }[] {
  return message.parts.filter((p) => p.type === "text").map((p) => ({ type: "text", text: (p as { text: string }).text }));
}

/** A runwire message as an AI SDK UIMessage (text, reasoning and `tool-<name>` parts, as the stream makes them). */
export function toAIMessage<M extends AIMessage = AIMessage>(message: UIMessage): M {
  const parts: Record<string, unknown>[] = [];
  const results = new Map<string, Part>();
  for (const p of message.parts) if (p.type === "tool-result") results.set(p.tool_call_id, p);
  for (const p of message.parts) {
    if (p.type === "text") parts.push({ type: "text", text: p.text, state: "done" });
    else if (p.type === "reasoning") parts.push({ type: "reasoning", text: p.text, state: "done" });
    else if (p.type === "tool-call") {
      const r = results.get(p.tool_call_id);
      const base = { type: `tool-${p.tool_name}`, toolCallId: p.tool_call_id, input: p.input };
      if (r === undefined || r.type !== "tool-result") parts.push({ ...base, state: "input-available" });
      else if (r.is_error) {
        const o = r.output as { message?: unknown } | string;
        const errorText = typeof o === "string" ? o : typeof o?.message === "string" ? o.message : JSON.stringify(o);
        parts.push({ ...base, state: "output-error", errorText });
      } else parts.push({ ...base, state: "output-available", output: r.output });
    }
  }
  return { id: message.id, role: message.role, metadata: message.metadata, parts } as unknown as M;
}

/** An AI SDK user message as a runwire one (text parts only). */
export function fromAIMessage(message: AIMessage, id: string = message.id): UIMessage {
  const parts: Part[] = [];
  for (const p of message.parts) {
    if (p.type === "text") parts.push({ type: "text", text: p.text });
    else if (p.type !== "step-start") {
      throw new RunwireError(VALIDATION_ERROR, `a ${p.type} part cannot be sent over runwire yet (text parts only)`);
    }
  }
  const metadata = (message.metadata && typeof message.metadata === "object" ? message.metadata : {}) as Record<string, unknown>;
  return { id, role: "user", parts, metadata: { ...metadata } };
}

/** A ChatTransport (the AI SDK's useChat) whose chat is a runwire session. */
export class RunwireChatTransport<M extends AIMessage = AIMessage> implements ChatTransport<M> {
  /** reconnectToStream replays the Run's replies from their start. */
  readonly resumeStreamIsReplay = true;
  readonly session: Session;
  readonly cancelOnStop: boolean;

  constructor(options: RunwireChatTransportOptions) {
    if (!options || !options.session) throw new RunwireError(VALIDATION_ERROR, "RunwireChatTransport needs { session }");
    this.session = options.session;
    this.cancelOnStop = options.cancelOnStop ?? true;
  }

  /** Start a Run with the newest user message (or send it again to regenerate) and stream its replies. */
  async sendMessages(options: Parameters<ChatTransport<M>["sendMessages"]>[0]): Promise<ReadableStream<UIMessageChunk>> {
    const messages = options.messages;
    const lastUser = [...messages].reverse().find((m) => m.role === "user");
    if (lastUser === undefined) throw new RunwireError(VALIDATION_ERROR, "no user message to send");
    let run: ClientRun;
    if (options.trigger === "regenerate-message") {
      // A new branch: the same question again, from where the old one was asked.
      const old = this.session.view.tree.message(lastUser.id);
      run = await this.session.send(fromAIMessage(lastUser, newId()), { parentId: old?.parentId ?? null });
    } else {
      run = await this.session.send(fromAIMessage(lastUser));
    }
    return this.stream(run, options.abortSignal ?? null);
  }

  /** The stream of the newest Run still going (a replay from its start), or null when none is. */
  async reconnectToStream(options: Parameters<ChatTransport<M>["reconnectToStream"]>[0]): Promise<ReadableStream<UIMessageChunk> | null> {
    const run = this.activeRun();
    return run === null ? null : this.stream(run, options.abortSignal ?? null);
  }

  /** The newest Run of the session that has not ended, if any. */
  activeRun(): ClientRun | null {
    const going = this.session.view.runs().filter((r) => !isTerminal(r.status));
    const last = going.at(-1);
    return last === undefined ? null : this.session.run(last.runId);
  }

  /** Steer the Run going now (RUN_NOT_ACTIVE when none is). */
  steer(text: string): Delivery {
    const run = this.activeRun();
    if (run === null) throw new RunwireError("RUN_NOT_ACTIVE", "no Run is going to steer");
    return run.steer(text);
  }

  /** The session's conversation as AI SDK messages (for useChat's `messages` and `setMessages`). */
  uiMessages(): M[] {
    return this.session.view.getMessages().map((vm: ViewMessage) => toAIMessage<M>(vm.message));
  }

  /** One Run's replies as an AI SDK UI message chunk stream; aborting `signal` cancels the Run. */
  stream(run: ClientRun, signal: AbortSignal | null = null): ReadableStream<UIMessageChunk> {
    const mapper = new ChunkMapper(this.session, run.runId);
    const stop = new AbortController();
    const chunks = run.chunks({ signal: stop.signal });
    let done = false;
    let onAbort: (() => void) | null = null;
    return new ReadableStream<UIMessageChunk>({
      start: (controller) => {
        if (signal === null) return;
        onAbort = () => {
          if (done) return;
          done = true;
          stop.abort();
          if (this.cancelOnStop) this.session.cancel(run.runId, { reason: "stopped" }).catch(() => {});
          try {
            for (const c of mapper.abort()) controller.enqueue(c);
            controller.close();
          } catch {
            // the reader went away already
          }
        };
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      },
      pull: async (controller) => {
        while (!done) {
          const next = await chunks.next();
          if (done) return;
          if (next.done) {
            done = true;
            if (onAbort !== null) signal?.removeEventListener("abort", onAbort);
            for (const c of mapper.end()) controller.enqueue(c);
            controller.close();
            return;
          }
          const out = mapper.map(next.value);
          for (const c of out) controller.enqueue(c);
          if (out.length) return;
        }
      },
      cancel: () => {
        done = true;
        stop.abort();
        if (onAbort !== null) signal?.removeEventListener("abort", onAbort);
      },
    });
  }
}
