import type { RunwireError } from "./errors.js";
// The public types of the runwire client (docs/protocol.md names the fields).

export type Role = "user" | "assistant" | "system";

/** "queued": waiting its turn (multitask enqueue/interrupt/rollback); "pending": not started yet. */
export type RunStatus = "queued" | "pending" | "active" | "suspended" | "complete" | "cancelled" | "error";

export type RunEndReason = "complete" | "cancelled" | "error";

export type Intent = "prompt" | "steer" | "follow_up" | "inject";

/** What a prompt's Run does to the Runs already running in the session. */
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
 * `op: "added"`: a new message, or one already held that came onto the active branch through
 * `selectBranch` or a rebuild. `"updated"`: its content, parent or `refused` changed.
 * `"removed"`: it left `getMessages()`. A fork or rollback left its turn behind, a branch was
 * selected, it was refused, a rebuild moved it, or a reset dropped it.
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

export interface EventMap {
  message: MessageEvent;
  run: RunEvent;
  delivery: DeliveryEvent;
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

/** A function the session calls with each Refused message: `onRefusedMessage`. */
export type RefusedMessageHandler = (refused: Refused) => void;

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
  onRefusedMessage?: RefusedMessageHandler;
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

/** A node of the conversation tree (internal). */
export type TreeNode = { view: ViewMessage; response: boolean; children: string[]; closed: boolean; partIds: Map<string, number> };
/** A Run as the tree folds it (internal). */
export type TreeRun = { info: RunInfo; cancelRequested: boolean; cancels: Set<string>; inputs: string[]; seen: Set<string>; promptId: string | null; held: Entry | null; heldInputs: Entry[]; denials: CancelDenial[]; responses: Map<string, string[]>; checkpoint: Entry | null; questions: any[]; answers: Map<string, unknown>; declined: boolean };
/** A request waiting for its reply (internal). */
export interface PendingRequest {
  data: Record<string, any>;
  /** the frame as sent */
  text: string;
  sentOn: number;
  /** its place in the publish lane; 0 for other requests */
  place: number;
  resolve: (reply: Record<string, any>) => void;
  reject: (error: RunwireError) => void;
  /** it goes back in line after a reconnect: its publish asks the lane for its turn again */
  again?: () => void;
}
