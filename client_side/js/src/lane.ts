// The publish lane: the order a session's publishes go in, and when a refused one goes again. A
// port of transport/lane.py; the vectors in tests/vectors/lane/ run against both.
//
// Each publish takes a place with reserve(). It may go once every place taken before it was sent
// and no earlier publish waits to go again: turn() says so, or until when to wait; resend() says
// whether one still waiting for its reply goes again at once after a reconnect. A publish the
// relay refuses RATE_LIMITED or STORE_UNAVAILABLE keeps its place while it goes again, so nothing
// made after it overtakes it: refused() says when it goes again, or that it gives up. The lane does
// no I/O and reads no clock: times are arguments, in units of `second` per second (1000 for the
// session's milliseconds, 1 for the vectors' seconds). See docs/explanation/publish-lane.md.

import { RATE_LIMITED, RunwireError, STORE_UNAVAILABLE } from "./errors.js";

/** Seconds a publish refused RATE_LIMITED keeps going again before it gives up. */
export const RATE_LIMIT_WAIT = 30;
/** Seconds before a refused publish goes again when the relay names no `retry_after`. */
export const RATE_LIMIT_BACKOFF_FIRST = 0.05;
/** The longest such wait. It doubles from RATE_LIMIT_BACKOFF_FIRST, with jitter. */
export const RATE_LIMIT_BACKOFF_MAX = 2;
/** Seconds a publish refused STORE_UNAVAILABLE keeps going again before it gives up. */
export const STORE_WAIT = 60;
/** Seconds at most before a publish refused STORE_UNAVAILABLE goes again, with jitter. */
export const STORE_RETRY_FIRST = 0.1;
/** The longest such wait. It doubles from STORE_RETRY_FIRST, with jitter. */
export const STORE_RETRY_MAX = 2;
/** Seconds at least a publish the relay holds behind an earlier one (STORE_UNAVAILABLE with that
 * one's id in `details.held`) keeps going again: the hold ends 2 s after that one stops coming. */
export const STORE_HELD_WAIT = 10;
/** The refusals after which a publish goes again. */
export const RETRIED: ReadonlySet<string> = new Set([RATE_LIMITED, STORE_UNAVAILABLE]);

/** The wait before try `attempt` (0 first) goes again: `first` doubling up to `most`, between half
 * of that and all of it as `jitter` goes from 0 to 1. */
export function backoff(first: number, most: number, attempt: number, jitter: number): number {
  const cap = Math.min(most, first * 2 ** Math.min(attempt, 16));
  return cap / 2 + jitter * (cap / 2);
}

/** Seconds before a publish refused with `error` goes again: the relay's `retry_after` for
 * RATE_LIMITED; when it names none, and for STORE_UNAVAILABLE, a backoff with jitter. */
export function retryDelay(error: RunwireError, attempt: number, jitter: number): number {
  if (error.code === STORE_UNAVAILABLE) return backoff(STORE_RETRY_FIRST, STORE_RETRY_MAX, attempt, jitter);
  const after = error.details ? error.details.retry_after : undefined;
  if (typeof after === "number" && Number.isFinite(after) && after >= 0 && after < 3600) return after;
  return backoff(RATE_LIMIT_BACKOFF_FIRST, RATE_LIMIT_BACKOFF_MAX, attempt, jitter);
}

/** What a publish does now: send it (`go`), or wait until `wakeAt` (null: until the lane changes). */
export interface Turn {
  go: boolean;
  wakeAt: number | null;
}

const GO: Turn = Object.freeze({ go: true, wakeAt: null });

/** What the lane remembers of one publish that was refused or waited. */
interface Place {
  refusal: RunwireError | null;
  since: number;
  deadline: number;
  attempt: number;
  retryAt: number;
  waited: boolean;
}

export interface LaneOptions {
  /** A number from 0 to 1 that spreads a backoff (Math.random in the session). */
  jitter: () => number;
  /** In clock units; default RATE_LIMIT_WAIT seconds. */
  rateLimitWait?: number;
  /** In clock units; default STORE_WAIT seconds. */
  storeWait?: number;
  /** Clock units per second: 1000 for milliseconds. */
  second?: number;
}

/**
 * The order of one session's publishes, and their refusals, without I/O. A driver takes a place per
 * publish, asks turn() before each send, says sent() once the frame is queued on the socket, and
 * passes the reply to refused() or accepted(); finish() ends the publish. Methods that return a
 * boolean return true when publishes waiting for their turn may go now: the driver wakes them.
 * @internal
 */
export class PublishLane {
  rateLimitWait: number;
  storeWait: number;
  private readonly jitter: () => number;
  private readonly second: number;
  private newest = 0;
  private readonly unsent: number[] = [];
  private readonly held: number[] = [];
  private readonly places = new Map<number, Place>();
  private storeGaveUp = false;
  private gaveUp: { last: number; error: RunwireError } = {
    last: 0,
    error: new RunwireError(STORE_UNAVAILABLE, "the relay's store is unavailable"),
  };

  constructor(options: LaneOptions) {
    this.jitter = options.jitter;
    this.second = options.second ?? 1;
    this.rateLimitWait = options.rateLimitWait ?? RATE_LIMIT_WAIT * this.second;
    this.storeWait = options.storeWait ?? STORE_WAIT * this.second;
  }

  /** Take the next place in the lane. It must be sent, released or finished. */
  reserve(): number {
    this.newest += 1;
    this.unsent.push(this.newest);
    return this.newest;
  }

  /** Give back a place no publish will use. Releasing twice does nothing. */
  release(place: number): boolean {
    return this.sent(place);
  }

  /** The publish of `place` is queued on the socket: the next one may go. */
  sent(place: number): boolean {
    const at = this.unsent.indexOf(place);
    if (at < 0) return false;
    this.unsent.splice(at, 1);
    return true;
  }

  /**
   * The link dropped before the reply to the publish of `place` came: may it go again at once on
   * the new connection? It may when no publish before it waits to go again or to be sent.
   * Otherwise it goes back in line, as if it was never sent: the driver asks turn() again before it
   * sends it. The new connection has no relay hold behind the earlier publish, so sent at once it
   * could be stored before it.
   */
  resend(place: number): boolean {
    const held = this.held.length > 0 && this.held[0] < place;
    if (!held && !(this.unsent.length > 0 && this.unsent[0] < place)) return true;
    if (!this.unsent.includes(place)) {
      let at = this.unsent.length;
      while (at > 0 && this.unsent[at - 1] > place) at--;
      this.unsent.splice(at, 0, place);
    }
    return false;
  }

  /**
   * May the publish of `place` be sent at `now`? Throws its refusal when its deadline passed while
   * it waited, and the error of a publish that gave up on the store when this one was made before
   * that and waited behind it (it must not overtake it).
   */
  turn(place: number, now: number): Turn {
    let p = this.places.get(place);
    if (p !== undefined && now < p.retryAt) return { go: false, wakeAt: p.retryAt };
    const refusal = p === undefined ? null : p.refusal;
    const { last, error } = this.gaveUp;
    if (place <= last && (refusal !== null || (p !== undefined && p.waited))) {
      throw refusal !== null && refusal.code === error.code ? refusal : error;
    }
    const held = this.held.length > 0 && this.held[0] < place;
    if (!held && !(this.unsent.length > 0 && this.unsent[0] < place)) return GO;
    let wakeAt: number | null = null;
    if (p !== undefined && refusal !== null) {
      if (now >= p.deadline) throw refusal;
      wakeAt = p.deadline;
    }
    if (held) {
      if (p === undefined) this.places.set(place, (p = newPlace()));
      p.waited = true;
    }
    return { go: false, wakeAt };
  }

  /**
   * The relay refused the publish of `place` with `error` at `now`: when it goes again, or null
   * when it gives up (the driver throws `error`). Only RATE_LIMITED and STORE_UNAVAILABLE go again.
   */
  refused(place: number, entryId: string, error: RunwireError, now: number): number | null {
    if (!RETRIED.has(error.code)) return null;
    let p = this.places.get(place);
    if (p === undefined) this.places.set(place, (p = newPlace()));
    if (p.refusal === null || p.refusal.code !== error.code) {
      p.since = now;
      p.attempt = 0;
    }
    p.refusal = error;
    // Held behind an earlier publish of ours that the store refused: not the store's.
    const heldBy = error.details ? error.details.held : undefined;
    const behind = heldBy !== undefined && heldBy !== null && heldBy !== entryId;
    const store = error.code === STORE_UNAVAILABLE && !behind;
    if (store && this.storeGaveUp) return null; // the store stayed away a whole storeWait already
    const delay = retryDelay(error, p.attempt, this.jitter()) * this.second;
    p.attempt += 1;
    p.deadline =
      p.since +
      (error.code === RATE_LIMITED ? this.rateLimitWait : Math.max(this.storeWait, behind ? STORE_HELD_WAIT * this.second : 0));
    if (now + delay > p.deadline) {
      if (store) {
        this.storeGaveUp = true;
        this.gaveUp = { last: this.newest, error };
      }
      return null;
    }
    if (!this.held.includes(place)) {
      let at = this.held.length;
      while (at > 0 && this.held[at - 1] > place) at--;
      this.held.splice(at, 0, place);
    }
    p.retryAt = now + delay;
    return p.retryAt;
  }

  /** The relay took the publish of `place`: the store, if it was away, is back. */
  accepted(_place: number): void {
    this.storeGaveUp = false;
  }

  /** The publish of `place` is over: it was taken, or it raised. */
  finish(place: number): boolean {
    const woke = this.sent(place); // it raised before it was sent
    const p = this.places.get(place);
    this.places.delete(place);
    if (p !== undefined && p.refusal !== null) {
      const at = this.held.indexOf(place);
      if (at >= 0) this.held.splice(at, 1);
      return true;
    }
    return woke;
  }
}

function newPlace(): Place {
  return { refusal: null, since: 0, deadline: 0, attempt: 0, retryAt: 0, waited: false };
}
