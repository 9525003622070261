// A bare Node ws relay: bench/baseline_relay.py ported to Node's `ws`, the benchmark's
// second reference. Same frames, same behaviour:
//
// * hello -> welcome;
// * attach -> attached (no history: entries is always empty);
// * publish -> the entry, with a per-session serial and nothing else added, is sent as a
//   deliver frame to every connection attached to the session (the publisher too, if
//   attached), then an ack goes to the publisher;
// * detach -> ack; anything else with a req -> error.
//
// No storage, no validation beyond JSON.parse, no coalescing: one frame in, one frame
// out per subscriber. `node bench/node/baseline_relay.mjs --port N` (0 picks a free
// port) prints `baseline relay listening on ws://HOST:PORT`; runs until SIGINT or SIGTERM.
// Install its one dependency with `npm ci` in bench/node (ws, pinned by package-lock.json).

import { WebSocketServer } from "ws";

function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at >= 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

const host = option("--host", "127.0.0.1");
const port = Number(option("--port", "8789"));
const subscribers = new Map(); // session id -> Set of sockets
const serials = new Map(); // session id -> newest serial
let ids = 0;

const server = new WebSocketServer({
  host,
  port,
  perMessageDeflate: false,
  maxPayload: 4 * 1024 * 1024,
});

server.on("connection", (ws) => {
  const attached = new Set();
  ws.on("message", (raw) => {
    let frame;
    try {
      frame = JSON.parse(raw.toString());
    } catch {
      return;
    }
    if (frame === null || typeof frame !== "object") return;
    const kind = frame.type;
    const req = frame.req ?? null;
    if (kind === "publish") {
      const sessionId = frame.session_id;
      const serial = (serials.get(sessionId) ?? 0) + 1;
      serials.set(sessionId, serial);
      const entry = frame.entry;
      entry.serial = serial;
      const data = JSON.stringify({ type: "deliver", session_id: sessionId, entries: [entry] });
      for (const sub of subscribers.get(sessionId) ?? []) {
        if (sub.readyState === sub.OPEN) sub.send(data);
      }
      ws.send(JSON.stringify({ type: "ack", req, serial }));
    } else if (kind === "attach") {
      const sessionId = frame.session_id;
      if (!subscribers.has(sessionId)) subscribers.set(sessionId, new Set());
      subscribers.get(sessionId).add(ws);
      attached.add(sessionId);
      ws.send(
        JSON.stringify({
          type: "attached",
          req,
          session_id: sessionId,
          epoch: "baseline",
          head: serials.get(sessionId) ?? 0,
          entries: [],
          has_older: false,
        }),
      );
    } else if (kind === "hello") {
      ids += 1;
      ws.send(
        JSON.stringify({
          type: "welcome",
          v: 1,
          req,
          client_id: frame.client_id || `c${ids}`,
          connection_id: `conn${ids}`,
          max_frame_bytes: 1024 * 1024,
        }),
      );
    } else if (kind === "detach") {
      subscribers.get(frame.session_id)?.delete(ws);
      attached.delete(frame.session_id);
      ws.send(JSON.stringify({ type: "ack", req }));
    } else if (req !== null) {
      ws.send(
        JSON.stringify({
          type: "error",
          req,
          error: { code: "UNKNOWN_FRAME", message: `unknown frame type ${JSON.stringify(kind)}` },
        }),
      );
    }
  });
  ws.on("close", () => {
    for (const sessionId of attached) {
      const subs = subscribers.get(sessionId);
      if (subs) {
        subs.delete(ws);
        if (subs.size === 0) subscribers.delete(sessionId);
      }
    }
  });
  ws.on("error", () => {});
});

server.on("listening", () => {
  const real = server.address().port;
  console.log(`baseline relay listening on ws://${host}:${real}`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
