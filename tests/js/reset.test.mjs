// runwire.js after a reset (the relay lost the history): what the view reports, and what the Run
// handles of a Run the reset lost do (tests/integration/test_reset_view.py checks the Python one).
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { FAST, until, withTimeout } from "./waits.mjs";

const lostError = (runId) => (e) => e.code === "EPOCH_MISMATCH" && e.details.run_id === runId;

test("a reset reports removed messages and Runs, after the page's events", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const lost = await session.send("old question");
  const kept = await session.send("another");
  const gone = lost.steer("pending");
  await withTimeout(gone.published);
  await until(() => session.view.getMessages().length === 3);
  const [p1, p2, s1] = session.view.getMessages().map((vm) => vm.message.id);
  const seen = [];
  session.view.on("message", (e) => seen.push(["message", e.op, e.message.message.id]));
  session.view.on("run", (e) => seen.push(["run", e.op, e.run.runId]));
  relay.loseHistory(relay.entries.filter((e) => e.run_id === kept.runId));
  relay.dropAll();
  await until(() => seen.some((e) => e[1] === "removed"));
  assert.deepEqual(seen, [
    ["run", "changed", kept.runId],
    ["message", "added", p2],
    ["message", "removed", p1],
    ["message", "removed", s1],
    ["run", "removed", lost.runId],
  ]);
  assert.deepEqual(
    session.view.getMessages().map((vm) => vm.message.id),
    [p2],
  );
  await session.close();
});

test("result() and cancel({wait}) of a Run a reset lost reject EPOCH_MISMATCH; a kept Run's resolve", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const lost = await session.send("old question");
  const kept = await session.send("another");
  await until(() => session.view.run(kept.runId) !== null);
  const lostResult = lost.result();
  const keptResult = kept.result();
  const cancelling = session.cancel(lost.runId, { wait: true, timeout: null });
  lostResult.catch(() => {});
  cancelling.catch(() => {});
  await until(() => relay.frames("publish").some((f) => f.entry.kind === "cancel"));
  await until(() => relay.entries.some((e) => e.kind === "cancel"));
  await new Promise((r) => setTimeout(r, 10)); // the ack arrives
  relay.loseHistory(relay.entries.filter((e) => e.run_id === kept.runId && e.kind === "message"));
  relay.dropAll();
  await assert.rejects(withTimeout(lostResult), lostError(lost.runId));
  await assert.rejects(withTimeout(cancelling), lostError(lost.runId));
  // The Run the rebuilt view knows goes on.
  relay.publish({ kind: "run", id: "k-end", run_id: kept.runId, status: "complete" });
  assert.equal((await withTimeout(keptResult)).status, "complete");
  // A handle made after the reset is not failed by it.
  const fresh = await session.send("again");
  const early = await Promise.race([fresh.result().then(() => "settled", () => "rejected"), new Promise((r) => setTimeout(() => r("waiting"), 50))]);
  assert.equal(early, "waiting");
  await session.close();
});
