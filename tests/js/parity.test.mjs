// Where runwire.js must do what the Python client (client_side) does; each test names the
// Python behaviour it pins. Against the in-memory fake relay (tests/js/fake_relay.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect } from "../../client_side/js/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";

/** Resolve when `predicate()` holds; fail after `ms`. */
async function until(predicate, ms = 2000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${predicate}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function withTimeout(promise, ms = 2000) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timed out")), ms))]);
}

const cancels = (relay) => relay.frames("publish").filter((f) => f.entry.kind === "cancel");

test("a signal aborted while the prompt is being published cancels its Run (AbortSignal.add_callback fires at once)", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const controller = new AbortController();
  const sending = session.send("long job", { signal: controller.signal });
  controller.abort(); // before the ack arrives
  const run = await withTimeout(sending);
  await until(() => cancels(relay).some((f) => f.entry.run_id === run.runId));
  await session.close();
});

test("cancel with wait rejects with CONNECTION_CLOSED when the session closes first (ClientSession._settled)", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await withTimeout(session.send("work"));
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  let settled = false;
  const cancelling = session.cancel(run.runId, { wait: true, timeout: null }).then(
    () => "resolved",
    (e) => e.code,
  );
  cancelling.then(() => (settled = true));
  await until(() => session.view.tree.cancelRequested(run.runId));
  await new Promise((r) => setTimeout(r, 20)); // the ack came: now it waits for the end
  assert.equal(settled, false);
  await session.close();
  assert.equal(await withTimeout(cancelling), "CONNECTION_CLOSED");
});
