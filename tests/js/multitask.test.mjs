// Multitasking in runwire.js, as tests/transport/test_tree_multitask.py checks it in Python: queued
// prompts join at their turn, rollback branches, refused cancels; and the Session's send/cancel.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConversationTree, MULTITASK_STRATEGIES, RunwireError, connect, decodeEntry, userMessage } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { until, withTimeout } from "./waits.mjs";

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
const run = (serial, runId, status) => ({ serial, id: `e${serial}`, run_id: runId, kind: "run", status });
const cancel = (serial, runId, extra = {}) => ({ serial, id: `e${serial}`, run_id: runId, kind: "cancel", ...extra });
const answer = (serial, runId, mid, text) => [
  { serial, id: `e${serial}`, run_id: runId, kind: "response_open", message_id: mid },
  { serial: serial + 1, id: `e${serial + 1}`, run_id: runId, kind: "response_append", message_id: mid, chunks: [{ type: "text-delta", delta: text }] },
];
const path = (tree) => tree.messages().map((vm) => [vm.message.id, vm.parentId]);

test("decodeEntry accepts the multitask fields, run pending and cancel_denied", () => {
  const e = decodeEntry(prompt(1, "p1", "r1", { multitask: "rollback", queued: true, interrupts: ["r0"], parent_run_id: "r9", thread_access: "shared" }));
  assert.equal(e.multitask, "rollback");
  assert.equal(e.queued, true);
  assert.deepEqual(e.interrupts, ["r0"]);
  assert.equal(e.parent_run_id, "r9");
  assert.equal(e.thread_access, "shared");
  assert.equal(decodeEntry(run(2, "r1", "pending")).status, "pending");
  assert.equal(decodeEntry(cancel(3, "r1", { interrupted_by: "r2" })).interrupted_by, "r2");
  const denied = decodeEntry({ serial: 4, id: "e4", run_id: "r1", kind: "cancel_denied", cancel_id: "c1", reason: "busy" });
  assert.deepEqual([denied.kind, denied.cancel_id, denied.reason], ["cancel_denied", "c1", "busy"]);
  for (const bad of [
    prompt(1, "p1", "r1", { multitask: "later" }),
    prompt(1, "p1", "r1", { thread_access: "everyone" }),
    prompt(1, "p1", "r1", { queued: "yes" }),
    prompt(1, "p1", "r1", { interrupts: "r0" }),
    prompt(1, "p1", "r1", { interrupts: [""] }),
    run(2, "r1", "queued"),
    cancel(3, "r1", { reason: "x".repeat(1001) }),
    { serial: 4, id: "e4", run_id: "r1", kind: "cancel_denied", cancel_id: "c1", extra: 1 },
  ]) {
    assert.throws(() => decodeEntry(bad), (err) => err instanceof RunwireError && err.code === "VALIDATION_ERROR");
  }
});

test("a queued prompt waits outside the conversation and joins at its turn", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(run(2, "r1", "active"));
  tree.foldOlder(answer(3, "r1", "a1", "first "));
  let events = tree.fold(prompt(5, "p2", "r2", { multitask: "enqueue", queued: true, parent_id: "p1" }));
  assert.deepEqual(events.map((e) => e.kind), ["run"]);
  assert.equal(tree.run("r2").status, "queued");
  assert.deepEqual(tree.waiting().map((vm) => vm.message.id), ["p2"]);
  assert.notEqual(tree.message("p2"), null);
  tree.foldOlder(answer(6, "r1", "a1b", "answer"));
  tree.fold(run(8, "r1", "complete"));
  assert.deepEqual(path(tree), [["p1", null], ["a1", "p1"], ["a1b", "a1"]]);
  events = tree.fold(run(9, "r2", "pending"));
  // It joins beside r1's answer, which leaves the view.
  assert.deepEqual(
    events.map((e) => (e.kind === "message" ? [e.op, e.message.message.id] : [e.kind])),
    [["run"], ["added", "p2"], ["removed", "a1"], ["removed", "a1b"]],
  );
  assert.equal(tree.message("p2").parentId, "p1");
  assert.deepEqual(tree.waiting(), []);
});

test("a queued prompt without a parent goes after what came before its turn", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(prompt(2, "p2", "r2", { multitask: "interrupt", queued: true, interrupts: ["r1"] }));
  tree.fold(cancel(3, "r1", { interrupted_by: "r2" }));
  tree.foldOlder(answer(4, "r1", "a1", "partial"));
  tree.fold(run(6, "r1", "cancelled"));
  tree.fold(run(7, "r2", "pending"));
  tree.foldOlder(answer(8, "r2", "a2", "fresh"));
  assert.deepEqual(path(tree), [["p1", null], ["a1", "p1"], ["p2", "a1"], ["a2", "p2"]]);
  assert.deepEqual(tree.messages().map((vm) => vm.serial), [1, 4, 2, 8]);
});

test("steering aimed at a queued Run waits with its prompt", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(prompt(2, "p2", "r2", { multitask: "enqueue", queued: true }));
  const steer = { ...prompt(3, "s1", "r2"), intent: "steer" };
  assert.deepEqual(tree.fold(steer), []);
  assert.deepEqual(tree.inputs("r2").map((vm) => vm.message.id), ["s1"]);
  assert.deepEqual(tree.pending("r2"), ["s1"]);
  assert.deepEqual(path(tree), [["p1", null]]);
  const events = tree.fold(run(4, "r2", "pending"));
  assert.deepEqual(events.map((e) => e.kind), ["run", "message", "message"]);
  assert.deepEqual(path(tree), [["p1", null], ["p2", "p1"], ["s1", "p2"]]);
});

test("a queued Run that ends never adds its prompt", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(prompt(2, "p2", "r2", { multitask: "enqueue", queued: true }));
  tree.fold(cancel(3, "r2"));
  tree.fold(run(4, "r2", "cancelled"));
  assert.deepEqual(path(tree), [["p1", null]]);
  assert.deepEqual(tree.waiting(), []);
  assert.equal(tree.run("r2").endReason, "cancelled");
  assert.notEqual(tree.message("p2"), null, "a held prompt stays findable");
});

test("rollback puts the interrupted turn on its own branch", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p0", "r0"));
  tree.foldOlder(answer(2, "r0", "a0", "hello"));
  tree.fold(run(4, "r0", "complete"));
  tree.fold(prompt(5, "p1", "r1", { parent_id: "a0" }));
  tree.foldOlder(answer(6, "r1", "a1", "Lisbon is"));
  tree.fold(prompt(8, "p2", "r2", { multitask: "rollback", queued: true, interrupts: ["r1"] }));
  tree.fold(run(9, "r1", "cancelled"));
  tree.fold(run(10, "r2", "pending"));
  assert.deepEqual(path(tree), [["p0", null], ["a0", "p0"], ["p2", "a0"]]);
  assert.deepEqual(tree.branches("p2"), ["p1", "p2"]);
  tree.selectBranch("a1");
  assert.deepEqual(tree.messages().map((vm) => vm.message.id), ["p0", "a0", "p1", "a1"]);
});

test("rollback of the first turn starts a new root", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(prompt(2, "p2", "r2", { multitask: "rollback", queued: true, interrupts: ["r1"] }));
  tree.fold(run(3, "r1", "cancelled"));
  tree.fold(run(4, "r2", "pending"));
  assert.deepEqual(path(tree), [["p2", null]]);
  assert.deepEqual(tree.branches("p1"), ["p1", "p2"]);
});

test("a rollback that names its own branch keeps it", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.foldOlder(answer(2, "r1", "a1", "x"));
  tree.fold(prompt(4, "p2", "r2", { multitask: "rollback", queued: true, interrupts: ["r1"], parent_id: "a1" }));
  tree.fold(run(5, "r1", "cancelled"));
  tree.fold(run(6, "r2", "pending"));
  assert.deepEqual(path(tree), [["p1", null], ["a1", "p1"], ["p2", "a1"]]);
});

test("a refused cancel leaves another device's cancel standing", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(run(2, "r1", "active"));
  tree.fold({ serial: 3, id: "phone", run_id: "r1", kind: "cancel", client_id: "d1" });
  tree.fold({ serial: 4, id: "laptop", run_id: "r1", kind: "cancel", client_id: "d2" });
  tree.fold({ serial: 5, id: "x1", run_id: "r1", kind: "cancel_denied", cancel_id: "phone", client_id: "agent" });
  assert.equal(tree.cancelRequested("r1"), true, "the laptop's cancel is unanswered");
  tree.fold({ serial: 6, id: "x2", run_id: "r1", kind: "cancel_denied", cancel_id: "laptop", client_id: "agent" });
  assert.equal(tree.cancelRequested("r1"), false);
  tree.fold({ serial: 7, id: "again", run_id: "r1", kind: "cancel", client_id: "d1" });
  tree.fold({ serial: 8, id: "x3", run_id: "r1", kind: "cancel_denied", client_id: "agent" });
  assert.equal(tree.cancelRequested("r1"), false, "a refusal that names no cancel refuses them all");
});

test("a refused cancel clears the request and is kept", () => {
  const tree = new ConversationTree();
  tree.fold(prompt(1, "p1", "r1"));
  tree.fold(run(2, "r1", "active"));
  tree.fold({ serial: 3, id: "c1", run_id: "r1", kind: "cancel", user_id: "u2", client_id: "d2" });
  assert.equal(tree.cancelRequested("r1"), true);
  tree.fold({ serial: 4, id: "e4", run_id: "r1", kind: "cancel_denied", cancel_id: "c1", client_id: "agent" });
  assert.equal(tree.cancelRequested("r1"), false);
  const denial = tree.cancelDenial("c1");
  assert.deepEqual(
    { runId: denial.runId, clientId: denial.clientId, cancelId: denial.cancelId, serial: denial.serial, reason: denial.reason },
    { runId: "r1", clientId: "agent", cancelId: "c1", serial: 4, reason: null },
  );
  assert.deepEqual(tree.cancelDenials("r1"), [denial]);
  assert.equal(tree.cancelDenial("other"), null);
  assert.equal(tree.run("r1").status, "active");
});

test("history in any order gives the same branches", () => {
  const entries = [
    prompt(1, "p1", "r1"),
    ...answer(2, "r1", "a1", "one"),
    prompt(4, "p2", "r2", { multitask: "rollback", queued: true, interrupts: ["r1"] }),
    run(5, "r1", "cancelled"),
    run(6, "r2", "pending"),
    ...answer(7, "r2", "a2", "two"),
  ];
  const live = new ConversationTree();
  for (const entry of entries) live.fold(entry);
  const paged = new ConversationTree();
  paged.foldOlder(entries.slice(4));
  paged.foldOlder(entries.slice(0, 4));
  assert.deepEqual(path(paged), [["p2", null], ["a2", "p2"]]);
  assert.deepEqual(path(live), path(paged));
});

// ------------------------------------------------------------------------------ the session ---

test("send names every strategy; waiting ones name no parent unless asked", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const first = await withTimeout(session.send("one", { threadAccess: "shared" }));
  assert.equal(relay.frames("publish")[0].entry.thread_access, "shared");
  await until(() => session.view.getMessages().length === 1);
  for (const multitask of MULTITASK_STRATEGIES) {
    await withTimeout(session.send(multitask, { multitask, parentRunId: first.runId }));
    const { entry } = relay.frames("publish").at(-1);
    assert.equal(entry.multitask, multitask);
    assert.equal(entry.parent_run_id, first.runId);
    const tailed = multitask === "alongside" || multitask === "reject";
    assert.equal(entry.parent_id !== undefined, tailed, `${multitask} names the tail as parent only for alongside and reject`);
  }
  await withTimeout(session.send("here", { multitask: "enqueue", parentId: first.prompt.id }));
  assert.equal(relay.frames("publish").at(-1).entry.parent_id, first.prompt.id);
  await assert.rejects(session.send("x", { multitask: "later" }), (e) => e.code === "VALIDATION_ERROR");
  const aborted = new AbortController();
  aborted.abort();
  const before = relay.frames("publish").length;
  await assert.rejects(session.send("x", { signal: aborted.signal }), (e) => e.code === "ABORTED");
  assert.equal(relay.frames("publish").length, before);
  await session.close();
});

test("a queued Run's handle finds its waiting prompt; an abort signal cancels a sent Run", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  await withTimeout(session.send("one"));
  // Another client's prompt, as the relay stores it: stamped queued.
  const { id, serial, ...stamped } = prompt(0, "p2", "r2", { multitask: "enqueue", queued: true });
  relay.publish({ ...stamped, id: "other-prompt" }, "other");
  await until(() => session.view.waiting().length === 1);
  assert.equal(session.view.run("r2").status, "queued");
  assert.equal(session.run("r2").status, "queued");
  assert.equal(session.run("r2").prompt.id, "p2");
  assert.equal(session.view.getMessages().length, 1);
  relay.publish({ kind: "run", id: "turn", run_id: "r2", status: "pending" });
  await until(() => session.view.getMessages().length === 2);
  assert.deepEqual(session.view.waiting(), []);

  const controller = new AbortController();
  const sent = await withTimeout(session.send("three", { multitask: "enqueue", signal: controller.signal }));
  controller.abort();
  await until(() => relay.frames("publish").some((f) => f.entry.kind === "cancel" && f.entry.run_id === sent.runId));
  await session.close();
});

test("cancel with wait rejects with CANCEL_DENIED when the agent refuses it", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const handle = await withTimeout(session.send("work"));
  relay.publish({ kind: "run", id: "act", run_id: handle.runId, status: "active" });
  await until(() => handle.status === "active");
  const cancelling = session.cancel(handle.runId, { wait: true, timeout: 2000 });
  await until(() => relay.frames("publish").some((f) => f.entry.kind === "cancel"));
  const cancelId = relay.frames("publish").find((f) => f.entry.kind === "cancel").entry.id;
  relay.publish({ kind: "cancel_denied", id: "no", run_id: handle.runId, cancel_id: cancelId, reason: "almost done" });
  await assert.rejects(withTimeout(cancelling), (e) => {
    assert.ok(e instanceof RunwireError);
    assert.equal(e.code, "CANCEL_DENIED");
    assert.equal(e.text, "almost done");
    assert.deepEqual(e.details, { run_id: handle.runId, cancel_id: cancelId, client_id: "agent-1", user_id: null });
    return true;
  });
  assert.equal(session.view.tree.cancelRequested(handle.runId), false);
  // Through the handle (wait is its default), and without wait nothing is awaited.
  const viaHandle = handle.cancel({ timeout: 2000 });
  await until(() => relay.frames("publish").filter((f) => f.entry.kind === "cancel").length === 2);
  const second = relay.frames("publish").filter((f) => f.entry.kind === "cancel")[1].entry.id;
  relay.publish({ kind: "cancel_denied", id: "no2", run_id: handle.runId, cancel_id: second });
  await assert.rejects(withTimeout(viaHandle), (e) => e.code === "CANCEL_DENIED" && e.text === "the agent refused the cancel");
  await withTimeout(session.cancel(handle.runId));
  await session.close();
});
