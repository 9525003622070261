// The React hooks (@runwire/client/react) under jsdom with React Testing Library, against the
// fake relay of tests/js: useSession connects and closes, useMessages and useRuns re-render as
// entries come, useRun steers, cancels and gives the outcome.
import assert from "node:assert/strict";
import { test } from "node:test";

import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>", { url: "http://localhost/" });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
globalThis.IS_REACT_ACT_ENVIRONMENT = true;
// Hooks call no DOM API; Testing Library needs these few.
for (const name of ["HTMLElement", "Node", "navigator", "getComputedStyle", "MutationObserver"]) {
  if (!(name in globalThis)) globalThis[name] = dom.window[name];
}

const React = await import("react");
const { act, cleanup, render, renderHook, screen, waitFor } = await import("@testing-library/react");
const { connect, messageText } = await import("../lib/index.js");
const { useMessages, useRun, useRuns, useSession } = await import("../lib/react.js");
const { FakeRelay } = await import("../../../tests/js/fake_relay.mjs");
const { withTimeout } = await import("../../../tests/js/waits.mjs");

const h = React.createElement;

test("useSession connects, reports its state and closes on unmount", async () => {
  const relay = new FakeRelay();
  const { result, unmount } = renderHook(() => useSession(relay.url, "r1", { WebSocket: relay.WebSocket }));
  assert.equal(result.current.state, "connecting");
  assert.equal(result.current.session, null);
  await waitFor(() => assert.equal(result.current.state, "connected"));
  const session = result.current.session;
  assert.equal(session.sessionId, "r1");
  unmount();
  await waitFor(() => assert.equal(session.closed, true));
  cleanup();
});

test("useSession reports why connecting failed", async () => {
  const relay = new FakeRelay();
  relay.closeCodeOnHello = 4001;
  const { result } = renderHook(() => useSession(relay.url, "r2", { WebSocket: relay.WebSocket }));
  await waitFor(() => assert.notEqual(result.current.error, null));
  assert.equal(result.current.error.code, "UNAUTHORIZED");
  assert.equal(result.current.session, null);
  cleanup();
});

function Chat({ session }) {
  const messages = useMessages(session);
  const runs = useRuns(session);
  return h(
    "div",
    null,
    h("ul", { "data-testid": "messages" }, ...messages.map((m) => h("li", { key: m.message.id }, `${m.message.role}: ${messageText(m.message)}`))),
    h("p", { "data-testid": "runs" }, runs.map((r) => r.status).join(",")),
  );
}

test("useMessages and useRuns re-render as the session's entries come", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "r3", { WebSocket: relay.WebSocket }));
  render(h(Chat, { session }));
  assert.equal(screen.getByTestId("messages").children.length, 0);
  let run;
  await act(async () => {
    run = await session.send("Plan a trip.");
  });
  await waitFor(() => assert.equal(screen.getByTestId("messages").textContent, "user: Plan a trip."));
  await act(async () => {
    relay.publish({ kind: "run", id: "r-active", run_id: run.runId, status: "active" });
    relay.publish({ kind: "response_open", id: "o", run_id: run.runId, message_id: "a1", seen: [], metadata: {} });
    relay.publish({ kind: "response_append", id: "x1", run_id: run.runId, message_id: "a1", chunks: [{ type: "text-delta", delta: "Day one" }] });
  });
  await waitFor(() => assert.match(screen.getByTestId("messages").textContent, /assistant: Day one$/));
  assert.equal(screen.getByTestId("runs").textContent, "active");
  await act(async () => {
    relay.publish({ kind: "response_append", id: "x2", run_id: run.runId, message_id: "a1", chunks: [{ type: "text-delta", delta: ", day two." }] });
    relay.publish({ kind: "run", id: "r-done", run_id: run.runId, status: "complete" });
  });
  await waitFor(() => assert.match(screen.getByTestId("messages").textContent, /assistant: Day one, day two\.$/));
  assert.equal(screen.getByTestId("runs").textContent, "complete");
  cleanup();
  await session.close();
});

test("useRun gives the status, steers, cancels and gives the outcome once the Run ended", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "r4", { WebSocket: relay.WebSocket }));
  const run = await withTimeout(session.send("Plan a trip."));
  relay.publish({ kind: "run", id: "r-active", run_id: run.runId, status: "active" });
  const { result } = renderHook(() => useRun(session, run.runId));
  await waitFor(() => assert.equal(result.current.status, "active"));
  assert.equal(result.current.outcome, null);
  let delivery;
  await act(async () => {
    delivery = result.current.steer("Make it 5 days.");
    await delivery.published;
  });
  const steer = relay.frames("publish").find((f) => f.entry.intent === "steer").entry;
  assert.deepEqual(steer.message.parts, [{ type: "text", text: "Make it 5 days." }]);
  assert.equal(steer.run_id, run.runId);
  await act(async () => {
    await result.current.cancel("enough");
  });
  const cancel = relay.frames("publish").find((f) => f.entry.kind === "cancel").entry;
  assert.equal(cancel.run_id, run.runId);
  await act(async () => {
    relay.publish({ kind: "run", id: "r-cancelled", run_id: run.runId, status: "cancelled" });
  });
  await waitFor(() => assert.notEqual(result.current.outcome, null));
  assert.equal(result.current.status, "cancelled");
  assert.equal(result.current.outcome.endReason, "cancelled");
  assert.deepEqual(result.current.outcome.undelivered.map((m) => m.id), [steer.message.id]);
  cleanup();
  await session.close();
});
