// runwire.js's write-only mode (`connect(url, id, {subscribe: false})`) against the fake relay: a
// token that may publish in a session but not read it connects without attaching; send, steer and
// cancel resolve from their acks, and whatever reads the session rejects or throws NOT_ATTACHED
// at once.
import assert from "node:assert/strict";
import { test } from "node:test";

import { RunwireError, connect } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { withTimeout } from "./waits.mjs";

/** A relay where "reader" may attach and "hook" may only publish. */
function relayWithTokens() {
  const relay = new FakeRelay();
  relay.readers = new Set(["reader"]);
  return relay;
}

const notAttached = (e) => e instanceof RunwireError && e.code === "NOT_ATTACHED" && e.details.subscribe === false;

test("a publish-only token cannot attach, but connects write-only and publishes", async () => {
  const relay = relayWithTokens();
  await assert.rejects(withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "hook" })), (e) => e.code === "UNAUTHORIZED");
  const before = relay.frames("attach").length;
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "hook", subscribe: false }));
  assert.equal(session.subscribe, false);
  assert.equal(session.connected, true);
  assert.equal(relay.frames("attach").length, before); // it never attached
  const run = await withTimeout(session.send("A booking came in."));
  assert.equal(relay.entries[0].run_id, run.runId);
  assert.equal(relay.entries[0].parent_id, undefined); // no view: the relay places it
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });

  const delivery = run.steer("Budget: 800 EUR.");
  const { serial } = await withTimeout(delivery.published);
  assert.equal(relay.entries[serial - 1].message.id, delivery.message.id);
  await assert.rejects(withTimeout(delivery.outcome, 50), notAttached); // at once, not never

  await withTimeout(session.cancel(run.runId, { reason: "enough" }));
  assert.equal(relay.entries.at(-1).kind, "cancel");
  assert.equal(relay.entries.at(-1).reason, "enough");
  assert.deepEqual(await withTimeout(run.cancel({ wait: false })), []);

  // A handle by run id needs no view; the relay refuses what does not fit.
  relay.publish({ kind: "run", id: "end", run_id: run.runId, status: "cancelled" });
  const late = session.run(run.runId).steer("too late");
  await assert.rejects(withTimeout(late.published), (e) => e.code === "RUN_NOT_ACTIVE");
  await session.close();
});

test("whatever reads a write-only session fails at once with NOT_ATTACHED", async () => {
  const relay = relayWithTokens();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "hook", subscribe: false }));
  const run = await withTimeout(session.send("hi"));
  const view = session.view;
  const publishes = relay.frames("publish").length;
  for (const read of [() => run.result(), () => run.cancel(), () => session.cancel(run.runId, { wait: true }), () => view.loadOlder()]) {
    await assert.rejects(withTimeout(read(), 50), (e) => notAttached(e) && e.message.includes("subscribe: false"));
  }
  assert.equal(relay.frames("publish").length, publishes); // a cancel that would wait sends nothing
  for (const read of [
    () => run.status,
    () => run.queued,
    () => run.refused,
    () => view.getMessages(),
    () => view.runs(),
    () => view.run(run.runId),
    () => view.waiting(),
    () => view.hasOlder(),
    () => view.branches("x"),
    () => view.selectBranch("x"),
    () => view.tree,
    () => view.events(),
    () => view.on("message", () => {}),
    () => session.pausedRun(),
  ]) {
    assert.throws(read, notAttached);
  }
  assert.equal(view.readable, false);
  await session.close();
});

test("write-only with a token that may read: the relay's NOT_ATTACHED says why", async () => {
  const relay = relayWithTokens();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "reader", subscribe: false }));
  await assert.rejects(withTimeout(session.send("hi")), (e) => notAttached(e) && e.message.includes("'subscribe'"));
  await session.close();
});

test("a write-only session takes no onRefusedMessage", async () => {
  const relay = relayWithTokens();
  await assert.rejects(connect(relay.url, "s1", { WebSocket: relay.WebSocket, subscribe: false, onRefusedMessage: () => {} }), (e) => e.code === "VALIDATION_ERROR");
});
