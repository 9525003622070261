// runwire.js's Session, ClientRun and View against an in-memory fake relay (tests/js/fake_relay.mjs):
// send, steer outcomes, cancel, reconnect with resume and reset, re-sent publishes, history.
import assert from "node:assert/strict";
import { test } from "node:test";

import { RunwireError, connect, messageText } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { FAST, until, withTimeout } from "./waits.mjs";

function agentReply(relay, runId, mid, words, { seen = [], status = "complete" } = {}) {
  relay.publish({ kind: "run", id: `${runId}-active`, run_id: runId, status: "active" });
  relay.publish({ kind: "response_open", id: `${mid}-open`, run_id: runId, message_id: mid, seen, metadata: {} });
  words.forEach((w, i) => {
    relay.publish({ kind: "response_append", id: `${mid}-${i}`, run_id: runId, message_id: mid, chunks: [{ type: "text-delta", delta: w }] });
  });
  if (status) relay.publish({ kind: "run", id: `${runId}-${status}`, run_id: runId, status });
}

const texts = (session) => session.view.getMessages().map((vm) => `${vm.message.role}:${messageText(vm.message)}`);

test("send starts a Run that every callback and the view see", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, agent: "planner" }));
  assert.equal(session.connected, true);
  const seen = [];
  const off = session.view.on("run", (e) => seen.push(e.run.status));
  const run = await withTimeout(session.send("Plan a trip."));
  const [publish] = relay.frames("publish");
  assert.equal(publish.entry.intent, "prompt");
  assert.equal(publish.entry.agent, "planner");
  assert.equal(publish.entry.run_id, run.runId);
  agentReply(relay, run.runId, "a1", ["Day ", "one."]);
  const result = await withTimeout(run.result());
  assert.deepEqual(result, {
    status: "complete",
    endReason: "complete",
    undelivered: [],
    interrupts: [],
    error: null,
    reason: null,
  });
  assert.deepEqual(texts(session), ["user:Plan a trip.", "assistant:Day one."]);
  assert.deepEqual(seen, ["pending", "active", "complete"]);
  off();
  assert.throws(() => session.view.on("nope", () => {}), (e) => e.code === "VALIDATION_ERROR");
  await session.close();
  assert.equal(session.closed, true);
});

test("steer resolves published, then outcome consumed at the Run's end", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await session.send("Plan a 3-day trip.");
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  const { published, outcome } = run.steer("Make it 5 days.");
  const late = run.steer("Also vegan.");
  const { serial } = await withTimeout(published);
  assert.equal(serial, 3);
  await withTimeout(late.published);
  assert.equal(run.queued.length, 2);
  const steerId = relay.entries[2].message.id;
  agentReply(relay, run.runId, "a1", ["5 days"], { seen: [steerId] });
  assert.deepEqual(await withTimeout(outcome), { consumed: true, runTerminalReason: "complete", refused: null });
  assert.deepEqual(await withTimeout(late.outcome), { consumed: false, runTerminalReason: "complete", refused: null });
  const result = await run.result();
  assert.deepEqual(
    result.undelivered.map((m) => messageText(m)),
    ["Also vegan."],
  );
  await session.close();
});

test("steering an ended Run rejects both at once and publishes nothing", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await session.send("hi");
  agentReply(relay, run.runId, "a1", ["ok"]);
  await withTimeout(run.result());
  const before = relay.frames("publish").length;
  const delivery = run.steer("too late");
  await assert.rejects(delivery.published, (e) => e instanceof RunwireError && e.code === "RUN_NOT_ACTIVE");
  await assert.rejects(delivery.outcome, (e) => e.code === "RUN_NOT_ACTIVE");
  assert.equal(relay.frames("publish").length, before);
  // Cancelling an ended Run does nothing and does not throw.
  await withTimeout(session.cancel(run.runId));
  assert.throws(() => session.run("missing"), (e) => e.code === "RUN_NOT_FOUND");
  await session.close();
});

test("session.run finds the Run's prompt when a fork above it left it off the active branch", async () => {
  const relay = new FakeRelay();
  const user = (id, runId, parentId) => ({ kind: "message", id, run_id: runId, intent: "prompt", message: { id, role: "user", parts: [] }, parent_id: parentId });
  relay.publish(user("m0", "r0", null), "client-2");
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await session.send("first question"); // after m0
  agentReply(relay, run.runId, "a1", ["answer"], { status: null });
  // Another device asks again after m0: its branch is the active one now.
  relay.publish(user("m-fork", "r-fork", "m0"), "client-2");
  await until(() => session.view.run("r-fork") !== null);
  assert.ok(!session.view.getMessages().some((vm) => vm.runId === run.runId));
  const handle = session.run(run.runId);
  assert.ok(handle.prompt !== null, "the prompt is loaded: it is on another branch");
  assert.equal(handle.prompt.id, run.prompt.id);
  await session.close();
});

test("steering sent offline to a Run that ends meanwhile resolves not consumed and is undelivered", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const run = await session.send("hello");
  agentReply(relay, run.runId, "a1", ["hi"], { status: null });
  await until(() => session.view.run(run.runId)?.status === "active");
  relay.refuse = true;
  relay.dropAll();
  await until(() => !session.connected);
  const delivery = run.steer("make it shorter");
  // The Run ends while this client is offline; the relay then refuses the steer it re-sends.
  relay.publish({ kind: "run", id: `${run.runId}-complete`, run_id: run.runId, status: "complete" });
  relay.refuse = false;
  await assert.rejects(withTimeout(delivery.published), (e) => e.code === "RUN_NOT_ACTIVE");
  assert.deepEqual(await withTimeout(delivery.outcome), { consumed: false, runTerminalReason: "complete", refused: null });
  const result = await withTimeout(run.result());
  assert.deepEqual(result.undelivered.map((m) => m.id), [delivery.message.id]);
  assert.deepEqual(run.queued, []);
  await session.close();
});

test("a drop reconnects, resumes after the last serial with the epoch, and misses nothing", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const states = [];
  session.on("state", (s) => states.push(s));
  const run = await session.send("Plan a trip.");
  agentReply(relay, run.runId, "a1", ["Day ", "one"], { status: null });
  await until(() => texts(session)[1] === "assistant:Day one");
  const clientId = session.clientId;
  relay.dropAll();
  await until(() => states.includes("disconnected"));
  assert.equal(session.connected, false);
  // While the client is away the agent goes on.
  relay.publish({ kind: "response_append", id: "more", run_id: run.runId, message_id: "a1", chunks: [{ type: "text-delta", delta: ", day two." }] });
  await until(() => session.connected);
  assert.deepEqual(states, ["disconnected", "connected"]);
  const [first, second] = relay.frames("attach");
  assert.equal(first.from_serial, undefined);
  assert.equal(second.from_serial, 5);
  assert.equal(second.epoch, "epoch-1");
  assert.equal(relay.frames("hello")[1].client_id, clientId, "the same client id comes back");
  await until(() => texts(session)[1] === "assistant:Day one, day two.");
  assert.equal(session.view.getMessages().length, 2);
  await session.close();
  assert.equal(states.at(-1), "closed");
});

test("a publish whose ack was lost is re-sent after the reconnect and not doubled", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  [...relay.sockets][0].swallowNextAck = true;
  const run = await withTimeout(session.send("only once"));
  const publishes = relay.frames("publish");
  assert.equal(publishes.length, 2, "sent, dropped, sent again");
  assert.equal(publishes[0].entry.id, publishes[1].entry.id);
  assert.equal(relay.entries.length, 1);
  assert.equal(run.prompt.id, publishes[0].entry.id);
  await until(() => session.view.getMessages().length === 1);
  await session.close();
});

test("a resume the relay cannot honour (reset) rebuilds the view from the newest page", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const run = await session.send("old question");
  agentReply(relay, run.runId, "a1", ["old answer"]);
  await until(() => texts(session).length === 2);
  relay.loseHistory([]);
  relay.dropAll();
  relay.publish({
    kind: "message",
    id: "n1",
    run_id: "r9",
    intent: "prompt",
    message: { id: "n1", role: "user", parts: [{ type: "text", text: "new world" }], metadata: {} },
  });
  await until(() => texts(session).length === 1 && texts(session)[0] === "user:new world");
  assert.equal(relay.frames("attach")[1].from_serial, 5);
  assert.equal(session.view.newestSerial, 1);
  await session.close();
});

test("after a reset, a pending outcome whose Run the relay lost rejects EPOCH_MISMATCH", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const lost = await session.send("old question");
  const kept = await session.send("another");
  const gone = lost.steer("pending");
  const stays = kept.steer("pending too");
  await withTimeout(gone.published);
  await withTimeout(stays.published);
  // The relay lost everything but the second Run's prompt and steer.
  relay.loseHistory(relay.entries.filter((e) => e.run_id === kept.runId));
  relay.dropAll();
  await assert.rejects(withTimeout(gone.outcome), (e) => e.code === "EPOCH_MISMATCH" && e.details.run_id === lost.runId);
  // A Run the rebuilt view knows goes on: its outcome resolves from the channel.
  relay.publish({ kind: "run", id: "k-end", run_id: kept.runId, status: "complete" });
  assert.deepEqual(await withTimeout(stays.outcome), { consumed: false, runTerminalReason: "complete", refused: null });
  await session.close();
});

test("loadOlder pages back until hasOlder is false", async () => {
  const relay = new FakeRelay();
  for (let i = 0; i < 30; i++) {
    relay.publish({
      kind: "message",
      id: `m${i}`,
      run_id: `r${i}`,
      intent: "prompt",
      message: { id: `m${i}`, role: "user", parts: [{ type: "text", text: `q${i}` }], metadata: {} },
    });
  }
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, historyLimit: 10 }));
  assert.equal(session.view.getMessages().length, 10);
  assert.equal(session.view.hasOlder(), true);
  const counts = [];
  while (session.view.hasOlder()) counts.push(await withTimeout(session.view.loadOlder(8)));
  assert.deepEqual(counts, [8, 8, 4]);
  assert.equal(session.view.getMessages().length, 30);
  assert.equal(session.view.getMessages()[0].message.id, "m0");
  assert.equal(session.view.runs().length, 30);
  await session.close();
});

test("events() iterates the view's events and ends when the session closes", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const kinds = [];
  const consumer = (async () => {
    for await (const event of session.view.events()) kinds.push(event.kind);
  })();
  await session.send("hi");
  await until(() => kinds.length >= 2);
  await session.close();
  await withTimeout(consumer);
  assert.deepEqual(kinds, ["run", "message"]);
});

test("connect rejects when the relay cannot be reached; 4001 is final; the token rides the URL", async () => {
  const relay = new FakeRelay();
  relay.refuse = true;
  await assert.rejects(connect(relay.url, "s1", { WebSocket: relay.WebSocket }), (e) => e.code === "CONNECTION_CLOSED");
  relay.refuse = false;
  relay.closeCodeOnHello = 4001;
  await assert.rejects(connect(relay.url, "s1", { WebSocket: relay.WebSocket }), (e) => e.code === "UNAUTHORIZED");
  relay.closeCodeOnHello = null;
  let opened = "";
  const Spy = class extends relay.WebSocket {
    constructor(url) {
      super(url);
      opened = url;
    }
  };
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: Spy, token: "a b" }));
  assert.equal(opened, "ws://fake-relay?token=a%20b");
  await session.close();
  const closed = session.send("after close");
  await assert.rejects(closed, (e) => e.code === "CONNECTION_CLOSED");
});

test("run.cancel publishes a cancel and returns the steering the Run never took", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await session.send("long essay");
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  const steer = run.steer("shorter");
  await steer.published;
  const cancelling = run.cancel({ reason: "changed my mind", timeout: 2000 });
  await until(() => relay.frames("publish").some((f) => f.entry.kind === "cancel"));
  const cancel = relay.frames("publish").find((f) => f.entry.kind === "cancel");
  assert.equal(cancel.entry.reason, "changed my mind");
  relay.publish({ kind: "run", id: "end", run_id: run.runId, status: "cancelled" });
  const never = await withTimeout(cancelling);
  assert.deepEqual(
    never.map((m) => messageText(m)),
    ["shorter"],
  );
  assert.deepEqual(await steer.outcome, { consumed: false, runTerminalReason: "cancelled", refused: null });
  await session.close();
});

test("a message over the relay's max_frame_bytes is refused before it is sent, and the session goes on", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...FAST }));
  const big = "é".repeat(600_000); // 1.2 MB of UTF-8 in 600k characters; the welcome says 1 MiB
  await assert.rejects(withTimeout(session.send(big)), (e) => e.code === "PAYLOAD_TOO_LARGE" && e.details.limit === 1048576 && e.details.size > 1_200_000);
  const run = await withTimeout(session.send("Plan a trip."));
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  const steer = run.steer(big);
  await assert.rejects(withTimeout(steer.published), (e) => e.code === "PAYLOAD_TOO_LARGE");
  await assert.rejects(withTimeout(steer.outcome), (e) => e.code === "PAYLOAD_TOO_LARGE");
  assert.deepEqual(run.queued, []);
  // Nothing oversize went out (a relay closes a socket on one over its hard limit, and a request
  // re-sent on every reconnect would close each one).
  assert.equal(relay.frames("publish").length, 1);
  assert.equal(session._pending.size, 0);
  assert.equal(session.connected, true);
  await session.close();
});

test("a cancelled Run's result carries the abort's reason; an error end its error", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const stopped = await session.send("Plan a trip.");
  relay.publish({ kind: "run", id: "act", run_id: stopped.runId, status: "active" });
  const why = { code: "RUN_CANCELLED", message: "the user pressed stop", details: { client_id: "c1" } };
  relay.publish({ kind: "run", id: "end", run_id: stopped.runId, status: "cancelled", error: why });
  const result = await withTimeout(stopped.result());
  assert.equal(result.status, "cancelled");
  assert.equal(result.reason, "the user pressed stop");
  assert.ok(result.error instanceof RunwireError);
  assert.deepEqual(result.error.toWire(), why);
  const failed = await session.send("Again.");
  const boom = { code: "AGENT_ERROR", message: "the model failed", details: {} };
  relay.publish({ kind: "run", id: "end2", run_id: failed.runId, status: "error", error: boom });
  const second = await withTimeout(failed.result());
  assert.equal(second.reason, null);
  assert.deepEqual(second.error.toWire(), boom);
  await session.close();
});

test("a steer acknowledged as a duplicate before its entry arrives waits for it, and is accepted as its own", async () => {
  // A Redis failover: the first try was stored but its ack lost, and the retry's duplicate ack
  // reaches the client before the entry's deliver frame. Only the entry tells whose id it is.
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await session.send("Plan a 3-day trip.");
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  const [ws] = [...relay.sockets];
  const deliver = ws._deliver.bind(ws);
  const held = [];
  ws._deliver = (frame) => {
    if (frame.type === "deliver" && frame.entries.some((e) => e.intent === "steer")) {
      held.push(frame);
      return;
    }
    deliver(frame.type === "ack" && held.length ? { ...frame, duplicate: true } : frame);
  };
  const { published } = run.steer("Make it 5 days.");
  let settled = false;
  published.then(
    () => (settled = true),
    () => (settled = true),
  );
  await until(() => held.length === 1 && relay.frames("publish").length === 2);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(settled, false); // the ack came, the entry did not: not told yet
  for (const frame of held) deliver(frame);
  const { serial } = await withTimeout(published);
  assert.equal(serial, 3);
  await session.close();
});

test("a duplicate ack for another Run's message id is still refused as a reused id", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await session.send("Plan a 3-day trip.");
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  const theirs = { id: "m-theirs", role: "user", parts: [{ type: "text", text: "mine" }] };
  relay.publish({ kind: "message", id: "m-theirs", run_id: "r-other", intent: "prompt", message: theirs }, "client-2");
  await until(() => session.view.tree.message("m-theirs") !== null);
  const { published } = run.steer(theirs);
  await assert.rejects(withTimeout(published), (e) => e.code === "VALIDATION_ERROR");
  await session.close();
});
