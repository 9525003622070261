// The error groups of the JavaScript client against tests/vectors/errors/groups.json, which
// tests/transport/test_error_vectors.py writes from the Python SDK's ERROR_GROUPS: both SDKs put
// each code in the same group, `instanceof` tells the group, and `.code` stays the code.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import * as runwire from "../../client_side/js/dist/runwire.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const VECTOR = JSON.parse(
  readFileSync(join(ROOT, "tests", "vectors", "errors", "groups.json"), "utf-8"),
);
const GROUPS = Object.keys(VECTOR.groups);

test("the JS table is the Python table", () => {
  const js = Object.fromEntries(
    Object.entries(runwire.ERROR_GROUPS).map(([name, codes]) => [name, [...codes].sort()]),
  );
  assert.deepEqual(js, VECTOR.groups);
});

test("new RunwireError(code) is an instance of the code's group and keeps its code", () => {
  for (const [name, codes] of Object.entries(VECTOR.groups)) {
    for (const code of codes) {
      const error = new runwire.RunwireError(code, "why", { n: 1 });
      assert.ok(error instanceof runwire[name], `${code} is a ${name}`);
      assert.ok(error instanceof runwire.RunwireError && error instanceof Error, code);
      for (const other of GROUPS.filter((g) => g !== name)) {
        assert.ok(!(error instanceof runwire[other]), `${code} is not a ${other}`);
      }
      assert.equal(error.code, code);
      assert.equal(error.name, name);
      assert.equal(error.message, `${code}: why`);
      assert.equal(error.text, "why");
      assert.deepEqual(error.details, { n: 1 });
      assert.equal(runwire.errorGroup(code), runwire[name]);
    }
  }
});

test("an error rebuilt from the wire is of its code's group", () => {
  const error = runwire.RunwireError.fromWire({ code: "TOKEN_EXPIRED", message: "old" });
  assert.ok(error instanceof runwire.CredentialsError);
  assert.deepEqual(error.toWire(), { code: "TOKEN_EXPIRED", message: "old", details: {} });
});

test("a code of no group gives a plain RunwireError", () => {
  for (const code of VECTOR.ungrouped) {
    const error = new runwire.RunwireError(code);
    assert.equal(error.name, "RunwireError");
    assert.equal(runwire.errorGroup(code), runwire.RunwireError);
    for (const name of GROUPS) assert.ok(!(error instanceof runwire[name]), `${code}: ${name}`);
  }
});

test("a group class built directly keeps its class", () => {
  const error = new runwire.RetryableError("RATE_LIMITED");
  assert.ok(error instanceof runwire.RetryableError && error instanceof runwire.RunwireError);
  assert.equal(error.code, "RATE_LIMITED");
});
