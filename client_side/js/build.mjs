// Build @runwire/client: tsc compiles src/ to lib/ (ES modules and their .d.ts), esbuild bundles
// src/index.ts into the one-file ES module the relay serves at /client.js (dist/runwire.js).
//
//   node build.mjs               # lib/ and dist/
//   node build.mjs --out DIR     # both under DIR instead (CI compares DIR with the committed files)
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const at = process.argv.indexOf("--out");
const out = at >= 0 ? resolve(process.argv[at + 1]) : here;
const lib = join(out, "lib");
const dist = join(out, "dist");

rmSync(lib, { recursive: true, force: true });
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");
execFileSync(process.execPath, [tsc, "-p", join(here, "tsconfig.json"), "--outDir", lib], { stdio: "inherit" });

const banner =
  "// runwire.js: the runwire client (@runwire/client) as one ES module, built from client_side/js/src\n" +
  "// by client_side/js/build.mjs (do not edit: change the TypeScript sources and build again).";
await esbuild.build({
  absWorkingDir: here,
  entryPoints: { runwire: join(here, "src", "index.ts") },
  outdir: dist,
  bundle: true,
  format: "esm",
  target: "es2022",
  platform: "neutral",
  banner: { js: banner },
  legalComments: "none",
  logLevel: "warning",
});
