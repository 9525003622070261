"""Every Python block in the README and the docs runs, or at least compiles.

The README cannot include files, so each of its Python blocks is a copy of a
whole file in ``examples/``, which ``test_examples.py`` runs. A docs page
either includes an example with a snippet line (``--8<-- "examples/..."``) or
holds a fragment that must compile. A complete program (one that calls
``asyncio.run``) belongs in ``examples/``, where it is run.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(?:python|py)(?:[ \t][^\n]*)?\n(.*?)^```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')


def python_blocks(path: Path) -> list[str]:
    return FENCE.findall(path.read_text())


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def snippet_target(block: str) -> str | None:
    """The file a block includes, or None when the block is code of its own."""
    lines = [line.strip() for line in block.strip().splitlines()]
    for line in lines:
        if re.match(r"^-+\s*8\s*<", line):
            assert SNIPPET.match(line), f"a snippet line that pymdownx.snippets cannot read: {line}"
    found = [SNIPPET.match(line) for line in lines]
    if lines and all(found):
        assert len(lines) == 1, f"include one file per block: {lines}"
        match = found[0]
        assert match is not None
        return match.group(1)
    assert not any(found), f"a block either includes a file or holds code: {lines}"
    return None


def compile_fragment(code: str, where: str) -> None:
    """Compile a fragment as the body of an async function (it may ``await``)."""
    compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_every_readme_python_block_is_a_whole_example_file() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) >= 2
    examples = {p.read_text(): p for p in (ROOT / "examples").glob("*.py")}
    for block in blocks:
        assert block in examples, f"README block is not a copy of an examples/ file:\n{block}"


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_docs_python_block_is_included_or_compiles(page: Path) -> None:
    for i, block in enumerate(python_blocks(page)):
        where = f"{page.relative_to(ROOT)} block {i + 1}"
        target = snippet_target(block)
        if target is not None:
            file = ROOT / target.split(":")[0]
            assert file.is_file(), f"{where} includes a missing file {target}"
            assert file.parts[-2] == "examples" or "examples" in file.parts, where
            continue
        compile_fragment(block, where)
        assert "asyncio.run(" not in block and "anyio.run(" not in block, (
            f"{where} is a complete program: put it in examples/ and include it"
        )


def test_every_included_example_is_run_by_a_test() -> None:
    """An example the docs or README show is named by a test that runs it."""
    shown: set[str] = set()
    for page in doc_pages():
        for block in python_blocks(page):
            target = snippet_target(block)
            if target is not None:
                shown.add(Path(target.split(":")[0]).name)
    shown |= {"hello_agent.py", "hello_client.py"}  # the README's copies
    tests = " ".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for name in sorted(shown):
        assert f'"{name}"' in tests, f"no test runs examples/{name}"


def test_a_mangled_snippet_line_fails() -> None:
    with pytest.raises(AssertionError):
        snippet_target('--8 < --"examples/hello_agent.py"\n')


def test_a_fragment_that_does_not_compile_fails() -> None:
    with pytest.raises(SyntaxError):
        compile_fragment("async with x as y\n    pass\n", "bad")
    assert snippet_target('--8<-- "examples/hello_agent.py"\n') == "examples/hello_agent.py"


JS_FENCE = re.compile(r"^```(?:js|javascript)(?:[ \t][^\n]*)?\n(.*?)^```", re.S | re.M)


def included(target: str) -> str:
    """What a snippet line includes: a whole file, or the section ``path:name`` between its
    ``--8<-- [start:name]`` and ``--8<-- [end:name]`` lines."""
    path, _, section = target.partition(":")
    text = (ROOT / path).read_text()
    if not section:
        return text
    start, end = f"--8<-- [start:{section}]", f"--8<-- [end:{section}]"
    assert start in text and end in text, f"{path} has no section {section!r}"
    return text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0].rsplit("\n", 1)[0]


def js_blocks() -> list[tuple[str, str]]:
    """Each JavaScript block, or what it includes (a file or a section of one)."""
    found = []
    for page in [ROOT / "README.md", *doc_pages()]:
        for i, block in enumerate(JS_FENCE.findall(page.read_text())):
            target = snippet_target(block)
            found.append(
                (
                    f"{page.relative_to(ROOT)} block {i + 1}",
                    block if target is None else included(target),
                )
            )
    return found


@pytest.mark.parametrize(("where", "block"), js_blocks(), ids=[w for w, _ in js_blocks()])
def test_every_javascript_block_parses(where: str, block: str, tmp_path: Path) -> None:
    """Node checks each JavaScript block's syntax, as an ES module (it may ``await``)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: apt-get install -y nodejs (.ci/run does it)")
    module = tmp_path / "block.mjs"
    module.write_text(block)
    checked = subprocess.run([node, "--check", str(module)], capture_output=True, text=True)
    assert checked.returncode == 0, f"{where}:\n{checked.stderr}"


def test_every_json_block_is_json() -> None:
    fence = re.compile(r"^```json\n(.*?)^```", re.S | re.M)
    blocks = [
        (page, block)
        for page in [ROOT / "README.md", *doc_pages()]
        for block in fence.findall(page.read_text())
    ]
    assert blocks
    for page, block in blocks:
        try:
            json.loads(block)
        except ValueError as exc:
            raise AssertionError(f"{page.relative_to(ROOT)}: {exc}\n{block}") from None
