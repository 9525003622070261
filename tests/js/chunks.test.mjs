// run.chunks() and session.chunks(): the raw UI message stream chunks of replies, in order, against
// the fake relay (tests/js/fake_relay.mjs); a reconnect in the middle neither skips nor repeats one.
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { FAST, until, withTimeout } from "./waits.mjs";

const open = (relay, runId, mid) =>
  relay.publish({ kind: "response_open", id: `${mid}-open`, run_id: runId, message_id: mid, seen: [], metadata: {} });
const append = (relay, runId, mid, id, chunks) =>
  relay.publish({ kind: "response_append", id, run_id: runId, message_id: mid, chunks });
const close = (relay, runId, mid) =>
  relay.publish({ kind: "response_close", id: `${mid}-close`, run_id: runId, message_id: mid });
const status = (relay, runId, s) => relay.publish({ kind: "run", id: `${runId}-${s}`, run_id: runId, status: s });
const delta = (id, d) => ({ type: "text-delta", id, delta: d });

async function collect(iterator, into) {
  for await (const item of iterator) into.push(item);
  return into;
}

test("run.chunks() gives the chunks the view holds, then live ones, in order, and ends with the Run", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "c1", { WebSocket: relay.WebSocket }));
  const run = await withTimeout(session.send("Plan a trip."));
  status(relay, run.runId, "active");
  open(relay, run.runId, "a1");
  append(relay, run.runId, "a1", "x1", [{ type: "text-start", id: "t" }, delta("t", "Day ")]);
  await until(() => session.view.newestSerial === relay.head);
  const got = [];
  const done = collect(run.chunks(), got);
  append(relay, run.runId, "a1", "x2", [delta("t", "one."), { type: "text-end", id: "t" }]);
  append(relay, run.runId, "a1", "x3", [{ type: "tool-input-available", toolCallId: "c1", toolName: "search", input: { q: "Lisbon" } }]);
  close(relay, run.runId, "a1");
  // Another Run's reply is not this Run's.
  append(relay, "other-run", "b1", "y1", [delta("u", "not mine")]);
  status(relay, run.runId, "complete");
  await withTimeout(done);
  assert.deepEqual(
    got.map((c) => c.chunk),
    [
      { type: "start", messageId: "a1" },
      { type: "text-start", id: "t" },
      delta("t", "Day "),
      delta("t", "one."),
      { type: "text-end", id: "t" },
      { type: "tool-input-available", toolCallId: "c1", toolName: "search", input: { q: "Lisbon" } },
      { type: "finish" },
    ],
  );
  assert.ok(got.every((c) => c.runId === run.runId && c.messageId === "a1"));
  const serials = got.map((c) => c.serial);
  assert.deepEqual(serials, [...serials].sort((a, b) => a - b));
  // An ended Run's iterator gives what it held and ends at once.
  const again = await withTimeout(collect(run.chunks(), []));
  assert.deepEqual(again.map((c) => c.chunk), got.map((c) => c.chunk));
  // `after` skips what came up to a serial.
  const tail = await withTimeout(collect(run.chunks({ after: got[3].serial }), []));
  assert.deepEqual(tail.map((c) => c.chunk.type), ["tool-input-available", "finish"]);
  await session.close();
});

test("a reconnect in the middle of a reply neither skips nor repeats a chunk", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "c2", { WebSocket: relay.WebSocket, ...FAST }));
  const states = [];
  session.on("state", (s) => states.push(s));
  const run = await withTimeout(session.send("Count."));
  status(relay, run.runId, "active");
  open(relay, run.runId, "a1");
  const got = [];
  const done = collect(run.chunks(), got);
  for (let i = 0; i < 3; i++) append(relay, run.runId, "a1", `n${i}`, [delta("t", `${i} `)]);
  await until(() => got.length === 4);
  relay.dropAll();
  await until(() => states.includes("disconnected"));
  // While the client is away the agent goes on; the resume brings these once.
  for (let i = 3; i < 6; i++) append(relay, run.runId, "a1", `n${i}`, [delta("t", `${i} `)]);
  await until(() => session.connected);
  for (let i = 6; i < 8; i++) append(relay, run.runId, "a1", `n${i}`, [delta("t", `${i} `)]);
  close(relay, run.runId, "a1");
  status(relay, run.runId, "complete");
  await withTimeout(done);
  assert.deepEqual(states.slice(0, 2), ["disconnected", "connected"]);
  assert.deepEqual(
    got.filter((c) => c.chunk.type === "text-delta").map((c) => c.chunk.delta).join(""),
    "0 1 2 3 4 5 6 7 ",
  );
  assert.equal(new Set(got.map((c) => `${c.serial}:${c.index}`)).size, got.length, "no chunk twice");
  await session.close();
});

test("session.chunks() follows every Run from now on (after: null from the start); a signal ends it", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "c3", { WebSocket: relay.WebSocket }));
  const first = await withTimeout(session.send("One."));
  open(relay, first.runId, "a1");
  append(relay, first.runId, "a1", "x1", [delta("t", "old")]);
  await until(() => session.view.newestSerial === relay.head);
  const controller = new AbortController();
  const live = [];
  const liveDone = collect(session.chunks({ signal: controller.signal }), live);
  const all = [];
  const allDone = collect(session.chunks({ after: null, signal: controller.signal }), all);
  append(relay, first.runId, "a1", "x2", [delta("t", "new")]);
  // A Run another device started.
  relay.publish({ kind: "message", id: "m2", run_id: "run-2", intent: "prompt", message: { id: "u2", role: "user", parts: [{ type: "text", text: "Two." }], metadata: {} } }, "phone");
  open(relay, "run-2", "b1");
  append(relay, "run-2", "b1", "y1", [delta("t", "two")]);
  await until(() => live.length === 3 && all.length === 5);
  controller.abort();
  await withTimeout(Promise.all([liveDone, allDone]));
  assert.deepEqual(live.map((c) => [c.runId, c.chunk.type]), [[first.runId, "text-delta"], ["run-2", "start"], ["run-2", "text-delta"]]);
  assert.deepEqual(all.map((c) => c.chunk.delta ?? c.chunk.type), ["start", "old", "new", "start", "two"]);
  await session.close();
});

test("chunks() of a write-only session throws NOT_ATTACHED; closing the session ends an iterator", async () => {
  const relay = new FakeRelay();
  const writer = await withTimeout(connect(relay.url, "c4", { WebSocket: relay.WebSocket, subscribe: false }));
  assert.throws(() => writer.chunks(), (e) => e.code === "NOT_ATTACHED");
  assert.throws(() => writer.run("run-1").chunks(), (e) => e.code === "NOT_ATTACHED");
  await writer.close();
  const session = await withTimeout(connect(relay.url, "c4", { WebSocket: relay.WebSocket }));
  const it = session.chunks();
  const pending = it.next();
  await session.close();
  assert.deepEqual(await withTimeout(pending), { value: undefined, done: true });
});
