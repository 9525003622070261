// The shared publish lane vectors (tests/vectors/lane/*.json, recorded from transport.lane by
// tests/transport/test_lane.py) against the JavaScript PublishLane: every call gives the answer
// the Python lane gave. The vectors count time in seconds, so the lane runs with `second: 1` and
// its jitter fixed, and its arithmetic is the Python lane's, to the last bit.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { PublishLane, RunwireError } from "../../client_side/js/dist/runwire.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const VECTOR_DIR = join(ROOT, "tests", "vectors", "lane");
const VECTORS = readdirSync(VECTOR_DIR)
  .filter((name) => name.endsWith(".json"))
  .sort();

/** What the lane answers to `step`, in the vectors' terms. */
function perform(lane, step) {
  switch (step.op) {
    case "reserve":
      return lane.reserve();
    case "release":
      return lane.release(step.place);
    case "sent":
      return lane.sent(step.place);
    case "resend":
      return lane.resend(step.place);
    case "turn":
      try {
        const turn = lane.turn(step.place, step.now);
        return turn.go ? { go: true } : { wait: turn.wakeAt };
      } catch (err) {
        if (!(err instanceof RunwireError)) throw err;
        return { raise: { code: err.code, message: err.text } };
      }
    case "refused": {
      const { code, message, details } = step.error;
      return lane.refused(step.place, step.entry_id, new RunwireError(code, message, details), step.now);
    }
    case "accepted":
      lane.accepted(step.place);
      return null;
    case "finish":
      return lane.finish(step.place);
    default:
      throw new Error(`unknown lane op ${step.op}`);
  }
}

test("there are lane vectors", () => {
  assert.ok(VECTORS.length >= 10, `only ${VECTORS.length} vectors in ${VECTOR_DIR}`);
});

for (const name of VECTORS) {
  test(`lane vector ${name}`, () => {
    const { config, steps } = JSON.parse(readFileSync(join(VECTOR_DIR, name), "utf8"));
    const lane = new PublishLane({
      jitter: () => config.jitter,
      rateLimitWait: config.rate_limit_wait,
      storeWait: config.store_wait,
      second: 1,
    });
    steps.forEach((step, i) => {
      assert.deepEqual(perform(lane, step), step.expect, `step ${i}: ${JSON.stringify(step)}`);
    });
  });
}
