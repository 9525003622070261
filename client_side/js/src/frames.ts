import { decodeEntry, errorBody, invalid, longerThan } from "./entries.js";
import { MULTITASK_STRATEGIES, PROTOCOL_ERROR, RunwireError, VALIDATION_ERROR, isObject } from "./errors.js";
import { connect } from "./index.js";

export const RELAY_FRAME_FIELDS = {
  "welcome": {
    "v": ["int", "default"],
    "req": ["req", "optional"],
    "client_id": ["str", "required"],
    "user_id": ["str", "optional"],
    "connection_id": ["str", "required"],
    "max_frame_bytes": ["int", "required"],
    "multitask": ["multitask", "optional"],
    "agent_grace": ["seconds", "optional"]
  },
  "attached": {
    "req": ["req", "required"],
    "session_id": ["str", "required"],
    "epoch": ["str", "required"],
    "head": ["serial", "required"],
    "entries": ["entries", "required"],
    "has_older": ["bool", "required"],
    "reset": ["bool", "default"]
  },
  "ack": {
    "req": ["req", "required"],
    "serial": ["serial", "optional"],
    "duplicate": ["bool", "default"]
  },
  "page": {
    "req": ["req", "required"],
    "session_id": ["str", "required"],
    "entries": ["entries", "required"],
    "has_older": ["bool", "required"]
  },
  "deliver": {
    "session_id": ["str", "required"],
    "entries": ["entries", "required"]
  },
  "dispatch": {
    "session_id": ["str", "required"],
    "run_id": ["str", "required"],
    "agent": ["str", "required"],
    "message_id": ["str", "required"],
    "adopted": ["bool", "optional"],
    "checkpoint": ["object", "optional"]
  },
  "error": {
    "req": ["req", "optional"],
    "session_id": ["str", "optional"],
    "error": ["error", "required"]
  }
};

/**
 * RELAY_FRAME_FIELDS as flat lists, made once: checking a frame walks its type's list.
 * @type {Map<string, {name: string, kind: string, rule: string, where: string}[]>}
 */
export const FRAME_CHECKS: Map<string, { name: string; kind: string; rule: string; where: string; }[]> = new Map(
  Object.entries(RELAY_FRAME_FIELDS).map(([type, fields]) => [
    type,
    Object.entries(fields).map(([name, [kind, rule]]) => ({ name, kind, rule, where: `${type}.${name}` })),
  ]),
);

/**
 * Check one relay frame field's value (present and not null) against its kind.
 * @param {string} kind @param {any} v @param {string} where
 */
export function checkFrameField(kind: string, v: any, where: string) {
  switch (kind) {
    case "int":
      if (!Number.isInteger(v)) invalid(where, "must be an integer");
      return;
    case "serial":
      if (!Number.isInteger(v) || v < 0) invalid(where, "must be a non-negative integer");
      return;
    case "req":
      if (!Number.isInteger(v) && (typeof v !== "string" || longerThan(v, 100))) {
        invalid(where, "must be an integer or a string of at most 100 characters");
      }
      return;
    case "str":
      if (typeof v !== "string") invalid(where, "must be a string");
      return;
    case "bool":
      if (typeof v !== "boolean") invalid(where, "must be a boolean");
      return;
    case "object":
      if (!isObject(v)) invalid(where, "must be an object");
      return;
    case "entries":
      if (!Array.isArray(v)) invalid(where, "must be a list");
      for (let i = 0; i < v.length; i++) if (!isObject(v[i])) invalid(`${where}.${i}`, "must be an object");
      return;
    case "multitask":
      if (!MULTITASK_STRATEGIES.includes(v)) invalid(where, `must be one of ${MULTITASK_STRATEGIES.join(", ")}`);
      return;
    case "seconds":
      if (typeof v !== "number" || !Number.isFinite(v) || v < 0) invalid(where, "must be a number of seconds, not negative");
      return;
    case "error":
      errorBody(v, where, true); // unknown fields are not refused, as in the frames
      return;
    default:
      throw new Error(`runwire: RELAY_FRAME_FIELDS names an unknown kind ${kind}`);
  }
}

/**
 * Check a relay frame's fields as transport.codec.decode_relay_frame does. Each field must have
 * its type: strings, objects, lists of objects, an error body, a multitask strategy. An integer
 * must be a JSON integer, not a boolean, a string or a number with a fraction part. A boolean
 * must be `true` or `false` only. A field may be null only where it is optional, and a required
 * one must be present. The entries of
 * `deliver`, `attached` and `page` must be objects; what is in each is decodeEntry's business.
 * Unlike Python's models, it ignores fields it does not know (docs/protocol.md asks clients to),
 * and a frame of a type it does not know. JSON.parse makes `5.0` and `1e3` the integers 5 and
 * 1000, so an integer field takes them here, though Python refuses them. The session drops a frame
 * this refuses, as the Python client drops a frame it cannot decode (and fails the connect on a
 * welcome it cannot read).
 * @param {any} frame
 * @throws {RunwireError} VALIDATION_ERROR, or PROTOCOL_ERROR for a frame that is not an object
 */
export function checkRelayFrame(frame: any) {
  if (!isObject(frame)) throw new RunwireError(PROTOCOL_ERROR, "frame must be a JSON object");
  const checks = FRAME_CHECKS.get(frame.type);
  if (checks === undefined) return;
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i];
    const v = frame[c.name];
    if (v === undefined) {
      if (c.rule === "required") invalid(c.where, "field required");
    } else if (v !== null || c.rule !== "optional") checkFrameField(c.kind, v, c.where);
  }
}
