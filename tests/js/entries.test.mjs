// The shared entry vectors (tests/vectors/entries/*.json, made from transport.codec.decode_entry by
// tests/transport/test_entry_vectors.py): decodeEntry takes and refuses what Python does.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { decodeEntry } from "../../client_side/js/runwire.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const NULLS = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "entries", "nulls.json"), "utf8"));

test("the null vectors are there", () => {
  assert.ok(NULLS.length > 100);
  assert.ok(NULLS.some((v) => v.valid) && NULLS.some((v) => !v.valid));
});

for (const vector of NULLS) {
  test(`${vector.name}: ${vector.valid ? "taken" : "VALIDATION_ERROR"} as in Python`, () => {
    if (vector.valid) {
      decodeEntry(vector.entry);
    } else {
      assert.throws(() => decodeEntry(vector.entry), (e) => e.code === "VALIDATION_ERROR");
    }
  });
}
