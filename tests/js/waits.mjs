// Waiting helpers shared by the JS client's tests (not a test file: node --test skips it).

/** Reconnect backoff for tests: a few milliseconds, not seconds. */
export const FAST = { backoffInitial: 5, backoffMax: 20 };

/** Resolve when `predicate()` holds; fail after `ms`. */
export async function until(predicate, ms = 2000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${predicate}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** `promise`, or a rejection after `ms`. */
export function withTimeout(promise, ms = 2000) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timed out")), ms))]);
}
