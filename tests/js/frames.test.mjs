// The shared relay frame vectors (tests/vectors/frames/booleans.json, made from
// transport.codec.decode_relay_frame by tests/transport/test_frame_vectors.py): checkRelayFrame takes
// a boolean field's value exactly where Python does (true or false only; null only where the field is
// optional), and the session drops a frame Python refuses, as the Python client drops it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { checkRelayFrame, connect } from "../../client_side/js/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { FAST, until, withTimeout } from "./waits.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { bases, cases } = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "frames", "booleans.json"), "utf8"));

test("every base is taken", () => {
  assert.deepEqual(Object.keys(bases).sort(), ["ack", "attached", "dispatch", "page"]);
  for (const base of Object.values(bases)) checkRelayFrame(base);
});

test("a boolean field's value is taken exactly where Python takes it", () => {
  assert.ok(cases.some((c) => c.valid) && cases.some((c) => !c.valid));
  const wrong = [];
  for (const c of cases) {
    const frame = structuredClone(bases[c.type]);
    if ("value" in c) frame[c.field] = c.value;
    else delete frame[c.field];
    let taken = true;
    try {
      checkRelayFrame(frame);
    } catch (e) {
      if (e.code !== "VALIDATION_ERROR") throw e;
      assert.deepEqual(e.details.errors[0].loc, [c.type, c.field]);
      taken = false;
    }
    const shown = "value" in c ? JSON.stringify(c.value) : "absent";
    if (taken !== c.valid) wrong.push(`${c.type}.${c.field} = ${shown} ${taken ? "taken" : "refused"}`);
  }
  assert.deepEqual(wrong, []);
});

/** Collect what console.warn says until `restore()`. */
function warnings() {
  const said = [];
  const warn = console.warn;
  console.warn = (...args) => said.push(args.map(String).join(" "));
  return { said, restore: () => (console.warn = warn) };
}

/** Send the first frame of `type` with `fields` changed, then every frame as it is. */
function rewriteOnce(relay, type, fields) {
  relay.rewrite = (frame) => {
    if (frame.type !== type) return frame;
    relay.rewrite = null;
    return { ...frame, ...fields };
  };
}

test("an ack whose duplicate is 1 is dropped, as the Python client drops it: the send waits for the ack after the reconnect", async () => {
  const relay = new FakeRelay();
  const log = warnings();
  try {
    const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
    rewriteOnce(relay, "ack", { duplicate: 1 });
    let settled = false;
    const sending = session.send("hi");
    sending.then(
      () => (settled = true),
      () => (settled = true),
    );
    await until(() => log.said.some((w) => w.includes("dropping a frame") && w.includes("ack.duplicate")));
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(settled, false);
    relay.dropAll();
    const run = await withTimeout(sending);
    // Sent again on the new socket: stored already, so acknowledged as a duplicate of our own prompt.
    const publishes = relay.frames("publish");
    assert.equal(publishes.length, 2);
    assert.equal(publishes[1].entry.run_id, run.runId);
    await session.close();
  } finally {
    log.restore();
  }
});

test('an attached whose reset is "false" is dropped, not taken for a reset: the next attach resumes', async () => {
  const relay = new FakeRelay();
  const log = warnings();
  try {
    const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST, openTimeout: 100 }));
    const run = await withTimeout(session.send("hi"));
    rewriteOnce(relay, "attached", { reset: "false" });
    relay.dropAll();
    await until(() => log.said.some((w) => w.includes("dropping a frame") && w.includes("attached.reset")));
    await until(() => session.connected && relay.frames("attach").length === 3, 3000);
    assert.equal(session._resets, 0);
    assert.ok(!log.said.some((w) => w.includes("lost history")));
    assert.deepEqual(
      session.view.getMessages().map((m) => m.runId),
      [run.runId],
    );
    await session.close();
  } finally {
    log.restore();
  }
});
