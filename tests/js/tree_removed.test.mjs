// A rebuild reports what it takes out of the conversation (op "removed"), as the Python tree does
// (tests/transport/test_tree_removed.py). Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConversationTree, userMessage } from "../../client_side/js/runwire.js";

const prompt = (serial, mid, runId, extra = {}) => ({
  serial,
  id: `e${serial}`,
  run_id: runId,
  kind: "message",
  intent: "prompt",
  message: userMessage(mid, { id: mid }),
  client_id: "c1",
  user_id: "u1",
  ...extra,
});
const steer = (serial, mid, runId) => ({
  serial,
  id: `e${serial}`,
  run_id: runId,
  kind: "message",
  intent: "steer",
  message: userMessage(mid, { id: mid }),
});
const ops = (events) => events.filter((e) => e.kind === "message").map((e) => [e.op, e.message.message.id]);
const ids = (tree) => tree.messages().map((vm) => vm.message.id);

test("a steer shown before its queued prompt loaded is removed when it becomes held", () => {
  const tree = new ConversationTree();
  assert.deepEqual(ops(tree.fold(steer(3, "s1", "r1"))), [["added", "s1"]]);
  assert.deepEqual(ids(tree), ["s1"]);
  const events = tree.foldOlder([prompt(2, "p1", "r1", { multitask: "enqueue", queued: true }), prompt(1, "p0", "r0")]);
  assert.deepEqual(ids(tree), ["p0"]);
  assert.deepEqual(
    tree.waiting().map((vm) => vm.message.id),
    ["p1"],
  );
  assert.deepEqual(ops(events), [
    ["added", "p0"],
    ["removed", "s1"],
  ]);
  const removed = events.find((e) => e.kind === "message" && e.op === "removed");
  assert.deepEqual(removed.message, tree.message("s1"));
  const runs = events.filter((e) => e.kind === "run");
  assert.deepEqual(
    runs.map((e) => [e.run.runId, e.op]),
    [
      ["r0", "changed"],
      ["r1", "changed"],
    ],
  );
  const kinds = events.map((e) => e.kind);
  assert.ok(kinds.indexOf("run") > kinds.lastIndexOf("message"));
});

test("a message that moves off the active branch in a rebuild is removed, after its update", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p0", "r0"));
  tree.fold(prompt(4, "p3", "r3", { parent_id: "p0" }));
  tree.fold(steer(5, "s2", "r2"));
  assert.deepEqual(ids(tree), ["p0", "p3", "s2"]);
  const events = tree.foldOlder([prompt(2, "p2", "r2", { parent_id: "p0" })]);
  assert.deepEqual(ids(tree), ["p0", "p3"]);
  assert.equal(tree.message("s2").parentId, "p2");
  const got = ops(events);
  assert.deepEqual(got[got.length - 1], ["removed", "s2"]);
  assert.ok(got.findIndex(([op, id]) => op === "updated" && id === "s2") >= 0);
});

test("removedSince: what a reset takes away, messages then Runs", () => {
  const before = new ConversationTree();
  before.fold(prompt(1, "p0", "r0"));
  before.fold(prompt(2, "p1", "r1", { parent_id: "p0" }));
  const after = new ConversationTree();
  after.fold(prompt(7, "p7", "r7"));
  const events = after.removedSince(before);
  assert.deepEqual(
    events.map((e) => (e.kind === "message" ? ["message", e.op, e.message.message.id] : ["run", e.op, e.run.runId])),
    [
      ["message", "removed", "p0"],
      ["message", "removed", "p1"],
      ["run", "removed", "r0"],
      ["run", "removed", "r1"],
    ],
  );
});
