// The shared JSON vectors (tests/vectors/tree/*.json) against the JavaScript ConversationTree,
// checked exactly as tests/transport/test_tree.py checks the Python one. Run: node --test tests/js/
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { ConversationTree, RunwireError, messageText, userMessage } from "../../client_side/js/dist/runwire.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const VECTOR_DIR = join(ROOT, "tests", "vectors", "tree");
const VECTORS = readdirSync(VECTOR_DIR)
  .filter((name) => name.endsWith(".json"))
  .sort();

function observed(tree, expect) {
  const all = tree.messages();
  const messages = [];
  expect.messages.forEach((exp, i) => {
    const vm = all[i];
    if (vm === undefined) return;
    const got = {
      id: vm.message.id,
      role: vm.message.role,
      run_id: vm.runId,
      text: messageText(vm.message),
      parent_id: vm.parentId,
    };
    if ("parts" in exp) got.parts = vm.message.parts;
    if ("metadata" in exp) got.metadata = vm.message.metadata;
    messages.push(got);
  });
  for (const vm of all.slice(expect.messages.length)) messages.push({ unexpected: vm.message.id });
  const outcomes = {};
  for (const [mid, exp] of Object.entries(expect.outcomes)) {
    const rec = tree.outcome(mid);
    outcomes[mid] =
      rec === null ? null : { run_id: rec.runId, consumed: rec.consumed, run_terminal_reason: rec.runTerminalReason };
    if (rec !== null && exp !== null && "refused" in exp) outcomes[mid].refused = rec.refused ? rec.refused.code : null;
  }
  const runs = tree.runs().map((r) => ({ run_id: r.runId, status: r.status, end_reason: r.endReason }));
  const got = { messages, runs, outcomes };
  if ("parents" in expect) {
    // where messages off the active branch were placed
    got.parents = {};
    for (const mid of Object.keys(expect.parents)) {
      const vm = tree.message(mid);
      got.parents[mid] = vm === null || vm === undefined ? null : vm.parentId;
    }
  }
  return got;
}

test("there are enough vectors", () => {
  assert.ok(VECTORS.length >= 10);
});

for (const name of VECTORS) {
  test(`vector ${name.replace(/\.json$/, "")}`, () => {
    const vector = JSON.parse(readFileSync(join(VECTOR_DIR, name), "utf8"));
    const { expect } = vector;
    const aimed = vector.entries
      .filter((e) => e.kind === "message" && (e.intent ?? "prompt") !== "prompt")
      .map((e) => e.message.id);
    for (const mid of aimed) assert.ok(mid in expect.outcomes, "a vector lists every aimed message's outcome");

    // As delivered, in the listed order.
    const tree = new ConversationTree();
    const events = [];
    const messageEvents = [];
    for (const entry of vector.entries) {
      const got = tree.fold(entry);
      events.push(...got);
      for (const e of got) if (e.kind === "message") messageEvents.push([entry.serial, e.op, e.message.message.id, e.shown]);
    }
    assert.deepEqual(observed(tree, expect), expect);
    // [serial folded, op, message id, shown]
    if ("message_events" in vector) assert.deepEqual(messageEvents, vector.message_events);
    const delivered = events.filter((e) => e.kind === "delivery").map((e) => e.outcome);
    assert.equal(new Set(delivered.map((r) => r.messageId)).size, delivered.length, "an outcome reported twice");
    const resolved = Object.entries(expect.outcomes)
      .filter(([, o]) => o !== null)
      .map(([mid]) => mid)
      .sort();
    assert.deepEqual(delivered.map((r) => r.messageId).sort(), resolved);
    for (const record of delivered) assert.deepEqual(tree.outcome(record.messageId), record);

    // All at once as one batch, newest first (the first delivery of each serial wins).
    const first = new Map();
    for (const entry of vector.entries) if (!first.has(entry.serial)) first.set(entry.serial, entry);
    const again = new ConversationTree();
    again.foldOlder([...first.keys()].sort((a, b) => b - a).map((s) => first.get(s)));
    assert.deepEqual(observed(again, expect), expect);
  });
}

// ---------------------------------------------------------------- the API around the vectors ---

const prompt = (serial, mid, runId, text = "q", extra = {}) => ({
  serial,
  id: `e${serial}`,
  run_id: runId,
  kind: "message",
  intent: "prompt",
  message: userMessage(text, { id: mid }),
  client_id: "c1",
  user_id: "u1",
  ...extra,
});
const open = (serial, runId, mid, extra = {}) => ({
  serial,
  id: `e${serial}`,
  run_id: runId,
  kind: "response_open",
  message_id: mid,
  ...extra,
});
const delta = (serial, runId, mid, text) => ({
  serial,
  id: `e${serial}`,
  run_id: runId,
  kind: "response_append",
  message_id: mid,
  chunks: [{ type: "text-delta", delta: text }],
});
const ids = (tree) => tree.messages().map((vm) => vm.message.id);

test("fold reports run, message and update events with camelCase snapshots", () => {
  const tree = new ConversationTree();
  const events = tree.fold(prompt(1, "m1", "r1", "hello"));
  assert.deepEqual(
    events.map((e) => e.kind),
    ["run", "message"],
  );
  assert.deepEqual(events[0].run, {
    runId: "r1",
    status: "pending",
    clientId: "c1",
    userId: "u1",
    endReason: null,
    error: null,
    agent: "default",
  });
  assert.equal(events[1].op, "added");
  assert.equal(events[1].message.intent, "prompt");
  tree.fold(open(2, "r1", "m2"));
  const [grew] = tree.fold(delta(3, "r1", "m2", "Hi"));
  assert.equal(grew.op, "updated");
  assert.equal(messageText(grew.message.message), "Hi");
  assert.equal(grew.message.serial, 2, "a response's serial is its open's");
  assert.deepEqual(tree.fold(delta(3, "r1", "m2", "again")), [], "a serial already folded");
  assert.equal(tree.oldestSerial, 1);
  assert.equal(tree.newestSerial, 3);
});

test("invalid or unstamped entries throw VALIDATION_ERROR and fold nothing", () => {
  const tree = new ConversationTree();
  for (const bad of [
    { kind: "message", serial: 2, id: "x" },
    { kind: "nope", serial: 1, id: "x", run_id: "r" },
    { ...prompt(1, "m1", "r1"), extra: true },
    { ...prompt(1, "m1", "r1"), serial: undefined },
    { ...delta(1, "r1", "m1", "x"), chunks: [] },
  ]) {
    assert.throws(
      () => tree.fold(bad),
      (err) => err instanceof RunwireError && err.code === "VALIDATION_ERROR",
    );
  }
  assert.equal(tree.newestSerial, null);
});

test("branches, selection and tail", () => {
  const tree = new ConversationTree();
  for (const e of [
    prompt(1, "m1", "r1"),
    open(2, "r1", "m2"),
    prompt(3, "m3", "r2"),
    open(4, "r2", "m4"),
    prompt(5, "m5", "r3", "q", { parent_id: "m2" }),
    open(6, "r3", "m6"),
  ]) {
    tree.fold(e);
  }
  assert.deepEqual(ids(tree), ["m1", "m2", "m5", "m6"]);
  assert.deepEqual(tree.branches("m5"), ["m3", "m5"]);
  const events = tree.selectBranch("m3");
  assert.deepEqual(
    events.map((e) => [e.op, e.message.message.id]),
    [
      ["removed", "m5"],
      ["removed", "m6"],
      ["added", "m3"],
      ["added", "m4"],
    ],
  );
  assert.deepEqual(ids(tree), ["m1", "m2", "m3", "m4"]);
  assert.deepEqual(
    tree.messages(["m3", "absent"]).map((vm) => vm.message.id),
    ["m1", "m2", "m4", "m3"],
  );
  assert.deepEqual(tree.selectBranch("nope"), []);
});

test("refused and checkpoint entries: refusals(), checkpoint(), responses() and a retried step", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "m1", "r1", "go"));
  tree.fold({ serial: 2, id: "e2", run_id: "r1", kind: "run", status: "active", durable: true });
  tree.fold({ serial: 3, id: "e3", run_id: "r1", kind: "message", intent: "steer", message: userMessage("x", { id: "s1" }) });
  const events = tree.fold({
    serial: 4,
    id: "e4",
    run_id: "r1",
    kind: "refused",
    message_id: "s1",
    error: { code: "PII_DETECTED", message: "no" },
  });
  assert.deepEqual(
    events.map((e) => (e.kind === "message" ? [e.kind, e.op, e.shown] : [e.kind])),
    [["message", "updated", false], ["message", "removed", false], ["delivery"]],
  );
  assert.equal(events[0].message.refused, true);
  assert.equal(tree.outcome("s1").refused.code, "PII_DETECTED");
  assert.deepEqual(ids(tree), ["m1"]);
  assert.deepEqual(tree.inputs("r1"), []);
  assert.equal(tree.refusals("r1")[0].intent, "steer");
  tree.fold(open(5, "r1", "a1"));
  tree.fold(delta(6, "r1", "a1", "half"));
  tree.fold({ serial: 7, id: "e7", run_id: "r1", kind: "checkpoint", step: 1, state: { k: 1 } });
  assert.deepEqual(tree.checkpoint("r1").state, { k: 1 });
  assert.equal(tree.checkpoint("r1").turn, 1);
  tree.fold(open(8, "r1", "a1"));
  assert.equal(messageText(tree.message("a1").message), "");
  assert.deepEqual(
    tree.responses("r1").map((r) => [r.view.message.id, r.closed]),
    [["a1", false]],
  );
  assert.equal(tree.prompt("r1").message.id, "m1");
  assert.throws(() => tree.fold({ serial: 9, id: "e9", run_id: "r1", kind: "checkpoint", step: -1 }), RunwireError);
});

test("interrupt entries: a suspended Run's questions until they are answered or declined", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "m1", "r1", "deploy the api"));
  tree.fold({ serial: 2, kind: "run", id: "a", run_id: "r1", status: "active" });
  const question = { id: "c1#0", kind: "input", reason: "pick_region", message: "Where?", response_schema: { enum: ["eu", "us"] }, tool_call_id: "c1", tool_name: "deploy" };
  tree.fold({ serial: 3, kind: "interrupt", id: "p", run_id: "r1", status: "paused", interrupts: [question], checkpoint: { version: 1 } });
  assert.deepEqual(tree.interrupts("r1"), [], "not waiting until the Run is suspended");
  tree.fold({ serial: 4, kind: "run", id: "s", run_id: "r1", status: "suspended" });
  const [waiting] = tree.interrupts("r1");
  assert.equal(waiting.id, "c1#0");
  assert.equal(waiting.message, "Where?");
  assert.equal(waiting.expires_at, null);
  tree.fold({ serial: 5, kind: "interrupt", id: "r", run_id: "r1", status: "resumed", responses: { "c1#0": "eu" }, interrupts: [{ ...question, response: "eu" }] });
  assert.deepEqual(tree.interrupts("r1"), []);
  assert.throws(
    () => tree.fold({ serial: 6, kind: "interrupt", id: "x", run_id: "r1", status: "maybe" }),
    (err) => err instanceof RunwireError && err.code === "VALIDATION_ERROR",
  );
});
