// Folds batches of entry sequences with the JavaScript ConversationTree and prints what a reader
// observes, as JSON, for tests/transport/test_tree_differential.py to compare with the Python
// tree (one `node` process per batch). Not a node:test file.
//
// Usage: node tests/js/tree_fold_batch.mjs CASES.json
//   CASES.json: [{entries: [...], plans: [[STEP, ...], ...]}, ...]
//     STEP: {fold: entry} | {older: [entry, ...]} | {select: message id}
//   prints:     [[{error, summary, events: [[EVENT, ...] per step]} per plan], ...]
// Each plan folds (some of) the case's entries into a new tree, one step at a time: live, as
// history pages, and selecting branches as a reader does; `entries` names what to summarize.
import { readFileSync } from "node:fs";

import { ConversationTree, messageText } from "../../client_side/js/dist/runwire.js";

/** What a reader can observe of `tree`; the same shape as summary() in the Python test. */
function summary(tree, entries) {
  const mids = [];
  const rids = [];
  for (const e of entries) {
    if (e.kind === "message") mids.push(e.message.id);
    if (e.kind === "response_open" || e.kind === "refused") mids.push(e.message_id);
    rids.push(e.run_id);
  }
  const uniq = (xs) => [...new Set(xs)].sort();
  const view = (vm) =>
    vm === null
      ? null
      : [
          vm.message.id,
          vm.parentId,
          vm.message.role,
          vm.runId,
          messageText(vm.message),
          vm.message.parts,
          vm.message.metadata,
          vm.intent,
          vm.serial,
          vm.refused,
        ];
  const record = (rec) =>
    rec === null ? null : [rec.messageId, rec.runId, rec.consumed, rec.runTerminalReason, rec.refused ? rec.refused.code : null];
  const nodes = {};
  const branches = {};
  const outcomes = {};
  for (const mid of uniq(mids)) {
    nodes[mid] = view(tree.message(mid));
    branches[mid] = tree.branches(mid);
    outcomes[mid] = record(tree.outcome(mid));
  }
  const runs = {};
  for (const rid of uniq(rids)) {
    const info = tree.run(rid);
    const prompt = tree.prompt(rid);
    const checkpoint = tree.checkpoint(rid);
    runs[rid] = {
      info: info === null ? null : [info.status, info.endReason, info.clientId, info.userId, info.agent, info.error],
      cancel_requested: tree.cancelRequested(rid),
      denials: tree.cancelDenials(rid).map((d) => [d.cancelId, d.serial, d.reason, d.clientId, d.userId]),
      inputs: tree.inputs(rid).map((vm) => vm.message.id),
      steering: tree.steering(rid).map((vm) => vm.message.id),
      prompt: prompt === null ? null : prompt.message.id,
      responses: tree.responses(rid).map((r) => [r.view.message.id, r.closed, r.seen]),
      pending: tree.pending(rid),
      seen: [...tree.seen(rid)].sort(),
      interrupts: tree.interrupts(rid),
      checkpoint: checkpoint === null ? null : [checkpoint.step, checkpoint.serial, checkpoint.turn, checkpoint.iterations, checkpoint.seen, checkpoint.state],
      refusals: tree.refusals(rid).map((r) => r.messageId),
    };
  }
  return {
    messages: tree.messages().map(view),
    nodes,
    branches,
    outcomes,
    resolved: tree.outcomes.resolved().map((r) => r.messageId),
    runs,
    run_order: tree.runs().map((r) => r.runId),
    waiting: tree.waiting().map((vm) => vm.message.id),
    refusals: tree.refusals().map((r) => [r.messageId, r.runId, r.intent, r.serial, r.error, r.clientId]),
    serials: [tree.oldestSerial, tree.newestSerial],
  };
}

/** An event as the Python test writes it. */
function event(ev) {
  if (ev.kind === "message") return ["message", ev.op, ev.message.message.id, ev.shown];
  if (ev.kind === "run") return ["run", ev.run.runId, ev.run.status];
  return ["delivery", ev.outcome.messageId];
}

/** Run one plan on a new tree. */
function play(steps, entries) {
  const tree = new ConversationTree();
  const events = [];
  try {
    for (const step of steps) {
      let got;
      if ("fold" in step) got = tree.fold(step.fold);
      else if ("older" in step) got = tree.foldOlder(step.older);
      else got = tree.selectBranch(step.select);
      events.push(got.map(event));
    }
  } catch (err) {
    return { error: String(err && err.stack ? err.stack : err), summary: null, events };
  }
  return { error: null, summary: summary(tree, entries), events };
}

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
process.stdout.write(JSON.stringify(cases.map(({ entries, plans }) => plans.map((steps) => play(steps, entries)))));
