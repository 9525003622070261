// The connection and reconnect side of a Session: open the socket (a fresh token first when the
// session has a provider), hello and attach (or resume from the newest serial with the epoch),
// re-send what waits for a reply, back off and try again when the socket drops, and give up for
// good on a refusal no retry mends. It also drives the session's publish lane (lane.ts): it asks
// the lane for each publish's turn, tells it the replies, and waits as it says. Session takes these
// as its own methods (connectionMethods). See docs/explanation/publish-lane.md.

import type { Session } from "./session.js";
import type { CancelDenial, ConnectOptions, ConnectionState, Entry, Intent, Interrupt, Multitask, OutcomeRecord, Refusal, Refused, ThreadAccess, TreeEvent, UIMessage, PendingRequest } from "./types.js";
import { ABORTED, CANCEL_DENIED, CLOSE_CODES, CONNECTION_CLOSED, EPOCH_MISMATCH, MULTITASK_STRATEGIES, NOT_ATTACHED, PAYLOAD_TOO_LARGE, PROTOCOL_ERROR, PROTOCOL_VERSION, RATE_LIMITED, RUN_NOT_ACTIVE, RUN_NOT_FOUND, RunwireError, STORE_UNAVAILABLE, TERMINAL, TOKEN_EXPIRED, UNAUTHORIZED, VALIDATION_ERROR, backoff, isObject, newId, utf8Length, isTerminal } from "./errors.js";
import { checkRelayFrame } from "./frames.js";
import { ClientRun, Deferred, Delivery, asMessage, denied, reused, writeOnlyError } from "./runs.js";
import { View } from "./view.js";

/** WebSocket.OPEN (the constant, for classes passed in that lack it). */
export const OPEN = 1;

/** Listen to online/offline where they exist and open the first socket. @internal */
export function _start(this: Session): Promise<Session> {
  if (typeof globalThis.addEventListener === "function") {
    globalThis.addEventListener("online", this._onOnline);
    globalThis.addEventListener("offline", this._onOffline);
  }
  this._open();
  return this._first.promise;
}

/** @param {RunwireError} error @internal */
export function _shutdown(this: Session, error: RunwireError) {
  const wasReady = this._ready;
  this._closed = true;
  this._ready = false;
  if (this._retryTimer !== null) clearTimeout(this._retryTimer);
  this._retryTimer = null;
  if (typeof globalThis.removeEventListener === "function") {
    globalThis.removeEventListener("online", this._onOnline);
    globalThis.removeEventListener("offline", this._onOffline);
  }
  for (const p of [...this._pending.values()]) p.reject(error);
  this._pending.clear();
  this._wakeLane(); // publishes waiting for their turn see the end too
  for (const list of this._deliveries.values()) for (const d of list) d._fail(error);
  this._deliveries.clear();
  this._first.reject(error);
  this.view._close();
  if (wasReady || this._first.settled) this._emit("closed");
}

/** @param {ConnectionState} state @internal */
export function _emit(this: Session, state: ConnectionState) {
  for (const fn of [...this._stateCallbacks]) {
    try {
      fn(state);
    } catch (err) {
      console.error("runwire: a state callback failed:", err);
    }
  }
}

/** Open the next socket, with a fresh token first when there is a provider. @internal */
export function _open(this: Session) {
  if (this._closed) return;
  const fresh = this._tokenProvider !== null && (this._tries > 0 || this._token === null);
  this._tries += 1;
  if (!fresh) {
    this._openSocket();
    return;
  }
  this._freshToken().then(
    () => this._openSocket(),
    (error) => {
      if (!this._closed) this._fatalError(error);
    },
  );
}

/** Ask the token provider for a token; UNAUTHORIZED if it fails or gives none. @internal */
export async function _freshToken(this: Session) {
  const provider = (this._tokenProvider as () => string | Promise<string>);
  let token;
  try {
    token = await provider();
  } catch (err) {
    throw new RunwireError(UNAUTHORIZED, `the token provider failed: ${err}`);
  }
  if (typeof token !== "string" || !token) throw new RunwireError(UNAUTHORIZED, "the token provider returned no token");
  this._token = token;
}

/** @internal */
export function _openSocket(this: Session) {
  if (this._closed) return;
  let url = this.url;
  if (this._token) url += (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(this._token);
  /** @type {WebSocket} */
  let ws: WebSocket;
  try {
    ws = new this._WebSocket(url);
  } catch (err) {
    this._lost(null, err);
    return;
  }
  this._ws = ws;
  let welcomed = false;
  const timer = setTimeout(() => {
    if (!this._ready && this._ws === ws) ws.close(4000, "timed out");
  }, this._openTimeout);
  ws.addEventListener("open", () => {
    /** @type {Record<string, any>} */
    const hello: Record<string, any> = { type: "hello", v: PROTOCOL_VERSION, role: "client" };
    if (this.clientId) hello.client_id = this.clientId;
    ws.send(JSON.stringify(hello));
  });
  ws.addEventListener("message", (ev) => {
    if (this._ws !== ws) return;
    let frame;
    try {
      frame = JSON.parse(typeof ev.data === "string" ? ev.data : String(ev.data));
    } catch {
      console.warn("runwire: dropping a frame this client cannot read");
      return;
    }
    if (!isObject(frame) || typeof frame.type !== "string") return;
    try {
      checkRelayFrame(frame);
    } catch (err) {
      console.warn(`runwire: dropping a frame this client cannot read: ${err instanceof Error ? err.message : err}`);
      if (!welcomed) {
        // As the Python client: a first frame it cannot read (a welcome, or a refused hello's
        // error) fails the first connect with that error; a later one closes the socket and the
        // session connects again.
        if (!this._first.settled) this._fatalError((err as RunwireError));
        ws.close(4002, "cannot read the welcome");
      }
      return;
    }
    if (!welcomed) {
      if (frame.type === "error") {
        this._refusal = RunwireError.fromWire(frame.error); // the close decides: retry or stop
        ws.close();
        return;
      }
      if (frame.type !== "welcome") {
        ws.close(4002, "expected welcome");
        return;
      }
      welcomed = true;
      this._expired = 0;
      this.clientId = frame.client_id;
      this._defaultMultitask = MULTITASK_STRATEGIES.includes(frame.multitask) ? frame.multitask : null;
      if (Number.isInteger(frame.max_frame_bytes) && frame.max_frame_bytes > 0) this._maxFrameBytes = frame.max_frame_bytes;
      this._connects += 1;
      if (this.subscribe) this._attach(ws, timer);
      else this._up(ws, timer);
      return;
    }
    this._onFrame(frame);
  });
  ws.addEventListener("close", (ev) => {
    clearTimeout(timer);
    if (this._ws === ws) this._lost(ev, null);
  });
}

/** @param {WebSocket} ws @param {ReturnType<typeof setTimeout>} timer @internal */
export function _attach(this: Session, ws: WebSocket, timer: ReturnType<typeof setTimeout>) {
  const first = this._epoch === null;
  /** @type {Record<string, any>} */
  const attach: Record<string, any> = { type: "attach", session_id: this.sessionId, limit: this.historyLimit };
  if (!first) {
    if (this.view.newestSerial !== null) attach.from_serial = this.view.newestSerial;
    attach.epoch = this._epoch;
  }
  const connects = this._connects;
  if (this._attachReq !== null) this._pending.delete(this._attachReq);
  this._attachReq = this._request(attach, {
    immediate: true,
    // Called synchronously from the socket's message handler: no deliver frame can fold between.
    resolve: (reply) => {
      if (this._ws !== ws || this._connects !== connects) return;
      if (reply.type !== "attached") {
        ws.close(4002, "expected attached");
        return;
      }
      clearTimeout(timer);
      if (first) {
        this._newsAfter = reply.head;
        this.view._attached(reply.entries, reply.head, reply.has_older);
      } else if (reply.reset) {
        console.warn(`runwire: session ${this.sessionId}: the relay lost history; rebuilding`);
        this._newsAfter = reply.head;
        this._resets += 1;
        this.view._reset(reply.entries, reply.head, reply.has_older);
        this._afterReset();
      } else this.view._resumed(reply.entries, reply.head);
      this._epoch = reply.epoch;
      this._up(ws, timer);
    },
    reject: (error) => {
      if (this._ws !== ws) return;
      console.warn(`runwire: attaching to ${this.sessionId} failed:`, error);
      if (!this._first.settled) this._fatalError(error);
      // A fresh token that no longer grants 'subscribe' here is as final as a refused
      // hello: the close below ends the session with it instead of reconnecting.
      else if (error instanceof RunwireError && error.code === UNAUTHORIZED) this._refusal = error;
      ws.close();
    },
  });
}

/**
 * The socket is ready (welcomed, and attached unless write-only): re-send what waits.
 * @param {WebSocket} ws @param {ReturnType<typeof setTimeout>} timer
 * @internal
 */
export function _up(this: Session, ws: WebSocket, timer: ReturnType<typeof setTimeout>) {
  if (this._ws !== ws) return;
  clearTimeout(timer);
  this._attempt = 0;
  this._ready = true;
  this._first.resolve(this);
  this._emit("connected");
  for (const [req, p] of [...this._pending.entries()]) {
    if (p.sentOn === this._connects) continue;
    if (p.place !== 0 && p.again !== undefined && !this._lane.resend(p.place)) {
      // An earlier publish goes again first: this one asks for its turn again.
      this._pending.delete(req);
      p.again();
      continue;
    }
    this._send(p);
  }
}

/** @param {Record<string, any>} frame @internal */
export function _onFrame(this: Session, frame: Record<string, any>) {
  const req = frame.req;
  if (req !== undefined && req !== null) {
    const pending = typeof req === "number" ? this._pending.get(req) : undefined;
    if (pending !== undefined) {
      this._pending.delete(req);
      if (frame.type === "error") pending.reject(RunwireError.fromWire(frame.error));
      else pending.resolve(frame);
    }
    return;
  }
  try {
    if (frame.type === "deliver") {
      if (frame.session_id === this.sessionId && Array.isArray(frame.entries)) this.view._foldLive(frame.entries);
    } else if (frame.type === "error") {
      const e = isObject(frame.error) ? frame.error : {};
      console.warn(`runwire: relay reported on session ${frame.session_id}: ${e.code} ${e.message}`);
    }
  } catch (err) {
    console.error(`runwire: handling a ${frame.type} frame failed:`, err);
  }
}

/** @param {CloseEvent | null} ev @param {unknown} err @internal */
export function _lost(this: Session, ev: CloseEvent | null, err: unknown) {
  const wasReady = this._ready;
  this._ready = false;
  this._ws = null;
  // An attach belongs to its socket: the next connect attaches afresh.
  if (this._attachReq !== null) this._pending.delete(this._attachReq);
  this._attachReq = null;
  const refused = this._credentialsError(ev);
  if (this._closed) return;
  if (refused !== null) {
    const retry = refused.code === TOKEN_EXPIRED && this._tokenProvider !== null && ++this._expired <= 3;
    if (!retry) {
      this._fatalError(refused);
      return;
    }
  } else if (!this._first.settled) {
    const code = ev ? ev.code : 0;
    const reason = err ? String(err) : `closed with code ${code}`;
    this._fatalError(new RunwireError(CONNECTION_CLOSED, `cannot connect to ${this.url}: ${reason}`));
    return;
  }
  if (wasReady || this._attempt === 0) this._emit("disconnected");
  // A relay that restarts closes 1012: the first try goes at once (to another node behind a
  // load balancer); should it fail, the backoff goes on as usual.
  const restarting = ev !== null && ev !== undefined && ev.code === 1012 && this._attempt === 0;
  const delay = restarting ? 0 : backoff(this._backoffInitial, this._backoffMax, this._attempt);
  this._attempt = Math.min(this._attempt + 1, 16);
  this._retryTimer = setTimeout(() => {
    this._retryTimer = null;
    this._open();
  }, delay);
}

/**
 * The credentials error a close stands for (a refused hello's error frame, or close 4001 /
 * 4003); null for any other close. Takes the refused hello's error.
 * @param {CloseEvent | null} ev @returns {RunwireError | null}
 * @internal
 */
export function _credentialsError(this: Session, ev: CloseEvent | null): RunwireError | null {
  const refusal = this._refusal;
  this._refusal = null;
  if (refusal !== null) return refusal;
  const code = ev ? ev.code : 0;
  if (code !== 4001 && code !== 4003) return null;
  // The relay's reason reads "CODE: text": the code is not repeated in the message.
  const raw = (ev && ev.reason) || "";
  const prefix = `${CLOSE_CODES[code]}: `;
  const reason = raw.startsWith(prefix) ? raw.slice(prefix.length) : raw;
  return new RunwireError(CLOSE_CODES[code], reason || "the relay refused the credentials");
}

/** @param {RunwireError} error @internal */
export function _fatalError(this: Session, error: RunwireError) {
  this._fatal = error;
  this._shutdown(error);
}

/**
 * Send a request and hand its reply to `resolve` (an `error` reply to `reject`).
 * @param {Record<string, any>} frame
 * @param {{immediate?: boolean, resolve: (reply: Record<string, any>) => void, reject: (error: RunwireError) => void}} handlers
 * @returns {number | null} the request's `req` (null when the session is closed)
 * @internal
 */
export function _request(this: Session, frame: Record<string, any>, handlers: { immediate?: boolean; place?: number; again?: () => void; resolve: (reply: Record<string, any>) => void; reject: (error: RunwireError) => void; }): number | null {
  if (this._closed) {
    handlers.reject(this._fatal || new RunwireError(CONNECTION_CLOSED, "connection closed"));
    return null;
  }
  const req = ++this._nextReq;
  const data = { ...frame, req };
  const text = JSON.stringify(data);
  // Over max_frame_bytes the relay refuses the frame, over hard_frame_bytes it closes the
  // socket (1009), and a request re-sent on every reconnect would close each one: refuse it here.
  const size = utf8Length(text, this._maxFrameBytes);
  if (size > this._maxFrameBytes) {
    handlers.reject(
      new RunwireError(PAYLOAD_TOO_LARGE, `frame of ${size} bytes exceeds the limit of ${this._maxFrameBytes}`, {
        size,
        limit: this._maxFrameBytes,
      }),
    );
    return null;
  }
  /** @type {PendingRequest} */
  const pending: PendingRequest = { data, text, sentOn: -1, place: handlers.place ?? 0, resolve: handlers.resolve, reject: handlers.reject, again: handlers.again };
  this._pending.set(req, pending);
  if (this._ready || handlers.immediate) this._send(pending);
  return req;
}

/** @param {Record<string, any>} frame @returns {Promise<Record<string, any>>} @internal */
export function _call(this: Session, frame: Record<string, any>): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => this._request(frame, { resolve, reject }));
}

/** @param {PendingRequest} pending @internal */
export function _send(this: Session, pending: PendingRequest) {
  const ws = this._ws;
  if (ws === null || ws.readyState !== OPEN) return; // re-sent after the next connect
  pending.sentOn = this._connects;
  ws.send(pending.text);
}

/**
 * Publish one entry through the session's publish lane (lane.ts), which keeps publishes in the
 * order they were made. One the relay refuses RATE_LIMITED goes again (same entry id: the relay
 * de-duplicates) after its `details.retry_after` seconds, for up to `rateLimitWait` ms; one refused
 * STORE_UNAVAILABLE after a backoff, for up to `storeWait` ms. Then it rejects with that error.
 * @param {Entry} entry @returns {Promise<{serial: number, duplicate: boolean}>}
 * @internal
 */
export async function _publish(this: Session, entry: Entry): Promise<{ serial: number; duplicate: boolean }> {
  if (this._closed) throw this._fatal || new RunwireError(CONNECTION_CLOSED, "the session was closed");
  const lane = this._lane;
  const place = lane.reserve();
  let reply: Record<string, any> | null = null;
  try {
    while (reply === null) {
      await this._turn(place);
      try {
        const call = new Promise<Record<string, any> | null>((resolve, reject) => {
          const frame = { type: "publish", session_id: this.sessionId, entry };
          // `again`: after a reconnect it goes back in line behind an earlier publish (null).
          this._request(frame, { place, again: () => resolve(null), resolve, reject });
        });
        if (lane.sent(place)) this._wakeLane();
        reply = await call;
      } catch (err) {
        if (err instanceof RunwireError && err.code === NOT_ATTACHED && !this.subscribe) {
          throw new RunwireError(
            NOT_ATTACHED,
            `the relay refused a publish to ${JSON.stringify(this.sessionId)} without an attach: a session connected with subscribe: false needs a token that grants rights in that session but not 'subscribe' (a token that may read it must attach)`,
            { ...err.details, session_id: this.sessionId, subscribe: false },
          );
        }
        if (!(err instanceof RunwireError) || lane.refused(place, entry.id, err, Date.now()) === null) throw err;
        continue; // it keeps its place: nothing after it goes before it
      }
      if (reply !== null) lane.accepted(place);
    }
  } finally {
    if (lane.finish(place)) this._wakeLane();
  }
  if (reply.type !== "ack" || !Number.isInteger(reply.serial)) {
    throw new RunwireError(PROTOCOL_ERROR, `expected an ack with a serial, got ${reply.type}`);
  }
  return { serial: reply.serial, duplicate: Boolean(reply.duplicate) };
}

/** Wait until the lane lets the publish of `place` go; throw when it gives up. @param {number} place @internal */
export async function _turn(this: Session, place: number) {
  for (;;) {
    if (this._closed) throw this._fatal || new RunwireError(CONNECTION_CLOSED, "the session was closed");
    const turn = this._lane.turn(place, Date.now());
    if (turn.go) return;
    await new Promise((resolve) => {
      let timer: ReturnType<typeof setTimeout> | null = null;
      const wake = () => {
        if (timer !== null) clearTimeout(timer);
        this._laneWaiters.delete(wake);
        resolve(undefined);
      };
      this._laneWaiters.add(wake);
      if (turn.wakeAt !== null) timer = setTimeout(wake, Math.max(0, turn.wakeAt - Date.now()));
    });
  }
}

/** Wake the publishes waiting for their turn: the lane changed. @internal */
export function _wakeLane(this: Session) {
  for (const wake of [...this._laneWaiters]) wake();
}

/** The methods Session takes from this module (internal). */
export const connectionMethods = { _start, _shutdown, _emit, _open, _freshToken, _openSocket, _attach, _up, _onFrame, _lost, _credentialsError, _fatalError, _request, _call, _send, _publish, _turn, _wakeLane };

/** @internal */
export type ConnectionMethods = typeof connectionMethods;
