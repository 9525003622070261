// A relay that restarts closes its connections 1012 (service restart): the JavaScript client reconnects at
// once, not after its backoff, and goes on backing off should that first try fail.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CLOSE_CODES, connect } from "../../client_side/js/dist/runwire.js";
import { FakeRelay } from "./fake_relay.mjs";
import { until, withTimeout } from "./waits.mjs";

// A backoff of a minute: a reconnect that waited for it would time out every wait below.
const SLOW = { backoffInitial: 60_000, backoffMax: 60_000 };

test("a 1012 close reconnects at once", async () => {
  assert.equal(CLOSE_CODES[1012], "SERVICE_RESTART");
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...SLOW }));
  const hellos = () => relay.frames("hello").length;
  assert.equal(hellos(), 1);
  for (let i = 2; i <= 3; i++) {
    relay.dropAll(1012, "relay restarting");
    await until(() => hellos() === i && session.connected);
  }
  await session.close();
});

test("any other drop waits for the backoff", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "s1", { WebSocket: relay.WebSocket, ...SLOW }));
  relay.dropAll(1001, "going away");
  await until(() => !session.connected);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(relay.frames("hello").length, 1);
  assert.equal(session.connected, false);
  await session.close();
});
