// The AG-UI mapping (@runwire/client/ag-ui): the shared vectors (tests/vectors/ag-ui/, which
// transport/agui.py passes too), every event valid against @ag-ui/core's own schemas, and a live
// session's events against the fake relay of tests/js.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";

import { EventSchemas } from "@ag-ui/core/schemas";

import { connect } from "../lib/index.js";
import { agUiEvents, toAgUiEvents } from "../lib/ag-ui.js";
import { FakeRelay } from "../../../tests/js/fake_relay.mjs";
import { until, withTimeout } from "../../../tests/js/waits.mjs";

const dir = new URL("../../../tests/vectors/ag-ui/", import.meta.url);
const vectors = readdirSync(dir).filter((f) => f.endsWith(".json"));

function valid(events) {
  for (const event of events) {
    const result = EventSchemas.safeParse(event);
    assert.ok(result.success, `not an AG-UI event: ${JSON.stringify(event)}: ${result.error}`);
  }
}

test("there are AG-UI vectors", () => assert.ok(vectors.length >= 1));

for (const name of vectors) {
  test(`AG-UI vector ${name}: the events transport/agui.py gives, each valid against @ag-ui/core`, () => {
    const v = JSON.parse(readFileSync(new URL(name, dir), "utf8"));
    const events = toAgUiEvents(v.entries, v.thread_id);
    assert.deepEqual(events, v.events);
    valid(events);
    const types = new Set(events.map((e) => e.type));
    for (const t of ["RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "STATE_SNAPSHOT", "CUSTOM"]) {
      assert.ok(types.has(t), `the vector covers ${t}`);
    }
  });
}

test("agUiEvents(session) gives the held entries' events, then live ones, and ends with the session", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "ag-1", { WebSocket: relay.WebSocket }));
  const run = await withTimeout(session.send("Plan a trip."));
  const got = [];
  const reading = (async () => {
    for await (const e of agUiEvents(session)) got.push(e);
  })();
  relay.publish({ kind: "run", id: "r1", run_id: run.runId, status: "active" });
  relay.publish({ kind: "response_open", id: "o1", run_id: run.runId, message_id: "a1", seen: [], metadata: {} });
  relay.publish({ kind: "response_append", id: "x1", run_id: run.runId, message_id: "a1", chunks: [{ type: "text-delta", delta: "Day one." }] });
  const steer = run.steer("Make it 5 days.");
  await withTimeout(steer.published);
  relay.publish({ kind: "response_close", id: "c1", run_id: run.runId, message_id: "a1" });
  relay.publish({ kind: "run", id: "r2", run_id: run.runId, status: "complete" });
  await until(() => session.view.run(run.runId)?.status === "complete");
  await session.close();
  await withTimeout(reading);
  valid(got);
  assert.deepEqual(
    got.map((e) => (e.type === "CUSTOM" ? `${e.type}:${e.name}` : e.type)),
    ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "CUSTOM:runwire.steer", "TEXT_MESSAGE_END", "RUN_FINISHED"],
  );
  assert.equal(got.find((e) => e.type === "RUN_STARTED").threadId, "ag-1");
  assert.equal(got.find((e) => e.name === "runwire.steer").value.text, "Make it 5 days.");
});
