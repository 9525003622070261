// The generated declarations keep every public name, and its shape, of the hand-written
// runwire.d.ts they replaced (kept here as runwire-v0.d.ts): `tsc -p tests/js/types` fails otherwise.
// View, Delivery, ClientRun and Session are made by the client (connect), so only their instances
// are compared: the old file declared no constructor for them.
import * as New from "../../../client_side/js/lib/index.js";
import type * as Old from "./runwire-v0.js";

type Is<A extends B, B> = A;

export type T_Role = [Is<New.Role, Old.Role>, Is<Old.Role, New.Role>];
export type T_RunStatus = [Is<New.RunStatus, Old.RunStatus>, Is<Old.RunStatus, New.RunStatus>];
export type T_RunEndReason = [Is<New.RunEndReason, Old.RunEndReason>, Is<Old.RunEndReason, New.RunEndReason>];
export type T_Intent = [Is<New.Intent, Old.Intent>, Is<Old.Intent, New.Intent>];
export type T_Multitask = [Is<New.Multitask, Old.Multitask>, Is<Old.Multitask, New.Multitask>];
export type T_ThreadAccess = [Is<New.ThreadAccess, Old.ThreadAccess>, Is<Old.ThreadAccess, New.ThreadAccess>];
export type T_ConnectionState = [Is<New.ConnectionState, Old.ConnectionState>, Is<Old.ConnectionState, New.ConnectionState>];
export type T_TextPart = [Is<New.TextPart, Old.TextPart>, Is<Old.TextPart, New.TextPart>];
export type T_ReasoningPart = [Is<New.ReasoningPart, Old.ReasoningPart>, Is<Old.ReasoningPart, New.ReasoningPart>];
export type T_ToolCallPart = [Is<New.ToolCallPart, Old.ToolCallPart>, Is<Old.ToolCallPart, New.ToolCallPart>];
export type T_ToolResultPart = [Is<New.ToolResultPart, Old.ToolResultPart>, Is<Old.ToolResultPart, New.ToolResultPart>];
export type T_Part = [Is<New.Part, Old.Part>, Is<Old.Part, New.Part>];
export type T_UIMessage = [Is<New.UIMessage, Old.UIMessage>, Is<Old.UIMessage, New.UIMessage>];
export type T_ViewMessage = [Is<New.ViewMessage, Old.ViewMessage>, Is<Old.ViewMessage, New.ViewMessage>];
export type T_Refusal = [Is<New.Refusal, Old.Refusal>, Is<Old.Refusal, New.Refusal>];
export type T_ResponseState = [Is<New.ResponseState, Old.ResponseState>, Is<Old.ResponseState, New.ResponseState>];
export type T_RunInfo = [Is<New.RunInfo, Old.RunInfo>, Is<Old.RunInfo, New.RunInfo>];
export type T_CancelDenial = [Is<New.CancelDenial, Old.CancelDenial>, Is<Old.CancelDenial, New.CancelDenial>];
export type T_OutcomeRecord = [Is<New.OutcomeRecord, Old.OutcomeRecord>, Is<Old.OutcomeRecord, New.OutcomeRecord>];
export type T_MessageEvent = [Is<New.MessageEvent, Old.MessageEvent>, Is<Old.MessageEvent, New.MessageEvent>];
export type T_RunEvent = [Is<New.RunEvent, Old.RunEvent>, Is<Old.RunEvent, New.RunEvent>];
export type T_DeliveryEvent = [Is<New.DeliveryEvent, Old.DeliveryEvent>, Is<Old.DeliveryEvent, New.DeliveryEvent>];
export type T_TreeEvent = [Is<New.TreeEvent, Old.TreeEvent>, Is<Old.TreeEvent, New.TreeEvent>];
export type T_Entry = [Is<New.Entry, Old.Entry>, Is<Old.Entry, New.Entry>];
export const V_PROTOCOL_VERSION: typeof Old.PROTOCOL_VERSION = New.PROTOCOL_VERSION;
export const V_TERMINAL: typeof Old.TERMINAL = New.TERMINAL;
export const V_EVENT_KINDS: typeof Old.EVENT_KINDS = New.EVENT_KINDS;
export const V_CONNECTION_CLOSED: typeof Old.CONNECTION_CLOSED = New.CONNECTION_CLOSED;
export const V_CLOSE_CODES: typeof Old.CLOSE_CODES = New.CLOSE_CODES;
export const V_MULTITASK_STRATEGIES: typeof Old.MULTITASK_STRATEGIES = New.MULTITASK_STRATEGIES;
export type C_RunwireError = Is<New.RunwireError, Old.RunwireError>;
export const K_RunwireError: typeof Old.RunwireError = New.RunwireError;
export const V_newId: typeof Old.newId = New.newId;
export const V_userMessage: typeof Old.userMessage = New.userMessage;
export const V_messageText: typeof Old.messageText = New.messageText;
export const V_endReason: typeof Old.endReason = New.endReason;
export const V_decodeEntry: typeof Old.decodeEntry = New.decodeEntry;
export const V_checkRelayFrame: typeof Old.checkRelayFrame = New.checkRelayFrame;
export const V_endedBeforeStored: typeof Old.endedBeforeStored = New.endedBeforeStored;
export type C_OutcomeBook = Is<New.OutcomeBook, Old.OutcomeBook>;
export const K_OutcomeBook: typeof Old.OutcomeBook = New.OutcomeBook;
export type C_ConversationTree = Is<New.ConversationTree, Old.ConversationTree>;
export const K_ConversationTree: typeof Old.ConversationTree = New.ConversationTree;
export type T_EventMap = [Is<New.EventMap, Old.EventMap>, Is<Old.EventMap, New.EventMap>];
export type C_View = Is<New.View, Old.View>;
export type T_Published = [Is<New.Published, Old.Published>, Is<Old.Published, New.Published>];
export type T_Outcome = [Is<New.Outcome, Old.Outcome>, Is<Old.Outcome, New.Outcome>];
export type T_Interrupt = [Is<New.Interrupt, Old.Interrupt>, Is<Old.Interrupt, New.Interrupt>];
export type T_RunResult = [Is<New.RunResult, Old.RunResult>, Is<Old.RunResult, New.RunResult>];
export type T_QueuedIntent = [Is<New.QueuedIntent, Old.QueuedIntent>, Is<Old.QueuedIntent, New.QueuedIntent>];
export type T_Refused = [Is<New.Refused, Old.Refused>, Is<Old.Refused, New.Refused>];
export type C_Delivery = Is<New.Delivery, Old.Delivery>;
export type C_ClientRun = Is<New.ClientRun, Old.ClientRun>;
export type T_ConnectOptions = [Is<New.ConnectOptions, Old.ConnectOptions>, Is<Old.ConnectOptions, New.ConnectOptions>];
export type T_SendOptions = [Is<New.SendOptions, Old.SendOptions>, Is<Old.SendOptions, New.SendOptions>];
export type T_CancelOptions = [Is<New.CancelOptions, Old.CancelOptions>, Is<Old.CancelOptions, New.CancelOptions>];
export type C_Session = Is<New.Session, Old.Session>;
export const V_connect: typeof Old.connect = New.connect;
