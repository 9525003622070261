// RunwireChatTransport with the real `ai` package: readUIMessageStream reads what the transport
// gives, every chunk passes the AI SDK's own uiMessageChunkSchema, stop cancels the Run,
// reconnectToStream replays a Run still going, steering shows as a steering-message part.
// Runs against the fake relay of tests/js (no sockets): node --test client_side/js/test/
import assert from "node:assert/strict";
import { test } from "node:test";

import { readUIMessageStream, uiMessageChunkSchema, validateUIMessages } from "ai";

import { connect } from "../lib/index.js";
import { RunwireChatTransport } from "../lib/ai-sdk.js";
import { FakeRelay } from "../../../tests/js/fake_relay.mjs";
import { until, withTimeout } from "../../../tests/js/waits.mjs";

const schema = uiMessageChunkSchema();

const status = (relay, runId, s) => relay.publish({ kind: "run", id: `${runId}-${s}`, run_id: runId, status: s });
const open = (relay, runId, mid, seen = []) =>
  relay.publish({ kind: "response_open", id: `${mid}-open`, run_id: runId, message_id: mid, seen, metadata: {} });
const append = (relay, runId, mid, id, chunks) =>
  relay.publish({ kind: "response_append", id, run_id: runId, message_id: mid, chunks });
const close = (relay, runId, mid) => relay.publish({ kind: "response_close", id: `${mid}-close`, run_id: runId, message_id: mid });

const userMsg = (id, text) => ({ id, role: "user", parts: [{ type: "text", text }] });

/** Read a transport stream: every chunk checked against the AI SDK's schema, and the message readUIMessageStream builds. */
async function read(stream) {
  const [check, build] = stream.tee();
  const chunks = [];
  const checking = (async () => {
    for await (const chunk of check) {
      const result = await schema.validate(chunk);
      assert.ok(result.success, `not a UIMessageChunk: ${JSON.stringify(chunk)}: ${result.error}`);
      chunks.push(chunk);
    }
  })();
  let message = null;
  for await (const m of readUIMessageStream({ stream: build, terminateOnError: true })) message = m;
  await checking;
  return { chunks, message };
}

async function promptOf(relay, n = 0) {
  await until(() => relay.frames("publish").filter((f) => f.entry.intent === "prompt").length > n);
  return relay.frames("publish").filter((f) => f.entry.intent === "prompt")[n].entry;
}

test("sendMessages starts a Run and streams its replies; readUIMessageStream builds the message", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "chat-1", { WebSocket: relay.WebSocket }));
  const transport = new RunwireChatTransport({ session });
  const streaming = transport.sendMessages({
    trigger: "submit-message",
    chatId: "chat-1",
    messageId: undefined,
    messages: [userMsg("u1", "Plan a trip.")],
    abortSignal: undefined,
  });
  const prompt = await promptOf(relay);
  assert.equal(prompt.message.id, "u1", "useChat's message id is the entry's");
  assert.deepEqual(prompt.message.parts, [{ type: "text", text: "Plan a trip." }]);
  const runId = prompt.run_id;
  const stream = await withTimeout(streaming);
  const reading = read(stream);
  status(relay, runId, "active");
  open(relay, runId, "a1");
  // runwire lets an agent leave text ids out; the transport gives the AI SDK the ids it needs.
  append(relay, runId, "a1", "x1", [{ type: "reasoning-delta", delta: "Thinking." }, { type: "text-delta", delta: "Day one" }]);
  append(relay, runId, "a1", "x2", [
    { type: "tool-input-available", toolCallId: "c1", toolName: "weather", input: { city: "Lisbon" } },
    { type: "tool-output-available", toolCallId: "c1", output: { sky: "clear" } },
    { type: "text-start", id: "t2" },
    { type: "text-delta", id: "t2", delta: "Sunny." },
    { type: "text-end", id: "t2" },
    { type: "data-weather", data: { city: "Lisbon" } },
    { type: "not-an-ai-sdk-chunk", what: "dropped" },
  ]);
  close(relay, runId, "a1");
  status(relay, runId, "complete");
  const { chunks, message } = await withTimeout(reading);
  assert.equal(chunks[0].type, "start");
  assert.equal(chunks[0].messageId, "a1");
  assert.equal(chunks.at(-1).type, "finish");
  assert.ok(!chunks.some((c) => c.type === "not-an-ai-sdk-chunk"));
  assert.equal(message.id, "a1");
  assert.equal(message.role, "assistant");
  const kinds = message.parts.map((p) => p.type);
  assert.deepEqual(kinds, ["step-start", "reasoning", "text", "tool-weather", "text", "data-weather"]);
  assert.deepEqual(message.parts.filter((p) => p.type === "text").map((p) => p.text), ["Day one", "Sunny."]);
  const tool = message.parts.find((p) => p.type === "tool-weather");
  assert.equal(tool.state, "output-available");
  assert.deepEqual(tool.output, { sky: "clear" });
  // The session's conversation, as useChat's messages.
  const ui = transport.uiMessages();
  assert.deepEqual(ui.map((m) => [m.id, m.role]), [["u1", "user"], ["a1", "assistant"]]);
  assert.deepEqual(ui[1].parts.map((p) => p.type), ["reasoning", "text", "tool-weather", "text"]);
  await validateUIMessages({ messages: ui }); // throws unless the AI SDK takes them
  const uiTool = ui[1].parts[2];
  assert.deepEqual([uiTool.toolCallId, uiTool.state, uiTool.input, uiTool.output], ["c1", "output-available", { city: "Lisbon" }, { sky: "clear" }]);
  await session.close();
});

test("stop (the stream's abort signal) cancels the Run and ends the stream with abort", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "chat-2", { WebSocket: relay.WebSocket }));
  const transport = new RunwireChatTransport({ session });
  const controller = new AbortController();
  const streaming = transport.sendMessages({
    trigger: "submit-message",
    chatId: "chat-2",
    messageId: undefined,
    messages: [userMsg("u1", "Write a long story.")],
    abortSignal: controller.signal,
  });
  const runId = (await promptOf(relay)).run_id;
  const reading = read(await withTimeout(streaming));
  status(relay, runId, "active");
  open(relay, runId, "a1");
  append(relay, runId, "a1", "x1", [{ type: "text-delta", delta: "Once upon" }]);
  await until(() => session.view.tree.message("a1")?.message.parts.length === 1);
  controller.abort();
  const { chunks, message } = await withTimeout(reading);
  assert.equal(chunks.at(-1).type, "abort");
  assert.equal(message.parts.find((p) => p.type === "text").text, "Once upon");
  await until(() => relay.frames("publish").some((f) => f.entry.kind === "cancel"));
  const cancel = relay.frames("publish").find((f) => f.entry.kind === "cancel").entry;
  assert.equal(cancel.run_id, runId);
  await session.close();
});

test("reconnectToStream replays the Run still going after a reload, then follows it; null when none is", async () => {
  const relay = new FakeRelay();
  const first = await withTimeout(connect(relay.url, "chat-3", { WebSocket: relay.WebSocket }));
  const t1 = new RunwireChatTransport({ session: first });
  assert.equal(await t1.reconnectToStream({ chatId: "chat-3" }), null);
  const streaming = t1.sendMessages({ trigger: "submit-message", chatId: "chat-3", messageId: undefined, messages: [userMsg("u1", "Count.")], abortSignal: undefined });
  const runId = (await promptOf(relay)).run_id;
  await withTimeout(streaming);
  status(relay, runId, "active");
  open(relay, runId, "a1");
  append(relay, runId, "a1", "x1", [{ type: "text-delta", delta: "one " }]);
  await first.close(); // the page reloads
  const second = await withTimeout(connect(relay.url, "chat-3", { WebSocket: relay.WebSocket }));
  const t2 = new RunwireChatTransport({ session: second });
  assert.equal(t2.resumeStreamIsReplay, true);
  const stream = await withTimeout(t2.reconnectToStream({ chatId: "chat-3" }));
  assert.notEqual(stream, null);
  const reading = read(stream);
  append(relay, runId, "a1", "x2", [{ type: "text-delta", delta: "two" }]);
  close(relay, runId, "a1");
  status(relay, runId, "complete");
  const { chunks, message } = await withTimeout(reading);
  assert.equal(message.parts.find((p) => p.type === "text").text, "one two");
  assert.equal(chunks.filter((c) => c.type === "start").length, 1);
  assert.equal(await t2.reconnectToStream({ chatId: "chat-3" }), null);
  await second.close();
});

test("steer() steers the Run going; the agent's take-up is a steering-message part; other devices' messages show", async () => {
  const relay = new FakeRelay();
  const session = await withTimeout(connect(relay.url, "chat-4", { WebSocket: relay.WebSocket }));
  const transport = new RunwireChatTransport({ session });
  assert.throws(() => transport.steer("too early"), (e) => e.code === "RUN_NOT_ACTIVE");
  const streaming = transport.sendMessages({ trigger: "submit-message", chatId: "chat-4", messageId: undefined, messages: [userMsg("u1", "Plan 3 days.")], abortSignal: undefined });
  const runId = (await promptOf(relay)).run_id;
  const reading = read(await withTimeout(streaming));
  status(relay, runId, "active");
  open(relay, runId, "a1");
  append(relay, runId, "a1", "x1", [{ type: "text-delta", delta: "Day 1." }]);
  close(relay, runId, "a1");
  await until(() => session.view.run(runId)?.status === "active");
  const delivery = transport.steer("Make it 5 days.");
  const { serial } = await withTimeout(delivery.published);
  assert.ok(serial > 0);
  const steer = relay.frames("publish").find((f) => f.entry.intent === "steer").entry;
  // The agent takes it in at its next step.
  open(relay, runId, "a2", [steer.message.id]);
  append(relay, runId, "a2", "y1", [{ type: "text-delta", delta: "Now 5 days." }]);
  close(relay, runId, "a2");
  status(relay, runId, "complete");
  const { chunks, message } = await withTimeout(reading);
  const steering = chunks.filter((c) => c.type === "steering-message");
  assert.deepEqual(steering, [{ type: "steering-message", id: steer.message.id, parts: [{ type: "text", text: "Make it 5 days." }] }]);
  const part = message.parts.find((p) => p.type === "steering-message");
  assert.equal(part.id, steer.message.id);
  assert.deepEqual(message.parts.filter((p) => p.type === "text").map((p) => p.text), ["Day 1.", "Now 5 days."]);
  assert.equal((await withTimeout(delivery.outcome)).consumed, true);
  // A message another device sent shows in the session's messages.
  relay.publish({ kind: "message", id: "m-phone", run_id: "run-phone", intent: "prompt", message: userMsg("u-phone", "From my phone."), agent: "default" }, "phone");
  await until(() => transport.uiMessages().some((m) => m.id === "u-phone"));
  await session.close();
});
