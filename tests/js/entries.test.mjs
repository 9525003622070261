// The shared entry vectors (tests/vectors/entries/fields.json, made from transport.codec.decode_entry
// by tests/transport/test_entry_vectors.py): decodeEntry takes a field set to null exactly where
// Python does, refuses every value of a wrong type that Python refuses, and counts a length limit
// in code points as Python does (an emoji is one, though it is two UTF-16 code units).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { decodeEntry } from "../../client_side/js/dist/runwire.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { bases, nulls, refused, astral, lengths } = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "entries", "fields.json"), "utf8"));

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

test("a string of astral characters is taken exactly where Python takes it: limits count code points", () => {
  assert.equal(astral.length, 2); // one code point, two UTF-16 code units
  assert.ok(lengths.some((c) => c.valid && c.repeat === 200) && lengths.some((c) => !c.valid && c.repeat === 201));
  const wrong = [];
  for (const { kind, path, repeat, valid } of lengths) {
    let taken = true;
    try {
      decodeEntry(withField(kind, path, astral.repeat(repeat)));
    } catch (e) {
      if (!isValidationError(e)) throw e;
      taken = false;
    }
    if (taken !== valid) wrong.push(`${kind}: ${path.join(".")} = ${repeat} x ${astral} ${taken ? "taken" : "refused"}`);
  }
  assert.deepEqual(wrong, []);
});

test("a limit of N code points: N astral characters are taken, N + 1 refused, mixed with BMP ones too", () => {
  const cancel = (reason) => decodeEntry({ kind: "cancel", id: "e1", run_id: "r1", reason });
  assert.equal(cancel("\u{1F600}".repeat(1000)).reason.length, 2000);
  assert.throws(() => cancel("\u{1F600}".repeat(1001)), isValidationError);
  assert.equal(cancel("é".repeat(500) + "\u{1F600}".repeat(500)).reason.length, 1500);
  assert.throws(() => cancel("é".repeat(500) + "\u{1F600}".repeat(500) + "a"), isValidationError);
  const id = (s) => decodeEntry({ kind: "cancel", id: s, run_id: "r1" });
  assert.equal(id("\u{1F600}".repeat(200)).id.length, 400);
  assert.throws(() => id("\u{1F600}".repeat(200) + "a"), isValidationError);
});
