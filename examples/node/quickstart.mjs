// The JavaScript package's first steps in Node (docs/howto/javascript-package.md):
//   npm install @runwire/client        (and `ws` on Node 18/20, or run Node 20 with --experimental-websocket)
//   node quickstart.mjs ws://127.0.0.1:8787 trip-42
import { connect, messageText } from "@runwire/client";

const [url = "ws://127.0.0.1:8787", sessionId = "trip-42"] = process.argv.slice(2);

// Node 22+, Deno and Bun have a global WebSocket; on Node 18/20 pass `ws`'s:
//   import WebSocket from "ws";  connect(url, sessionId, { WebSocket })
const session = await connect(url, sessionId, { clientId: "quickstart" });
const run = await session.send("Plan a 3-day trip to Lisbon.");
for (const m of session.view.getMessages()) console.log(`${m.message.role}: ${messageText(m.message)}`);
console.log(JSON.stringify({ runId: run.runId, status: run.status }));
await session.cancel(run.runId);
await session.close();
