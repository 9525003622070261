// The shared entry vectors (tests/vectors/entries/fields.json, made from transport.codec.decode_entry
// by tests/transport/test_entry_vectors.py): decodeEntry takes a field set to null exactly where
// Python does, and refuses every value of a wrong type that Python refuses.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { decodeEntry } from "../../client_side/js/runwire.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { bases, nulls, refused } = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "entries", "fields.json"), "utf8"));

/** The base of `kind` with the field at `path` set to `value`. */
function withField(kind, path, value) {
  const entry = structuredClone(bases[kind]);
  let target = entry;
  for (const step of path.slice(0, -1)) target = target[step];
  target[path[path.length - 1]] = value;
  return entry;
}

const isValidationError = (e) => e.code === "VALIDATION_ERROR";

test("every base is taken", () => {
  assert.equal(Object.keys(bases).length, 10);
  for (const base of Object.values(bases)) decodeEntry(base);
});

test("a field set to null is taken exactly where Python takes it", () => {
  assert.ok(nulls.some((c) => c.valid) && nulls.some((c) => !c.valid));
  const wrong = [];
  for (const { kind, path, valid } of nulls) {
    let taken = true;
    try {
      decodeEntry(withField(kind, path, null));
    } catch (e) {
      if (!isValidationError(e)) throw e;
      taken = false;
    }
    if (taken !== valid) wrong.push(`${kind}: ${path.join(".")} = null ${taken ? "taken" : "refused"}`);
  }
  assert.deepEqual(wrong, []);
});

test("a value of a wrong type that Python refuses is refused", () => {
  assert.ok(refused.length > 100);
  const wrong = [];
  for (const { kind, path, value } of refused) {
    try {
      decodeEntry(withField(kind, path, value));
      wrong.push(`${kind}: ${path.join(".")} = ${JSON.stringify(value)} taken`);
    } catch (e) {
      if (!isValidationError(e)) throw e;
    }
  }
  assert.deepEqual(wrong, []);
});
