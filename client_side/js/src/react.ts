// @runwire/client/react: React hooks over a runwire session, built on useSyncExternalStore.
//
//   const { session, state } = useSession("ws://127.0.0.1:8787", "trip-42");
//   const messages = useMessages(session);     // ViewMessage[], re-rendered as replies stream
//   const runs = useRuns(session);             // RunInfo[]
//   const { status, steer, cancel, outcome } = useRun(session, runId);

import { useCallback, useEffect, useMemo, useRef, useState, useSyncExternalStore } from "react";

import type { ClientRun, Delivery } from "./runs.js";
import type { Session } from "./session.js";
import type { ConnectOptions, ConnectionState, RunInfo, RunResult, RunStatus, ViewMessage } from "./types.js";
import { connect } from "./index.js";
import { isTerminal } from "./errors.js";

/** A change counter per session, bumped by every view event and connection state change. */
interface Store {
  subscribe: (listener: () => void) => () => void;
  version: () => number;
}

const stores = new WeakMap<Session, Store>();

function storeOf(session: Session): Store {
  const known = stores.get(session);
  if (known !== undefined) return known;
  let version = 0;
  const listeners = new Set<() => void>();
  let offs: (() => void)[] = [];
  const bump = () => {
    version += 1;
    for (const l of [...listeners]) l();
  };
  const store: Store = {
    subscribe(listener) {
      listeners.add(listener);
      if (listeners.size === 1) {
        const view = session.view;
        offs = session.subscribe ? [view.on("message", bump), view.on("run", bump), view.on("delivery", bump)] : [];
        offs.push(session.on("state", bump));
      }
      return () => {
        listeners.delete(listener);
        if (listeners.size === 0) {
          for (const off of offs) off();
          offs = [];
        }
      };
    },
    version: () => version,
  };
  stores.set(session, store);
  return store;
}

const noSubscribe = () => () => {};

/** `select(session)`, computed again only when the session changed since (a stable snapshot). */
function useSelect<T>(session: Session | null, key: string, select: (session: Session) => T, empty: T): T {
  const cache = useRef<{ session: Session | null; key: string; version: number; value: T } | null>(null);
  const store = session === null ? null : storeOf(session);
  const getSnapshot = () => {
    if (session === null || store === null) return empty;
    const version = store.version();
    const c = cache.current;
    if (c !== null && c.session === session && c.key === key && c.version === version) return c.value;
    const value = select(session);
    cache.current = { session, key, version, value };
    return value;
  };
  return useSyncExternalStore(store === null ? noSubscribe : store.subscribe, getSnapshot, getSnapshot);
}

/** What `useSession` gives. */
export interface SessionState {
  /** The session once connected (null before, and after an error). */
  session: Session | null;
  /** "connecting" until the first attach, then the session's own state. */
  state: ConnectionState | "connecting";
  /** Why connecting failed (a RunwireError), if it did. */
  error: Error | null;
}

/**
 * Connect to `sessionId` on the relay at `url` while the component is mounted (closed on unmount
 * or when `url` or `sessionId` change). `options` are read when connecting.
 */
export function useSession(url: string, sessionId: string, options: ConnectOptions = {}): SessionState {
  const [session, setSession] = useState<Session | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const optionsRef = useRef(options);
  optionsRef.current = options;
  useEffect(() => {
    let live = true;
    let made: Session | null = null;
    setSession(null);
    setError(null);
    connect(url, sessionId, optionsRef.current).then(
      (s) => {
        made = s;
        if (live) setSession(s);
        else void s.close();
      },
      (err: unknown) => {
        if (live) setError(err instanceof Error ? err : new Error(String(err)));
      },
    );
    return () => {
      live = false;
      if (made !== null) void made.close();
    };
  }, [url, sessionId]);
  const state = useSelect<ConnectionState | "connecting">(session, "state", (s) => (s.closed ? "closed" : s.connected ? "connected" : "disconnected"), "connecting");
  return { session, state: session === null ? "connecting" : state, error };
}

const NO_MESSAGES: ViewMessage[] = [];
const NO_RUNS: RunInfo[] = [];

/** The conversation the session shows (`session.view.getMessages()`), kept current. */
export function useMessages(session: Session | null): ViewMessage[] {
  return useSelect(session, "messages", (s) => s.view.getMessages(), NO_MESSAGES);
}

/** Every Run the session knows (`session.view.runs()`), kept current. */
export function useRuns(session: Session | null): RunInfo[] {
  return useSelect(session, "runs", (s) => s.view.runs(), NO_RUNS);
}

/** What `useRun` gives. */
export interface RunState {
  /** The Run's handle (null without a session or Run id). */
  run: ClientRun | null;
  /** Its snapshot (null while the view does not know it). */
  info: RunInfo | null;
  status: RunStatus | null;
  /** Steer it (RUN_NOT_ACTIVE when it ended). */
  steer: (text: string) => Delivery;
  /** Cancel it. */
  cancel: (reason?: string) => Promise<void>;
  /** How it ended, once it did (`run.result()`); null while it runs. */
  outcome: RunResult | null;
}

/** One Run of the session: its status, steer and cancel, and its outcome once it ended. */
export function useRun(session: Session | null, runId: string | null): RunState {
  const info = useSelect(session, `run\u0000${runId}`, (s) => (runId === null ? null : s.view.run(runId)), null);
  // One handle per Run: what it steers is what its outcome reports as undelivered.
  const run = useMemo(() => (session === null || runId === null ? null : session.run(runId)), [session, runId]);
  const [outcome, setOutcome] = useState<{ runId: string; result: RunResult } | null>(null);
  const ended = info !== null && isTerminal(info.status);
  useEffect(() => {
    if (!ended || run === null) return;
    let live = true;
    run.result().then(
      (result) => {
        if (live) setOutcome({ runId: run.runId, result });
      },
      () => {},
    );
    return () => {
      live = false;
    };
  }, [ended, run]);
  const steer = useCallback(
    (text: string) => {
      if (run === null) throw new Error("useRun: no Run to steer");
      return run.steer(text);
    },
    [run],
  );
  const cancel = useCallback(
    (reason?: string) => (session === null || runId === null ? Promise.resolve() : session.cancel(runId, reason === undefined ? {} : { reason })),
    [session, runId],
  );
  return {
    run,
    info,
    status: info?.status ?? null,
    steer,
    cancel,
    outcome: ended && outcome !== null && outcome.runId === runId ? outcome.result : null,
  };
}
