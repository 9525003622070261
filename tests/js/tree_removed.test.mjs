// Every change of messages() is reported, as the Python tree does (tests/transport/test_tree_removed.py):
// op "removed" for what leaves it, "added" for what joins it (rebuilds, live forks and rollbacks,
// refusals, selectBranch), and `shown` for whether each event's message is in it.
// Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConversationTree, View, userMessage } from "../../client_side/js/dist/runwire.js";

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

// ------------------------------------------------ every change of the visible path ---
// A UI that follows events keeps, by message id, what it shows: it upserts on "added" / "updated"
// of a message the event says is shown, and drops it otherwise ("removed", or an event about a
// message off the active branch). After each call it shows messages(). As in Python
// (tests/transport/test_tree_removed.py).

const open = (serial, runId, mid) => ({ serial, id: `e${serial}`, run_id: runId, kind: "response_open", message_id: mid });
const text = (serial, runId, mid, delta) => ({
  serial,
  id: `e${serial}`,
  run_id: runId,
  kind: "response_append",
  message_id: mid,
  chunks: [{ type: "text-delta", delta }],
});
const run = (serial, runId, status) => ({ serial, id: `e${serial}`, run_id: runId, kind: "run", status });
const shownOps = (events) => events.filter((e) => e.kind === "message").map((e) => [e.op, e.message.message.id, e.shown]);

function forked() {
  const tree = new ConversationTree();
  for (const e of [
    prompt(1, "m1", "r1"),
    open(2, "r1", "m2"),
    prompt(3, "m3", "r2"),
    open(4, "r2", "m4"),
    prompt(5, "m5", "r3", { parent_id: "m2" }),
    open(6, "r3", "m6"),
  ]) {
    tree.fold(e);
  }
  assert.deepEqual(ids(tree), ["m1", "m2", "m5", "m6"]);
  return tree;
}

test("selectBranch removes what leaves the path, then adds what joins it", () => {
  const tree = forked();
  const events = tree.selectBranch("m3");
  assert.deepEqual(ids(tree), ["m1", "m2", "m3", "m4"]);
  assert.deepEqual(shownOps(events), [
    ["removed", "m5", false],
    ["removed", "m6", false],
    ["added", "m3", true],
    ["added", "m4", true],
  ]);
  assert.deepEqual(
    events.filter((e) => e.op === "added").map((e) => e.message),
    tree.messages().slice(2),
  );
  assert.deepEqual(tree.selectBranch("m4"), []);
  assert.deepEqual(shownOps(tree.selectBranch("m6")), [
    ["removed", "m3", false],
    ["removed", "m4", false],
    ["added", "m5", true],
    ["added", "m6", true],
  ]);
});

test("a fork above the tip from another device removes the turn it leaves", () => {
  const tree = forked();
  const events = tree.fold(prompt(7, "m7", "r4", { parent_id: "m1" }));
  assert.deepEqual(ids(tree), ["m1", "m7"]);
  assert.deepEqual(
    events.map((e) => e.kind),
    ["run", "message", "message", "message", "message"],
  );
  assert.deepEqual(shownOps(events), [
    ["added", "m7", true],
    ["removed", "m2", false],
    ["removed", "m5", false],
    ["removed", "m6", false],
  ]);
  // The Run left behind goes on streaming on its own branch: not shown.
  assert.deepEqual(shownOps(tree.fold(text(8, "r3", "m6", "more"))), [["updated", "m6", false]]);
  assert.deepEqual(shownOps(tree.fold(steer(9, "s1", "r3"))), [["added", "s1", false]]);
  assert.deepEqual(ids(tree), ["m1", "m7"]);
});

test("a new fork at a selected node removes the selected branch", () => {
  const tree = forked();
  tree.selectBranch("m3");
  assert.deepEqual(shownOps(tree.fold(prompt(7, "m7", "r4", { parent_id: "m2" }))), [
    ["added", "m7", true],
    ["removed", "m3", false],
    ["removed", "m4", false],
  ]);
});

test("growth of a branch not shown is reported as not shown", () => {
  const tree = forked();
  assert.deepEqual(shownOps(tree.fold(prompt(7, "m7", "r4", { parent_id: "m4" }))), [["added", "m7", false]]);
  assert.deepEqual(ids(tree), ["m1", "m2", "m5", "m6"]);
});

test("a rollback at its turn removes the interrupted turn", () => {
  const tree = new ConversationTree();
  for (const e of [
    prompt(1, "m1", "r1"),
    run(2, "r1", "active"),
    open(3, "r1", "m2"),
    text(4, "r1", "m2", "Lisbon"),
    prompt(5, "m3", "r2", { multitask: "rollback", queued: true, interrupts: ["r1"] }),
    run(6, "r1", "cancelled"),
  ]) {
    tree.fold(e);
  }
  assert.deepEqual(ids(tree), ["m1", "m2"]);
  const events = tree.fold(run(7, "r2", "pending"));
  assert.deepEqual(ids(tree), ["m3"]);
  assert.deepEqual(shownOps(events), [
    ["added", "m3", true],
    ["removed", "m1", false],
    ["removed", "m2", false],
  ]);
});

test("a View reports every change of the shown branch to its listeners", () => {
  const view = new View("s", async () => ({ entries: [], hasOlder: false }));
  const shown = new Map();
  view.on("message", (e) => {
    if (e.op !== "removed" && e.shown) shown.set(e.message.message.id, e.message);
    else shown.delete(e.message.message.id);
  });
  const check = () => assert.deepEqual([...shown.keys()], ids(view.tree));
  view._foldLive([prompt(1, "a", "r1"), prompt(2, "b1", "r2")]);
  check();
  view._foldLive([prompt(3, "b2", "r3", { parent_id: "a" })]);
  check();
  assert.deepEqual([...shown.keys()], ["a", "b2"]);
  view.selectBranch("b1");
  check();
  assert.deepEqual([...shown.keys()], ["a", "b1"]);
  view._foldLive([prompt(4, "c", "r4")]); // under the newest branch's tip: not shown
  check();
  view.selectBranch("c");
  check();
  assert.deepEqual([...shown.keys()], ["a", "b2", "c"]);
});

test("a rebuild that moves the selected message away adds the sibling now shown", () => {
  // C1 named a parent not loaded yet, so it went under A; the user selected it over C2.
  const tree = new ConversationTree();
  tree.fold(prompt(3, "A", "rA", { parent_id: "B" }));
  tree.fold(prompt(4, "C1", "r1", { parent_id: "Y" }));
  tree.fold(prompt(5, "C2", "r2", { parent_id: "A" }));
  tree.selectBranch("C1");
  assert.deepEqual(ids(tree), ["A", "C1"]);
  // The older page: C1 belongs under Y, beside A's branch. C2 comes into view unchanged.
  const events = tree.foldOlder([prompt(1, "B", "rB"), prompt(2, "Y", "rY", { parent_id: "B" })]);
  assert.deepEqual(ids(tree), ["B", "A", "C2"]);
  assert.deepEqual(shownOps(events), [
    ["added", "B", true],
    ["added", "Y", false],
    ["updated", "A", true],
    ["updated", "C1", false],
    ["removed", "C1", false],
    ["added", "C2", true],
  ]);
});
