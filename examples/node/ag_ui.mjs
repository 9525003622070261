// A session's history as AG-UI events (docs/howto/ag-ui.md):
//   node ag_ui.mjs ws://127.0.0.1:8787 trip-42
import { connect } from "@runwire/client";
import { heldAgUiEvents } from "@runwire/client/ag-ui";

const [url = "ws://127.0.0.1:8787", sessionId = "trip-42"] = process.argv.slice(2);
const session = await connect(url, sessionId);
// --8<-- [start:history]
const events = heldAgUiEvents(session); // the history the session loaded
for (const event of events) console.log(JSON.stringify(event));
// --8<-- [end:history]
await session.close();
