// The shared relay frame vectors (tests/vectors/frames/booleans.json and types.json, made from
// transport.codec.decode_relay_frame by tests/transport/test_frame_vectors.py): checkRelayFrame takes
// a field's value exactly where Python does (a boolean true or false only; an integer a JSON integer,
// not a string or a boolean; strings, lists of objects, objects and error bodies as the models say;
// null only where the field is optional; a required field present), and the session drops a frame
// Python refuses, as the Python client drops it (a welcome it cannot read fails the connect).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { checkRelayFrame, connect } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { FAST, until, withTimeout } from "./waits.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { bases, cases } = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "frames", "booleans.json"), "utf8"));
const types = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "frames", "types.json"), "utf8"));

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

test("every relay frame type has a full base, and it is taken", () => {
  assert.deepEqual(Object.keys(types.bases).sort(), ["ack", "attached", "deliver", "dispatch", "error", "page", "welcome"]);
  assert.deepEqual(Object.keys(types.fields).sort(), Object.keys(types.bases).sort());
  for (const [type, base] of Object.entries(types.bases)) {
    assert.deepEqual(Object.keys(base).sort(), ["type", ...Object.keys(types.fields[type])].sort());
    checkRelayFrame(base);
  }
});

test("the type vectors set every field of every relay frame type, and leave each out", () => {
  for (const [type, fields] of Object.entries(types.fields)) {
    for (const field of Object.keys(fields)) {
      const mine = types.cases.filter((c) => c.type === type && c.field === field);
      assert.ok(mine.some((c) => !("value" in c)), `${type}.${field} absent`);
      assert.ok(mine.filter((c) => "value" in c).length >= 30, `${type}.${field} values`);
    }
  }
});

test("every field's value is taken exactly where Python takes it (its type, null, absent)", () => {
  assert.ok(types.cases.some((c) => c.valid) && types.cases.some((c) => !c.valid));
  const wrong = [];
  for (const c of types.cases) {
    const frame = structuredClone(types.bases[c.type]);
    if ("value" in c) frame[c.field] = c.value;
    else delete frame[c.field];
    let taken = true;
    try {
      checkRelayFrame(frame);
    } catch (e) {
      if (e.code !== "VALIDATION_ERROR") throw e;
      assert.deepEqual(e.details.errors[0].loc.slice(0, 2), [c.type, c.field], e.message);
      taken = false;
    }
    const shown = "value" in c ? JSON.stringify(c.value).slice(0, 40) : "absent";
    if (taken !== c.valid) wrong.push(`${c.type}.${c.field} = ${shown} ${taken ? "taken" : "refused"}`);
  }
  assert.deepEqual(wrong, []);
});

test("a frame of a type the client does not know is not checked; one that is not an object is PROTOCOL_ERROR", () => {
  checkRelayFrame({ type: "later", req: "x", anything: [1] });
  for (const frame of [null, [], "welcome", 5]) {
    assert.throws(() => checkRelayFrame(frame), (e) => e.code === "PROTOCOL_ERROR");
  }
});

test("unknown fields are ignored, as docs/protocol.md asks clients to (the Python models refuse them for now)", () => {
  for (const base of Object.values(types.bases)) checkRelayFrame({ ...base, added_later: { x: 1 } });
  checkRelayFrame({ ...types.bases.error, error: { ...types.bases.error.error, added_later: 1 } });
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

test('a welcome whose max_frame_bytes is "big" fails the connect VALIDATION_ERROR, as the Python client\'s connect fails', async () => {
  const relay = new FakeRelay();
  const log = warnings();
  try {
    rewriteOnce(relay, "welcome", { max_frame_bytes: "big" });
    await assert.rejects(
      withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST })),
      (e) => e.code === "VALIDATION_ERROR" && e.message.includes("welcome.max_frame_bytes"),
    );
    assert.ok(log.said.some((w) => w.includes("dropping a frame") && w.includes("welcome.max_frame_bytes")));
    assert.equal(relay.frames("hello").length, 1);
    assert.equal(relay.frames("attach").length, 0);
  } finally {
    log.restore();
  }
});

test("a welcome that cannot be read on a reconnect is dropped with its socket: the session connects again and goes on", async () => {
  const relay = new FakeRelay();
  const log = warnings();
  try {
    const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
    const states = [];
    session.on("state", (s) => states.push(s));
    rewriteOnce(relay, "welcome", { max_frame_bytes: "big" });
    relay.dropAll();
    await until(() => log.said.some((w) => w.includes("dropping a frame") && w.includes("welcome.max_frame_bytes")));
    await until(() => session.connected && relay.frames("hello").length === 3, 3000);
    // The unreadable welcome's socket never attached; the next one did, and kept the relay's limit.
    assert.equal(relay.frames("attach").length, 2);
    assert.equal(session._maxFrameBytes, 1048576);
    const run = await withTimeout(session.send("hi"));
    assert.deepEqual(
      session.view.getMessages().map((m) => m.runId),
      [run.runId],
    );
    assert.equal(states.at(-1), "connected");
    assert.ok(!states.includes("closed"));
    await session.close();
  } finally {
    log.restore();
  }
});

test("an attached whose head is a string, or a deliver whose entries hold a number, is dropped", async () => {
  const relay = new FakeRelay();
  const log = warnings();
  try {
    const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST, openTimeout: 100 }));
    const run = await withTimeout(session.send("hi"));
    rewriteOnce(relay, "attached", { head: "1" });
    relay.dropAll();
    await until(() => log.said.some((w) => w.includes("dropping a frame") && w.includes("attached.head")));
    await until(() => session.connected && relay.frames("attach").length === 3, 3000);
    rewriteOnce(relay, "deliver", { entries: [relay.entries[0], 7] });
    relay.publish({ kind: "run", id: "e-active", run_id: run.runId, status: "active" });
    await until(() => log.said.some((w) => w.includes("dropping a frame") && w.includes("deliver.entries.1")));
    assert.deepEqual(
      session.view.getMessages().map((m) => m.runId),
      [run.runId],
    );
    assert.equal(session.view.newestSerial, 1);
    await session.close();
  } finally {
    log.restore();
  }
});
