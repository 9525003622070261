// A tiny in-memory relay and a WebSocket class that talks to it, for testing runwire.js in Node
// without sockets. It keeps the relay's promises that the client relies on: serials, duplicate
// ids acknowledged with the original serial, attach with resume / reset, history pages.

export class FakeRelay {
  constructor() {
    this.epoch = "epoch-1";
    this.entries = []; // stamped entries, serial = index + 1
    this.sockets = new Set();
    this.received = []; // every frame any client sent, in order
    this.url = "ws://fake-relay";
    this.refuse = false; // the next connections fail to open
    this.closeCodeOnHello = null; // close code to answer hello with (4001: unauthorized)
    this.tokens = null; // a Set of the tokens it accepts (null: anonymous); others are expired
    this.readers = null; // a Set of the tokens that may attach (null: all); others: UNAUTHORIZED
    this.rateLimited = 0; // refuse this many publishes RATE_LIMITED (each holds later ones, as the relay does)
    this.retryAfter = 0.005; // the seconds a RATE_LIMITED refusal names (null: none)
    this._held = null; // the refused entry id later publishes wait behind
    this.rewrite = null; // (frame) => frame: what a socket sends instead (frames no relay sends)
    const relay = this;
    this.WebSocket = class extends FakeWebSocket {
      constructor(url) {
        super(url, relay);
      }
    };
  }

  get head() {
    return this.entries.length;
  }

  /** Publish as the relay would for an agent or another client (no socket needed). */
  publish(entry, clientId = "agent-1") {
    const found = this.entries.find((e) => e.id === entry.id);
    if (found) return { serial: found.serial, duplicate: true };
    const stamped = { serial: this.entries.length + 1, ts: 1700000000000 + this.entries.length, client_id: clientId, ...entry };
    this.entries.push(stamped);
    for (const ws of this.sockets) {
      if (ws._attached) ws._deliver({ type: "deliver", session_id: ws._attached, entries: [stamped] });
    }
    return { serial: stamped.serial, duplicate: false };
  }

  /** History was lost: a new epoch with the entries renumbered from 1. */
  loseHistory(keep) {
    this.epoch = `epoch-${Math.random()}`;
    this.entries = keep.map((e, i) => ({ ...e, serial: i + 1 }));
  }

  frames(type) {
    return this.received.filter((f) => f.type === type);
  }

  dropAll(code = 1006, reason = "") {
    for (const ws of [...this.sockets]) ws._drop(code, reason);
  }

  /** A connection whose token may publish but not attach (`readers` set and without it). */
  _writeOnly(ws) {
    return this.readers !== null && !this.readers.has(new URL(ws.url).searchParams.get("token"));
  }

  _handle(ws, frame) {
    this.received.push(frame);
    if (frame.type === "hello") {
      if (this.closeCodeOnHello !== null) {
        ws._drop(this.closeCodeOnHello);
        return;
      }
      const token = new URL(ws.url).searchParams.get("token");
      if (this.tokens !== null && !this.tokens.has(token)) {
        const error = { code: "TOKEN_EXPIRED", message: "the token has expired", details: {} };
        ws._refuse({ type: "error", req: frame.req, error }, 4003, "TOKEN_EXPIRED: the token has expired");
        return;
      }
      ws._clientId = frame.client_id || `conn-${Math.floor(Math.random() * 1e9)}`;
      ws._deliver({ type: "welcome", v: 1, client_id: ws._clientId, connection_id: "c", max_frame_bytes: 1048576 });
    } else if (frame.type === "attach") {
      if (this.readers !== null && !this.readers.has(new URL(ws.url).searchParams.get("token"))) {
        const error = { code: "UNAUTHORIZED", message: `the token does not grant 'subscribe' in '${frame.session_id}'`, details: { needs: "subscribe" } };
        ws._deliver({ type: "error", req: frame.req, error });
        return;
      }
      let entries;
      let reset = false;
      const resume = frame.from_serial !== undefined && (frame.epoch === undefined || frame.epoch === this.epoch) && frame.from_serial <= this.head;
      if (resume) entries = this.entries.slice(frame.from_serial);
      else {
        reset = frame.from_serial !== undefined;
        entries = this.entries.slice(-(frame.limit || 100));
      }
      const hasOlder = entries.length > 0 && entries[0].serial > 1;
      ws._attached = frame.session_id;
      ws._deliver({ type: "attached", req: frame.req, session_id: frame.session_id, epoch: this.epoch, head: this.head, entries, has_older: hasOlder, reset });
    } else if (frame.type === "publish") {
      if (ws._attached !== frame.session_id && !this._writeOnly(ws)) {
        // As the relay: only a token that may not read the session publishes unattached.
        const error = { code: "NOT_ATTACHED", message: `attach to '${frame.session_id}' first`, details: { session_id: frame.session_id } };
        ws._deliver({ type: "error", req: frame.req, error });
        return;
      }
      if (ws.swallowNextAck) {
        ws.swallowNextAck = false;
        this.publish(frame.entry, ws._clientId);
        ws._drop(1006); // stored, but the ack never arrives
        return;
      }
      const entry = frame.entry;
      if (this._held === entry.id) this._held = null; // its retry: handled as usual
      if (this._held !== null || this.rateLimited > 0) {
        if (this._held === null) {
          this.rateLimited -= 1;
          this._held = entry.id;
        }
        const details = { limit: 1, held: this._held };
        if (this.retryAfter !== null) details.retry_after = this.retryAfter;
        ws._deliver({ type: "error", req: frame.req, error: { code: "RATE_LIMITED", message: "too many", details } });
        return;
      }
      if (entry.kind === "message" && entry.intent !== "prompt") {
        const ended = this.entries.find((e) => e.kind === "run" && e.run_id === entry.run_id && ["complete", "cancelled", "error"].includes(e.status));
        if (ended && !this.entries.some((e) => e.id === entry.id)) {
          ws._deliver({ type: "error", req: frame.req, error: { code: "RUN_NOT_ACTIVE", message: "ended", details: { run_id: entry.run_id, status: ended.status } } });
          return;
        }
      }
      const { serial, duplicate } = this.publish(entry, ws._clientId);
      ws._deliver({ type: "ack", req: frame.req, serial, duplicate });
    } else if (frame.type === "history") {
      const older = this.entries.filter((e) => e.serial < frame.before);
      const page = older.slice(-(frame.limit || 50));
      ws._deliver({ type: "page", req: frame.req, session_id: frame.session_id, entries: page, has_older: page.length > 0 && page[0].serial > 1 });
    }
  }
}

class FakeWebSocket {
  constructor(url, relay) {
    this.url = url;
    this.readyState = 0;
    this._relay = relay;
    this._listeners = { open: [], message: [], close: [], error: [] };
    this._attached = null;
    this.swallowNextAck = false;
    setTimeout(() => {
      if (relay.refuse) {
        this._drop(1006);
        return;
      }
      this.readyState = 1;
      relay.sockets.add(this);
      this._emit("open", {});
    }, 0);
  }

  addEventListener(type, fn) {
    this._listeners[type].push(fn);
  }

  send(data) {
    if (this.readyState !== 1) throw new Error("not open");
    const frame = JSON.parse(data);
    setTimeout(() => {
      if (this.readyState === 1) this._relay._handle(this, frame);
    }, 0);
  }

  close(code = 1000, reason = "") {
    this._drop(code, reason);
  }

  _deliver(frame) {
    const data = JSON.stringify(this._relay.rewrite ? this._relay.rewrite(frame) : frame);
    setTimeout(() => {
      if (this.readyState === 1) this._emit("message", { data });
    }, 0);
  }

  /** Send one last frame, then close with `code` (the relay's answer to a refused hello). */
  _refuse(frame, code, reason) {
    const data = JSON.stringify(frame);
    this.readyState = 3;
    this._relay.sockets.delete(this);
    setTimeout(() => {
      this._emit("message", { data });
      this._emit("close", { code, reason });
    }, 0);
  }

  _drop(code, reason = "") {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this._relay.sockets.delete(this);
    setTimeout(() => this._emit("close", { code, reason }), 0);
  }

  _emit(type, ev) {
    for (const fn of this._listeners[type]) fn(ev);
  }
}
