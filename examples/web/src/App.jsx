// A chat on a runwire session: the AI SDK's useChat with RunwireChatTransport (send, stream, stop,
// resume after a reload), steering while a reply streams, and @runwire/client's React hooks for
// the connection, the Runs and what other tabs or devices send.
//
// The relay and the session come from the URL: ?relay=ws://127.0.0.1:8787&session=trip-42
import { useChat } from "@ai-sdk/react";
import { RunwireChatTransport } from "@runwire/client/ai-sdk";
import { useMessages, useRuns, useSession } from "@runwire/client/react";
import { useEffect, useMemo, useState } from "react";

const params = new URLSearchParams(location.search);
const RELAY = params.get("relay") ?? `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`;
const SESSION = params.get("session") ?? "web-demo";

export function App() {
  const { session, state, error } = useSession(RELAY, SESSION, { clientId: `web-${Math.random().toString(16).slice(2, 10)}` });
  if (error) return <p role="alert">Could not connect: {error.message}</p>;
  if (!session) return <p data-testid="state">connecting…</p>;
  return <Chat key={SESSION} session={session} state={state} />;
}

function Chat({ session, state }) {
  // --8<-- [start:usechat]
  const transport = useMemo(() => new RunwireChatTransport({ session }), [session]);
  const { messages, sendMessage, setMessages, status, stop } = useChat({
    id: session.sessionId,
    transport,
    messages: transport.uiMessages(),
    resume: true, // a Run still going after a reload streams on (reconnectToStream)
  });
  // --8<-- [end:usechat]
  const [input, setInput] = useState("");
  const busy = status === "submitted" || status === "streaming";

  // --8<-- [start:hooks]
  // What other tabs and devices send (and their replies) shows while this tab streams nothing.
  const shown = useMessages(session);
  useEffect(() => {
    if (!busy) setMessages(transport.uiMessages());
  }, [shown, busy, transport, setMessages]);

  const runs = useRuns(session);
  const going = runs.filter((r) => r.status === "active" || r.status === "pending" || r.status === "queued");
  // --8<-- [end:hooks]

  const submit = (event) => {
    event.preventDefault();
    const text = input.trim();
    if (!text) return;
    setInput("");
    // --8<-- [start:steer]
    if (busy || going.length) transport.steer(text);
    else sendMessage({ text });
    // --8<-- [end:steer]
  };

  return (
    <main>
      <header>
        <h1>runwire + useChat</h1>
        <span data-testid="state">{state}</span> · <span data-testid="runs">{runs.map((r) => r.status).join(", ")}</span>
      </header>
      <ol data-testid="messages">
        {messages.map((m) => (
          <li key={m.id} data-role={m.role}>
            <b>{m.role}:</b>{" "}
            {m.parts.map((p, i) =>
              p.type === "text" ? (
                <span key={i}>{p.text}</span>
              ) : p.type === "steering-message" ? (
                <em key={i} data-testid="steering">
                  [steered: {p.parts.map((q) => q.text).join("")}]
                </em>
              ) : p.type.startsWith("tool-") ? (
                <code key={i}> [{p.type.slice(5)}] </code>
              ) : null,
            )}
          </li>
        ))}
      </ol>
      <form onSubmit={submit}>
        <input aria-label="message" value={input} onChange={(e) => setInput(e.target.value)} placeholder={busy ? "Steer the reply…" : "Ask…"} />
        <button type="submit">{busy || going.length ? "Steer" : "Send"}</button>
        <button type="button" onClick={() => (busy ? stop() : going[0] && session.cancel(going.at(-1).runId))} disabled={!busy && !going.length}>
          Stop
        </button>
      </form>
    </main>
  );
}
