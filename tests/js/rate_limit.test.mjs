// RATE_LIMITED: runwire.js sends a refused publish again (same entry id) after the relay's
// retry_after, in the order first sent, and gives up with the error after rateLimitWait.
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { withTimeout } from "./waits.mjs";

const prompts = (relay) => relay.entries.filter((e) => e.kind === "message").map((e) => e.message.parts[0].text);

test("a burst of sends refused RATE_LIMITED arrives in order, each once", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  relay.rateLimited = 3;
  const texts = Array.from({ length: 8 }, (_, i) => `m${i}`);
  const runs = await withTimeout(Promise.all(texts.map((t) => session.send(t))));
  assert.equal(runs.length, texts.length);
  assert.deepEqual(prompts(relay), texts);
  assert.equal(relay.rateLimited, 0);
  // The refused ones went again with their own entry ids.
  const sent = relay.frames("publish").map((f) => f.entry.id);
  assert.ok(sent.length > texts.length);
  assert.deepEqual([...new Set(sent)].sort(), relay.entries.map((e) => e.id).sort());
  await session.close();
});

test("a refusal without retry_after goes again after a backoff", async () => {
  const relay = new FakeRelay();
  relay.retryAfter = null;
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket }));
  relay.rateLimited = 2;
  const run = await withTimeout(session.send("hello"), 5000);
  assert.deepEqual(prompts(relay), ["hello"]);
  assert.equal(relay.entries[0].run_id, run.runId);
  assert.equal(relay.frames("publish").length, 3);
  await session.close();
});

test("a publish still refused after rateLimitWait gives up with RATE_LIMITED; so does the one behind it", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, rateLimitWait: 60 }));
  relay.rateLimited = Infinity;
  const results = await withTimeout(Promise.allSettled([session.send("a"), session.send("b")]));
  assert.deepEqual(
    results.map((r) => r.status === "rejected" && r.reason.code),
    ["RATE_LIMITED", "RATE_LIMITED"],
  );
  assert.ok(results[0].reason.details.retry_after > 0);
  assert.ok(relay.frames("publish").length > 2); // it went again before it gave up
  assert.deepEqual(relay.entries, []);
  assert.equal(session.connected, true);
  await session.close();
});
