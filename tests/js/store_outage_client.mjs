// Driven by tests/integration/test_js_store_outage.py against a real relay (not a node --test
// file): `node --experimental-websocket store_outage_client.mjs URL SESSION SCENARIO`; prints
// one JSON line with what each send did.
import { connect } from "../../client_side/js/dist/runwire.js";

const [url, sessionId, scenario] = process.argv.slice(2);
const outcome = (settled) =>
  settled.status === "fulfilled" ? { ok: settled.value.runId } : { code: settled.reason.code ?? String(settled.reason) };

const session = await connect(url, sessionId, { storeWait: scenario === "give-up" ? 300 : 60000 });
const out = {};
if (scenario === "order") {
  // Three sends at once: their publishes are in flight together.
  out.sends = (await Promise.allSettled(["m0", "m1", "m2"].map((t) => session.send(t)))).map(outcome);
} else {
  out.sends = [outcome((await Promise.allSettled([session.send("lost")]))[0])];
  out.sends.push(outcome((await Promise.allSettled([session.send("kept")]))[0]));
  out.connected = session.connected;
}
await session.close();
console.log(JSON.stringify(out));
