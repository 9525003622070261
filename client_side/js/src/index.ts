// @runwire/client: the runwire client for browsers, Node, Deno, Bun and React Native.
//
// It speaks the wire protocol of docs/protocol.md over a plain WebSocket and mirrors the Python
// client (client_side) in JavaScript's conventions:
//
//   import { connect } from "@runwire/client";
//   const session = await connect("ws://127.0.0.1:8787", "trip-42");
//   const run = await session.send("Plan a 3-day trip to Lisbon.");
//   const { published, outcome } = run.steer("Make it 5 days, and keep it under £800.");
//   const { serial } = await published;
//   const { consumed, runTerminalReason } = await outcome;
//   session.view.on("message", (event) => render(session.view.getMessages()));
//
// The conversation tree (ConversationTree, OutcomeBook) is a faithful port of transport/tree.py and
// transport/outcomes.py; the JSON vectors in tests/vectors/tree/ run against both. PublishLane is a
// port of transport/lane.py; the vectors in tests/vectors/lane/ run against both.

import type { ConnectOptions } from "./types.js";
import { Session } from "./session.js";

export type {
  Role,
  RunStatus,
  RunEndReason,
  Intent,
  Multitask,
  ThreadAccess,
  ConnectionState,
  TextPart,
  ReasoningPart,
  ToolCallPart,
  ToolResultPart,
  SourceUrlPart,
  SourceDocumentPart,
  FilePart,
  DataPart,
  Part,
  UIMessage,
  ViewMessage,
  Refusal,
  ResponseState,
  RunInfo,
  CancelDenial,
  OutcomeRecord,
  MessageEvent,
  RunEvent,
  DeliveryEvent,
  TreeEvent,
  Entry,
  EventMap,
  Published,
  Outcome,
  Interrupt,
  RunResult,
  QueuedIntent,
  Refused,
  RefusedMessageHandler,
  ConnectOptions,
  SendOptions,
  CancelOptions,
} from "./types.js";
export {
  CLOSE_CODES,
  CONNECTION_CLOSED,
  CredentialsError,
  ERROR_GROUPS,
  EVENT_KINDS,
  FinalError,
  MULTITASK_STRATEGIES,
  PROTOCOL_VERSION,
  RequestError,
  RetryableError,
  RunwireError,
  TERMINAL,
  endReason,
  errorGroup,
  messageText,
  newId,
  userMessage,
} from "./errors.js";
export type { ErrorClass, ErrorGroupName } from "./errors.js";
export { decodeEntry } from "./entries.js";
export { checkRelayFrame } from "./frames.js";
export { OutcomeBook, endedBeforeStored } from "./outcomes.js";
export { ConversationTree } from "./tree.js";
export { PublishLane } from "./lane.js";
export { View } from "./view.js";
export { ClientRun, Delivery } from "./runs.js";
export { Session } from "./session.js";
export type { ChunksOptions, ReplyChunk } from "./chunks.js";
export { entryChunks } from "./chunks.js";

/**
 * Connect to the relay at `url` (ws:// or wss://) and attach to `sessionId`. Resolves to the
 * Session once attached; rejects with RunwireError (CONNECTION_CLOSED when the relay cannot be
 * reached, UNAUTHORIZED, TOKEN_EXPIRED, ...). Afterwards the session reconnects by itself
 * (exponential backoff with full jitter, a fresh token from `tokenProvider` if given) and resumes
 * from the last serial it saw.
 * @param {string} url @param {string} sessionId @param {ConnectOptions} [options]
 * @returns {Promise<Session>}
 */
export function connect(url: string, sessionId: string, options: ConnectOptions = {}): Promise<Session> {
  try {
    return new Session(url, sessionId, options)._start();
  } catch (err) {
    return Promise.reject(err);
  }
}
