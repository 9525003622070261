"""The npm package ``@runwire/client`` (client_side/js): its version is the Python package's, the
committed bundle the relay serves is what its TypeScript sources build to, its generated types keep
the public API of the hand-written ones they replaced, and ``npm pack`` gives a package a fresh Node
project installs and runs against a real relay.

They need the package's build tools: ``npm ci`` in client_side/js (``.ci/run`` does it)."""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import anyio
import pytest

import relay

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "client_side" / "js"
NODE = shutil.which("node")
NPM = shutil.which("npm")


def need_tools() -> tuple[str, str]:
    assert NODE is not None and NPM is not None, "node and npm are needed (.ci/run installs them)"
    assert (PKG / "node_modules" / "typescript").is_dir(), (
        "the package's build tools are missing: run `npm ci` in client_side/js (.ci/run does it)"
    )
    return NODE, NPM


def test_package_json_is_a_real_package_at_the_python_version() -> None:
    meta = json.loads((PKG / "package.json").read_text(encoding="utf-8"))
    py = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["name"] == "@runwire/client"
    assert meta["version"] == py["project"]["version"]
    assert meta["type"] == "module"
    assert meta["exports"]["."]["types"] == meta["types"] == "./lib/index.d.ts"
    assert set(meta["files"]) >= {"lib", "dist"}
    assert meta["engines"]["node"].startswith(">=")
    # No runtime dependency: the client runs on the platform's WebSocket.
    assert "dependencies" not in meta
    # The build tools are pinned by the lockfile (npm ci installs exactly them).
    lock = json.loads((PKG / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["packages"][""]["version"] == meta["version"]
    for name in meta["devDependencies"]:
        assert f"node_modules/{name}" in lock["packages"], name


def test_the_committed_bundle_is_what_the_sources_build_to(tmp_path: Path) -> None:
    node, _ = need_tools()
    subprocess.run([node, str(PKG / "build.mjs"), "--out", str(tmp_path)], check=True, timeout=120)
    fresh = tmp_path / "dist" / "runwire.js"
    assert filecmp.cmp(fresh, PKG / "dist" / "runwire.js", shallow=False), (
        "client_side/js/dist/runwire.js is not what client_side/js/src builds to: "
        "run `npm run build` in client_side/js and commit dist/"
    )
    # Declarations are generated, not written by hand.
    assert (tmp_path / "lib" / "index.d.ts").is_file()
    assert not (PKG / "runwire.d.ts").exists()


def test_generated_types_keep_the_old_public_api(tmp_path: Path) -> None:
    node, _ = need_tools()
    subprocess.run([node, str(PKG / "build.mjs")], check=True, timeout=120)
    tsc = PKG / "node_modules" / "typescript" / "bin" / "tsc"
    done = subprocess.run(
        [node, str(tsc), "-p", str(ROOT / "tests" / "js" / "types")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.anyio
async def test_npm_pack_installs_into_a_fresh_project_and_runs(tmp_path: Path) -> None:
    node, npm = need_tools()
    with anyio.fail_after(120):
        packed = await anyio.run_process(
            [npm, "pack", "--json", "--pack-destination", str(tmp_path)], cwd=PKG
        )
    info = json.loads(packed.stdout)[0]
    files = {f["path"] for f in info["files"]}
    assert {"package.json", "lib/index.js", "lib/index.d.ts", "dist/runwire.js"} <= files
    assert not any(f.startswith("node_modules/") for f in files)
    app = tmp_path / "app"
    app.mkdir()
    # A CommonJS project: the package is ESM, imported by name.
    (app / "package.json").write_text('{"name": "app", "version": "1.0.0", "type": "commonjs"}')
    with anyio.fail_after(120):
        await anyio.run_process(
            [
                npm,
                "install",
                "--offline",
                "--no-audit",
                "--no-fund",
                str(tmp_path / info["filename"]),
            ],
            cwd=app,
        )
    for name in ("quickstart.mjs", "ag_ui.mjs"):
        shutil.copy(ROOT / "examples" / "node" / name, app / name)
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        url = f"ws://127.0.0.1:{server.port}"
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [
                    node,
                    "--no-warnings",
                    "--experimental-websocket",
                    "quickstart.mjs",
                    url,
                    "pack-1",
                ],
                cwd=app,
                check=False,
            )
            # The subpath exports resolve too: the session's history as AG-UI events.
            events = await anyio.run_process(
                [node, "--no-warnings", "--experimental-websocket", "ag_ui.mjs", url, "pack-1"],
                cwd=app,
                check=False,
            )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert "user: Plan a 3-day trip to Lisbon." in out
    result = json.loads(out.splitlines()[-1])
    assert result["runId"]
    assert events.returncode == 0, events.stderr.decode()[-3000:]
    got = [json.loads(line) for line in events.stdout.decode().splitlines()]
    assert got[0]["type"] == "TEXT_MESSAGE_START" and got[0]["role"] == "user"
    assert {"type": "TEXT_MESSAGE_CONTENT", "delta": "Plan a 3-day trip to Lisbon."}.items() <= got[
        1
    ].items()
    assert any(e.get("name") == "runwire.cancel" for e in got)


def test_the_package_tests_pass_with_the_real_ai_package() -> None:
    """client_side/js/test/: the AI SDK transport (``ai`` as installed by npm ci) and friends."""
    node, _ = need_tools()
    subprocess.run([node, str(PKG / "build.mjs")], check=True, timeout=120)
    done = subprocess.run(
        [node, "--test", "--test-reporter=tap", "test/"],
        cwd=PKG,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    assert "# fail 0" in done.stdout
    assert "# skipped 0" in done.stdout


def test_the_api_reference_is_what_typedoc_makes_of_the_sources(tmp_path: Path) -> None:
    """docs/reference/javascript/ is generated (TypeDoc, client_side/js/typedoc.json)."""
    node, _ = need_tools()
    typedoc = PKG / "node_modules" / "typedoc" / "bin" / "typedoc"
    subprocess.run(
        [node, str(typedoc), "--logLevel", "Warn", "--out", str(tmp_path)],
        cwd=PKG,
        check=True,
        timeout=300,
    )
    committed = ROOT / "docs" / "reference" / "javascript"
    fresh = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*.md")}
    kept = {p.relative_to(committed): p.read_bytes() for p in committed.rglob("*.md")}
    assert fresh.keys() == kept.keys() and fresh == kept, (
        "docs/reference/javascript/ is stale: run `npx typedoc` in client_side/js and commit it"
    )
    index = (committed / "index" / "index.md").read_text()
    for name in ("connect", "Session", "ClientRun", "RunwireError", "ReplyChunk"):
        assert name in index, name
