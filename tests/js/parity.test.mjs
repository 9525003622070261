// Where runwire.js must do what the Python client (client_side) does; each test names the
// Python behaviour it pins. Against the in-memory fake relay (tests/js/fake_relay.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, messageText } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { until, withTimeout } from "./waits.mjs";

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

test("cancel with wait that times out leaves nothing waiting on the view", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await withTimeout(session.send("work"));
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  const before = session.view._changed.size;
  await withTimeout(session.cancel(run.runId, { wait: true, timeout: 30 })); // the Run goes on
  assert.equal(session.view._changed.size, before);
  await session.close();
});

const words = (messages) => messages.map((m) => messageText(m));

/** A session with one Run the agent started. */
async function activeRun(relay) {
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  const run = await withTimeout(session.send("work"));
  relay.publish({ kind: "run", id: "act", run_id: run.runId, status: "active" });
  await until(() => run.status === "active");
  return { session, run };
}

test("a Run that ends error leaves its untaken steering in queued and returns none as undelivered (ClientRun.queued, result)", async () => {
  const relay = new FakeRelay();
  const { session, run } = await activeRun(relay);
  const steer = run.steer("shorter");
  await withTimeout(steer.published);
  relay.publish({ kind: "run", id: "boom", run_id: run.runId, status: "error", error: { code: "AGENT_LOST", message: "gone", details: {} } });
  const result = await withTimeout(run.result());
  assert.equal(result.status, "error");
  assert.deepEqual(words(result.undelivered), []);
  assert.deepEqual(words(run.queued), ["shorter"]);
  assert.deepEqual(await steer.outcome, { consumed: false, runTerminalReason: "error", refused: null });
  await session.close();
});

test("a suspended Run returns its untaken steering as undelivered and keeps it queued, outcome pending (ClientRun.result)", async () => {
  const relay = new FakeRelay();
  const { session, run } = await activeRun(relay);
  const steer = run.steer("aisle seat");
  await withTimeout(steer.published);
  relay.publish({ kind: "run", id: "pause", run_id: run.runId, status: "suspended" });
  const result = await withTimeout(run.result());
  assert.equal(result.status, "suspended");
  assert.deepEqual(words(result.undelivered), ["aisle seat"]);
  assert.deepEqual(words(run.queued), ["aisle seat"]);
  await session.close();
});

test("a refused message is neither queued nor undelivered nor returned by cancel; run.refused lists it (ClientRun.refused)", async () => {
  const relay = new FakeRelay();
  const { session, run } = await activeRun(relay);
  const steer = run.steer("my card is 4111 1111 1111 1111");
  const kept = run.steer("keep it short");
  await withTimeout(Promise.all([steer.published, kept.published]));
  const error = { code: "PII_DETECTED", message: "no cards", details: { types: ["card"] } };
  relay.publish({ kind: "refused", id: "ref1", run_id: run.runId, message_id: steer.message.id, intent: "steer", error });
  const outcome = await withTimeout(steer.outcome);
  assert.equal(outcome.consumed, false);
  assert.equal(outcome.refused.code, "PII_DETECTED");
  assert.deepEqual(words(run.queued), ["keep it short"]);
  assert.equal(run.refused.length, 1);
  const [refused] = run.refused;
  assert.equal(refused.messageId, steer.message.id);
  assert.equal(refused.runId, run.runId);
  assert.equal(refused.intent, "steer");
  assert.equal(refused.error.code, "PII_DETECTED");
  assert.deepEqual(refused.error.details, { types: ["card"] });
  assert.equal(messageText(refused.message), "my card is 4111 1111 1111 1111");
  const never = run.cancel({ wait: false });
  relay.publish({ kind: "run", id: "end", run_id: run.runId, status: "cancelled" });
  assert.deepEqual(words(await withTimeout(never)), ["keep it short"]);
  const result = await withTimeout(run.result());
  assert.deepEqual(words(result.undelivered), ["keep it short"]);
  await session.close();
});

test("cancel returns only what the Run never took: a message a response had seen is not returned (ClientRun.cancel)", async () => {
  const relay = new FakeRelay();
  const { session, run } = await activeRun(relay);
  const seen = run.steer("five days");
  const unseen = run.steer("vegan");
  await withTimeout(Promise.all([seen.published, unseen.published]));
  relay.publish({ kind: "response_open", id: "o1", run_id: run.runId, message_id: "a1", seen: [seen.message.id], metadata: {} });
  await until(() => session.view.tree.outcomes.consumed(seen.message.id));
  assert.deepEqual(words(run.queued), ["vegan"]);
  assert.deepEqual(words(await withTimeout(run.cancel({ wait: false }))), ["vegan"]);
  await session.close();
});

test("followUp and inject publish their intent; every queued message carries metadata.queued (ClientRun.follow_up, inject)", async () => {
  const relay = new FakeRelay();
  const { session, run } = await activeRun(relay);
  const deliveries = [run.steer("steer it"), run.followUp("then this"), run.inject("context")];
  await withTimeout(Promise.all(deliveries.map((d) => d.published)));
  assert.deepEqual(
    deliveries.map((d) => d.intent),
    ["steer", "follow_up", "inject"],
  );
  const sent = relay.frames("publish").slice(-3).map((f) => f.entry);
  assert.deepEqual(
    sent.map((e) => [e.intent, e.message.metadata.queued]),
    [
      ["steer", "steer"],
      ["follow_up", "follow_up"],
      ["inject", "inject"],
    ],
  );
  assert.deepEqual(
    session.view.tree.inputs(run.runId).map((vm) => vm.intent),
    ["steer", "follow_up", "inject"],
  );
  assert.deepEqual(words(run.queued), ["steer it", "then this", "context"]);
  relay.publish({ kind: "run", id: "done", run_id: run.runId, status: "complete", seen: [deliveries[2].message.id] });
  const result = await withTimeout(run.result());
  assert.deepEqual(words(result.undelivered), ["steer it", "then this"]);
  assert.deepEqual(await deliveries[2].outcome, { consumed: true, runTerminalReason: "complete", refused: null });
  await session.close();
});

// ------------------------------------------------------------------------------ tokens ---

const tokenOf = (url) => new URL(url).searchParams.get("token");

test("a tokenProvider replaces a token the relay expires (4003) and the session resumes (Connection token_provider)", async () => {
  const relay = new FakeRelay();
  relay.tokens = new Set(["t1"]);
  const urls = [];
  const Spy = class extends relay.WebSocket {
    constructor(url) {
      super(url);
      urls.push(url);
    }
  };
  let asked = 0;
  const tokenProvider = async () => `t${++asked + 1}`;
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: Spy, token: "t1", tokenProvider, backoffInitial: 5, backoffMax: 20 }));
  assert.equal(asked, 0, "a first connect that has a token asks for none");
  const states = [];
  session.on("state", (s) => states.push(s));
  const run = await withTimeout(session.send("hello"));
  relay.tokens = new Set(["t2"]);
  relay.dropAll(4003, "TOKEN_EXPIRED: the token expired; reconnect with a fresh one");
  const steer = run.steer("still here");
  await withTimeout(steer.published);
  assert.equal(session.closed, false);
  assert.equal(asked, 1);
  assert.deepEqual(urls.map(tokenOf), ["t1", "t2"]);
  assert.deepEqual(states, ["disconnected", "connected"]);
  assert.equal(relay.frames("attach")[1].from_serial, 1);
  await session.close();
});

test("a fresh token that no longer grants subscribe ends the session for good (Connection on_connect UNAUTHORIZED)", async () => {
  const relay = new FakeRelay();
  relay.tokens = new Set(["t1", "t2"]);
  relay.readers = new Set(["t1"]);
  let asked = 0;
  const tokenProvider = () => `t${++asked + 1}`;
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "t1", tokenProvider, backoffInitial: 5, backoffMax: 20 }));
  const states = [];
  session.on("state", (s) => states.push(s));
  relay.dropAll(4003, "TOKEN_EXPIRED: the token expired; reconnect with a fresh one");
  await until(() => session.closed);
  assert.equal(asked, 1, "one fresh token, refused: no reconnecting again and again");
  assert.equal(relay.frames("hello").length, 2);
  assert.equal(states.at(-1), "closed");
  await assert.rejects(session.send("x"), (e) => e.code === "UNAUTHORIZED");
});

test("a first connect whose token expired asks the tokenProvider and connects", async () => {
  const relay = new FakeRelay();
  relay.tokens = new Set(["fresh"]);
  const session = await withTimeout(
    connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "stale", tokenProvider: () => "fresh", backoffInitial: 5 }),
  );
  assert.equal(session.connected, true);
  await session.close();
});

test("TOKEN_EXPIRED is final without a tokenProvider, and after four expired tokens in a row with one", async () => {
  const relay = new FakeRelay();
  relay.tokens = new Set(["ok"]);
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, token: "ok" }));
  const run = await withTimeout(session.send("work"));
  relay.tokens = new Set();
  relay.dropAll(4003, "TOKEN_EXPIRED: the token expired");
  await until(() => session.closed);
  // The code is not repeated in the text the relay's reason gives.
  await assert.rejects(session.send("x"), (e) => e.code === "TOKEN_EXPIRED" && e.text === "the token expired");
  await assert.rejects(run.steer("y").published, (e) => e.code === "TOKEN_EXPIRED");
  let asked = 0;
  const stale = () => {
    asked += 1;
    return "stale";
  };
  const opts = { WebSocket: relay.WebSocket, tokenProvider: stale, backoffInitial: 1, backoffMax: 2 };
  await assert.rejects(withTimeout(connect(relay.url, "s1", opts)), (e) => e.code === "TOKEN_EXPIRED");
  assert.equal(asked, 4);
});

test("a tokenProvider that fails or returns no token is final: UNAUTHORIZED", async () => {
  const relay = new FakeRelay();
  const failing = () => {
    throw new Error("logged out");
  };
  await assert.rejects(
    withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, tokenProvider: failing })),
    (e) => e.code === "UNAUTHORIZED" && e.text.includes("logged out"),
  );
  await assert.rejects(
    withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, tokenProvider: async () => "" })),
    (e) => e.code === "UNAUTHORIZED",
  );
});

test("onRefusedMessage hears of each refusal after the first attach, not of those in the history (on_refused_message)", async () => {
  const relay = new FakeRelay();
  const steerEntry = (id, runId) => ({
    kind: "message",
    id,
    run_id: runId,
    intent: "steer",
    message: { id, role: "user", parts: [{ type: "text", text: `text of ${id}` }], metadata: {} },
  });
  const error = { code: "PROMPT_INJECTION_DETECTED", message: "no", details: { threats: ["override"] } };
  relay.publish({ kind: "message", id: "p0", run_id: "r0", intent: "prompt", message: { id: "p0", role: "user", parts: [], metadata: {} } });
  relay.publish({ kind: "run", id: "r0-act", run_id: "r0", status: "active" });
  relay.publish(steerEntry("old", "r0"));
  relay.publish({ kind: "refused", id: "ref-old", run_id: "r0", message_id: "old", intent: "steer", error });
  const heard = [];
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, onRefusedMessage: (r) => heard.push(r) }));
  assert.equal(session.run("r0").refused.length, 1);
  relay.publish(steerEntry("new", "r0"));
  relay.publish({ kind: "refused", id: "ref-new", run_id: "r0", message_id: "new", intent: "steer", error });
  await until(() => heard.length === 1);
  const [refused] = heard;
  assert.deepEqual([refused.messageId, refused.runId, refused.intent, refused.error.code], ["new", "r0", "steer", "PROMPT_INJECTION_DETECTED"]);
  assert.equal(messageText(refused.message), "text of new");
  await session.close();
  assert.equal(heard.length, 1);
});
