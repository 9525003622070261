// Type declarations for runwire.js, the runwire client for browsers (see docs/protocol.md).

export type Role = "user" | "assistant" | "system";
/** "queued": waiting its turn (multitask enqueue/interrupt/rollback); "pending": not started yet. */
export type RunStatus = "queued" | "pending" | "active" | "suspended" | "complete" | "cancelled" | "error";
export type RunEndReason = "complete" | "cancelled" | "error";
export type Intent = "prompt" | "steer" | "follow_up" | "inject";
/** What a prompt's Run does to Runs going on in the session. */
export type Multitask = "alongside" | "reject" | "enqueue" | "interrupt" | "rollback";
/** `shared` on a session's first prompt lets other users' strategies touch its Runs. */
export type ThreadAccess = "own" | "shared";
export type ConnectionState = "connected" | "disconnected" | "closed";

export interface TextPart {
  type: "text";
  text: string;
}
export interface ReasoningPart {
  type: "reasoning";
  text: string;
}
export interface ToolCallPart {
  type: "tool-call";
  tool_call_id: string;
  tool_name: string;
  input: unknown;
  /** The input's JSON as streamed so far, while the model still writes it (absent once whole). */
  input_text?: string;
}
export interface ToolResultPart {
  type: "tool-result";
  tool_call_id: string;
  tool_name: string;
  output: unknown;
  is_error: boolean;
}
/** A web page the answer draws on (`source-url` chunk). */
export interface SourceUrlPart {
  type: "source-url";
  source_id: string;
  url: string;
  title?: string;
}
/** A document the answer draws on (`source-document` chunk). */
export interface SourceDocumentPart {
  type: "source-document";
  source_id: string;
  media_type: string;
  title: string;
  filename?: string;
}
/** A file (`file` chunk): its URL, often a `data:` URL, and media type. */
export interface FilePart {
  type: "file";
  url: string;
  media_type: string;
}
/** The app's own data (`data-<name>` chunk); a later one with the same type and id replaces it. */
export interface DataPart {
  type: `data-${string}`;
  id?: string;
  data: unknown;
}
export type Part =
  | TextPart
  | ReasoningPart
  | ToolCallPart
  | ToolResultPart
  | SourceUrlPart
  | SourceDocumentPart
  | FilePart
  | DataPart;

/** One message of a conversation; the same shape as on the wire. */
export interface UIMessage {
  id: string;
  role: Role;
  parts: Part[];
  metadata: Record<string, unknown>;
}

/** A message as the tree holds it; `intent` is null for responses; `refused` once an input check refused it. */
export interface ViewMessage {
  readonly message: UIMessage;
  readonly runId: string;
  readonly serial: number;
  readonly parentId: string | null;
  readonly intent: Intent | null;
  readonly refused: boolean;
}

/** An input check refused a queued message: which, where, the error object, who published the refusal. */
export interface Refusal {
  readonly messageId: string;
  readonly runId: string;
  readonly intent: Intent;
  readonly error: Record<string, unknown>;
  readonly serial: number;
  readonly clientId: string | null;
}

/** One response of a Run: the message, whether it was closed, what it had seen. */
export interface ResponseState {
  readonly view: ViewMessage;
  readonly closed: boolean;
  readonly seen: string[];
}

/** A snapshot of one Run; `clientId` / `userId` / `agent` come from its prompt. */
export interface RunInfo {
  readonly runId: string;
  readonly status: RunStatus;
  readonly clientId: string | null;
  readonly userId: string | null;
  readonly endReason: RunEndReason | null;
  readonly error: Record<string, unknown> | null;
  readonly agent: string | null;
}

/** An agent refused a cancel: which one (`cancelId`, the refused cancel entry's id), of which Run, who refused. */
export interface CancelDenial {
  readonly runId: string;
  readonly cancelId: string | null;
  readonly serial: number;
  readonly reason: string | null;
  readonly clientId: string | null;
  readonly userId: string | null;
}

export interface OutcomeRecord {
  readonly messageId: string;
  readonly runId: string;
  readonly consumed: boolean;
  readonly runTerminalReason: RunEndReason | null;
  readonly refused: Record<string, unknown> | null;
}

/**
 * `op: "added"`: a new message, or one already held that came onto the active branch
 * (`selectBranch`, a rebuild); `"updated"`: its content, parent or `refused` changed;
 * `"removed"`: it left `getMessages()` (a fork or rollback left its turn behind, a branch was
 * selected, it was refused, a rebuild moved it, a reset dropped it).
 * `shown`: whether the message is in `getMessages()` once the entry (or selection) that caused the
 * event is applied (false for "removed", and for messages off the active branch). A UI that
 * follows events upserts a message whose event is shown and drops it otherwise.
 */
export interface MessageEvent {
  kind: "message";
  message: ViewMessage;
  op: "added" | "updated" | "removed";
  shown: boolean;
}
/**
 * `op: "changed"`: the Run appeared or its status (or error) changed; `"removed"`: a reset rebuilt
 * the view from a page that does not name it (`run` is the last snapshot the view had).
 */
export interface RunEvent {
  kind: "run";
  run: RunInfo;
  op: "changed" | "removed";
}
export interface DeliveryEvent {
  kind: "delivery";
  outcome: OutcomeRecord;
}
export type TreeEvent = MessageEvent | RunEvent | DeliveryEvent;

/**
 * A channel entry (see docs/schema/stamped-entry.json); wire field names. Kinds: message, run,
 * cancel, cancel_denied, response_open, response_append, response_close.
 */
export type Entry = Record<string, any>;

export const PROTOCOL_VERSION: 1;
export const TERMINAL: readonly RunEndReason[];
export const EVENT_KINDS: readonly ["message", "run", "delivery"];
export const CONNECTION_CLOSED: "CONNECTION_CLOSED";
export const CLOSE_CODES: Readonly<Record<number, string>>;
export const MULTITASK_STRATEGIES: readonly Multitask[];

export class RunwireError extends Error {
  constructor(code: string, message?: string, details?: Record<string, unknown>);
  readonly code: string;
  readonly details: Record<string, unknown>;
  /** The message without the code in front. */
  readonly text: string;
  static fromWire(data: unknown): RunwireError;
  toWire(): { code: string; message: string; details: Record<string, unknown> };
}

export function newId(): string;
export function userMessage(
  textOrParts: string | Part[],
  options?: { id?: string; metadata?: Record<string, unknown> },
): UIMessage;
export function messageText(message: UIMessage): string;
export function endReason(status: string): RunEndReason | null;
/**
 * Validate an entry as the relay's models do (length limits count code points, as Python's
 * `len`, not UTF-16 code units); throws RunwireError("VALIDATION_ERROR").
 */
export function decodeEntry(raw: unknown): Entry;
/**
 * Check a relay frame's fields as the relay's models do (`transport.codec.decode_relay_frame`):
 * every field of `welcome`, `attached`, `ack`, `page`, `deliver`, `dispatch` and `error` has its
 * type (an integer a JSON integer, not `true` or `"5"`; a boolean `true`/`false` only; strings,
 * objects, lists of objects for `entries`, an error body), null only where optional, a required one
 * present. Fields it does not know are ignored, as is a frame of a type it does not know; the
 * entries themselves are decodeEntry's to check. Throws RunwireError("VALIDATION_ERROR") (the
 * session drops such a frame, as the Python client does, and fails the connect on such a
 * `welcome`), or "PROTOCOL_ERROR" for a frame that is not an object.
 */
export function checkRelayFrame(frame: unknown): void;

/**
 * The outcome of a queued message the relay refused with RUN_NOT_ACTIVE because its Run had ended:
 * not consumed, with the Run's end reason; null for any other refusal.
 */
export function endedBeforeStored(
  messageId: string,
  runId: string,
  code: string,
  details: Record<string, unknown>,
): OutcomeRecord | null;

export class OutcomeBook {
  track(messageId: string, runId: string): OutcomeRecord[];
  saw(runId: string, messageIds: Iterable<string>): void;
  runStatus(runId: string, status: string): OutcomeRecord[];
  refuse(messageId: string, runId: string, error: Record<string, unknown>): OutcomeRecord[];
  refused(messageId: string): boolean;
  outcome(messageId: string): OutcomeRecord | null;
  pending(runId: string): string[];
  consumed(messageId: string): boolean;
  resolved(): OutcomeRecord[];
}

/** A port of transport/tree.py: a session's entries folded into messages, Runs and outcomes. */
export class ConversationTree {
  fold(entry: Entry): TreeEvent[];
  foldOlder(entries: Iterable<Entry>): TreeEvent[];
  /** What a UI that showed `before` must take away to show this tree ("removed" message events, then "removed" Run events). */
  removedSince(before: ConversationTree): TreeEvent[];
  readonly oldestSerial: number | null;
  readonly newestSerial: number | null;
  messages(tail?: string[]): ViewMessage[];
  /** Any message, on the active branch or not, or a held (queued) prompt. */
  message(messageId: string): ViewMessage | null;
  /** Prompts of queued Runs, not yet in the conversation, oldest first. */
  waiting(): ViewMessage[];
  branches(messageId: string): string[];
  /** Show the branch through the message: "removed" events for what leaves the view, then "added" for what joins it. */
  selectBranch(messageId: string): MessageEvent[];
  runs(): RunInfo[];
  run(runId: string): RunInfo | null;
  /** True once a cancel entry for the Run was folded (and no refusal came after it). */
  cancelRequested(runId: string): boolean;
  /** The agent's refusal of the cancel entry `cancelId`, if it refused. */
  cancelDenial(cancelId: string): CancelDenial | null;
  /** Every refused cancel of the Run, in serial order. */
  cancelDenials(runId: string): CancelDenial[];
  /** Steer, follow-up and inject messages aimed at the Run (refused ones left out). */
  inputs(runId: string): ViewMessage[];
  /** The prompt that started the Run (held while queued). */
  prompt(runId: string): ViewMessage | null;
  /** The Run's responses in the order they opened. */
  responses(runId: string): ResponseState[];
  /** Refused messages (of one Run, or all), in serial order. */
  refusals(runId?: string | null): Refusal[];
  /** The latest checkpoint entry of a Run. */
  checkpoint(runId: string): Entry | null;
  /** The questions a suspended Run waits on (none once answered, declined or moved on). */
  interrupts(runId: string): Interrupt[];
  steering(runId: string): ViewMessage[];
  seen(runId: string): Set<string>;
  readonly outcomes: OutcomeBook;
  outcome(messageId: string): OutcomeRecord | null;
  pending(runId: string): string[];
}

export interface EventMap {
  message: MessageEvent;
  run: RunEvent;
  delivery: DeliveryEvent;
}

/**
 * A client's live picture of one session's conversation (`session.view`). The view of a
 * write-only session (`subscribe: false`) is never fed: every reading method, `tree`, `on()` and
 * `events()` throw RunwireError(NOT_ATTACHED), `loadOlder()` rejects with it.
 */
export class View {
  readonly sessionId: string;
  /** False for the view of a write-only session. */
  readonly readable: boolean;
  readonly tree: ConversationTree;
  readonly newestSerial: number | null;
  readonly oldestSerial: number | null;
  getMessages(): ViewMessage[];
  /** Prompts of queued Runs (not yet in `getMessages()`), oldest first. */
  waiting(): ViewMessage[];
  runs(): RunInfo[];
  run(runId: string): RunInfo | null;
  hasOlder(): boolean;
  loadOlder(limit?: number): Promise<number>;
  branches(messageId: string): string[];
  /** Show the branch through the message; reports "removed" for what leaves the view, then "added" for what joins it. */
  selectBranch(messageId: string): void;
  on<K extends keyof EventMap>(event: K, callback: (event: EventMap[K]) => void): () => void;
  events(): AsyncIterableIterator<TreeEvent>;
}

export interface Published {
  serial: number;
}
export interface Outcome {
  consumed: boolean;
  runTerminalReason: RunEndReason | null;
  refused: RunwireError | null;
}
/** A question a Run asks (`response` only on `resumed` entries). */
export interface Interrupt {
  id: string;
  kind: "input" | "approval" | "plan";
  reason: string;
  message: string;
  response_schema: Record<string, unknown> | null;
  expires_at: number | null;
  tool_call_id: string | null;
  tool_name: string | null;
  details: Record<string, unknown> | null;
  response: unknown;
}

export interface RunResult {
  status: RunStatus;
  endReason: RunEndReason | null;
  undelivered: UIMessage[];
  interrupts: Interrupt[];
  /** The error of an `error` end, or the abort's reason of a `cancelled` one (`RUN_CANCELLED`). */
  error: RunwireError | null;
  /** The abort's reason of a `cancelled` Run, when it gave one. */
  reason: string | null;
}

/** The kinds of message a Run takes while it works. */
export type QueuedIntent = "steer" | "follow_up" | "inject";

/**
 * A queued message an input check refused, and the error; `message` is null on a device that
 * never had its content (the relay refused it, so only the sender holds it).
 */
export interface Refused {
  readonly messageId: string;
  readonly runId: string;
  readonly intent: Intent;
  readonly error: RunwireError;
  readonly message: UIMessage | null;
}

/**
 * What `run.steer()`, `followUp()` and `inject()` return. Both promises reject at once when the
 * Run has ended; `outcome` resolves with `refused` set when an input check refused the message.
 */
export class Delivery {
  readonly message: UIMessage;
  readonly runId: string;
  readonly intent: QueuedIntent;
  readonly published: Promise<Published>;
  readonly outcome: Promise<Outcome>;
}

/**
 * On a write-only session (`subscribe: false`) `status`, `queued`, `refused` throw and `result()`,
 * `cancel()` with `wait` (the default) reject NOT_ATTACHED at once; a Delivery's `outcome`
 * rejects NOT_ATTACHED at once, its `published` resolves from the ack.
 */
export class ClientRun {
  readonly runId: string;
  readonly prompt: UIMessage | null;
  readonly status: RunStatus;
  /** Messages sent through this handle that wait (kept when the Run ends "error"). */
  readonly queued: UIMessage[];
  /** Queued messages of this Run an input check refused, oldest first. */
  readonly refused: Refused[];
  /** Joins the Run's current turn at its next model call. */
  steer(message: string | UIMessage): Delivery;
  /** Starts a new turn of the Run once its current answer is finished. */
  followUp(message: string | UIMessage): Delivery;
  /** Joins the conversation at the next model call without causing one. */
  inject(message: string | UIMessage): Delivery;
  /**
   * `undelivered`: what the Run did not take (none at an "error" end: they stay queued). Rejects
   * with EPOCH_MISMATCH (`details.run_id`) if a reset rebuilt the view without the Run.
   */
  result(): Promise<RunResult>;
  /**
   * `wait` defaults to true; rejects with CANCEL_DENIED if the agent refuses the cancel,
   * EPOCH_MISMATCH if a reset loses the Run while it waits.
   * Resolves to the messages sent through this handle that the Run never took (`[]` on a
   * write-only session, which cannot see them; it rejects NOT_ATTACHED there with `wait`).
   */
  cancel(options?: { reason?: string; wait?: boolean; timeout?: number | null }): Promise<UIMessage[]>;
}

export interface ConnectOptions {
  /** The client id the relay stamps on this client's entries. */
  clientId?: string;
  /** The agent that Runs started by `send` go to ("default"). */
  agent?: string;
  /** Sent as the `token` query parameter. */
  token?: string;
  /**
   * Asked for a fresh token before every connect but a first one that has `token`, so a token
   * the relay expires (close 4003, TOKEN_EXPIRED) is replaced and the session resumes. Failing,
   * or four expired tokens in a row, ends the session (UNAUTHORIZED / TOKEN_EXPIRED).
   */
  tokenProvider?: () => string | Promise<string>;
  /** The size of the first page (1 to 1000, default 100). */
  historyLimit?: number;
  /**
   * false: a write-only session, for a token with rights in the session but not 'subscribe'
   * (default true). It connects without attaching; `send`, steering, `cancel`, `resume` and
   * `cancelPause` publish and resolve from their acks; whatever reads the session throws or
   * rejects RunwireError(NOT_ATTACHED) at once (`details.subscribe === false`). A token that may
   * subscribe gets NOT_ATTACHED for its publishes. Not with `onRefusedMessage` (VALIDATION_ERROR).
   */
  subscribe?: boolean;
  /**
   * Called the moment an input check (the relay's or the agent's) refuses a queued message of
   * the session; not for refusals in the history the session starts with.
   */
  onRefusedMessage?: (refused: Refused) => void;
  /** First reconnect delay cap in ms (default 50). */
  backoffInitial?: number;
  /** Largest reconnect delay cap in ms (default 5000). */
  backoffMax?: number;
  /** Ms to wait for `welcome` and `attached` (default 10000). */
  openTimeout?: number;
  /**
   * Ms a publish refused RATE_LIMITED keeps going again (after the relay's `retry_after`, in the
   * order first sent) before it rejects with that error (default 30000).
   */
  rateLimitWait?: number;
  /**
   * Ms a publish refused STORE_UNAVAILABLE (the relay's store cannot take writes) keeps going
   * again (same entry id, in the order first sent) before it rejects with that error (default
   * 60000); the publishes refused behind it reject with it too.
   */
  storeWait?: number;
  /** A WebSocket class (default: the global one). */
  WebSocket?: typeof WebSocket;
}

export interface SendOptions {
  /** Unset: the relay's default (itself "alongside" unless set). */
  multitask?: Multitask | null;
  /** The message to continue from (default: the view's tail for alongside and reject). */
  parentId?: string | null;
  /** The Run whose tool call starts this one (never held back by it). */
  parentRunId?: string | null;
  threadAccess?: ThreadAccess | null;
  /** Already aborted: nothing is sent (ABORTED); aborted later: the Run is cancelled. */
  signal?: AbortSignal | null;
}

export interface CancelOptions {
  reason?: string | null;
  /**
   * Wait until the Run ends (default false); rejects with CANCEL_DENIED if the agent refuses,
   * CONNECTION_CLOSED if the session closes first, NOT_ATTACHED at once (nothing sent) on a
   * write-only session.
   */
  wait?: boolean;
  /** Ms to wait with `wait` (default 30000; null: no limit). */
  timeout?: number | null;
}

export class Session {
  readonly url: string;
  readonly sessionId: string;
  readonly agent: string;
  /** False for a write-only session (`connect(..., {subscribe: false})`). */
  readonly subscribe: boolean;
  readonly clientId: string | null;
  readonly view: View;
  onRefusedMessage: ((refused: Refused) => void) | null;
  readonly connected: boolean;
  readonly closed: boolean;
  send(message: string | UIMessage, options?: SendOptions): Promise<ClientRun>;
  /** With `wait`: rejects with CANCEL_DENIED if refused, EPOCH_MISMATCH if a reset loses the Run. */
  cancel(runId: string, options?: CancelOptions): Promise<void>;
  /** Answer questions a paused Run waits on; rejects with VALIDATION_ERROR, INTERRUPT_ANSWER_INVALID or INTERRUPT_EXPIRED. */
  resume(runId: string, responses: Record<string, unknown>): Promise<void>;
  /** The oldest Run that waits on questions, with them; null if none (NOT_ATTACHED when write-only). */
  pausedRun(): { runId: string; interrupts: Interrupt[] } | null;
  /** End a pause without answers: each waiting call gets "The user declined to answer ...". */
  cancelPause(runId: string, options?: { reason?: string | null }): Promise<void>;
  /** A handle on a Run the view knows (RUN_NOT_FOUND otherwise); any run id when write-only. */
  run(runId: string): ClientRun;
  onState(fn: (state: ConnectionState) => void): () => void;
  on(event: "state", fn: (state: ConnectionState) => void): () => void;
  close(): Promise<void>;
}

export function connect(url: string, sessionId: string, options?: ConnectOptions): Promise<Session>;
