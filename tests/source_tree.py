"""Read the library's source with ``ast``: its modules, their imports and their docstrings.

The structure tests (tests/test_layering.py, tests/test_structure.py) share these helpers.
Nothing here imports the library: every fact comes from parsing its files.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("transport", "relay", "client_side", "agent_side", "runwire")


@dataclass(frozen=True)
class Module:
    """One library file: its dotted name, its path and whether it is a package's ``__init__``."""

    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def tree(self) -> ast.Module:
        return _parse(self.path)

    @property
    def lines(self) -> int:
        return len(self.path.read_text().splitlines())


@dataclass(frozen=True)
class Import:
    """One import statement, resolved to absolute module names.

    ``targets`` holds the modules the statement loads: for ``from a import b`` that is ``a.b``
    when ``a.b`` is a library module, else ``a``. ``top_level`` is false for an import inside a
    function or an ``if TYPE_CHECKING:`` block: it does not run when the module loads.
    """

    targets: tuple[str, ...]
    top_level: bool
    lineno: int


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@cache
def library_modules() -> tuple[Module, ...]:
    """Every ``.py`` file of the five packages, sorted by path."""
    found: list[Module] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.append(Module(".".join(parts), path))
    return tuple(found)


def module_names() -> frozenset[str]:
    return frozenset(module.name for module in library_modules())


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names, relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    if node.module:
        base.append(node.module)
    return ".".join(base)


def imports(module: Module) -> list[Import]:
    """Every import of ``module``, in the file's order, with relative imports resolved."""
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        if isinstance(node, ast.Import):
            names = tuple(alias.name for alias in node.names)
            found.append(Import(names, top_level, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            known = module_names()
            names = tuple(
                dict.fromkeys(
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                )
            )
            found.append(Import(names, top_level, node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for child in ast.iter_child_nodes(node):
                visit(child, False)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, top_level)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, top_level)

    visit(module.tree, True)
    return found


def top_names(module: Module) -> set[str]:
    """The top-level package of every module that ``module`` imports, at any level."""
    return {target.split(".")[0] for item in imports(module) for target in item.targets}


def library_edges(module: Module, *, loaded_only: bool) -> set[str]:
    """The library modules that ``module`` imports.

    With ``loaded_only`` only imports that run when the module loads count; otherwise imports in
    functions and under ``TYPE_CHECKING`` count too. A package's ``__init__`` that merely
    contains the imported module is not an edge.
    """
    names = module_names()
    edges: set[str] = set()
    for item in imports(module):
        if loaded_only and not item.top_level:
            continue
        for target in item.targets:
            if target in names and target != module.name:
                edges.add(target)
    return edges


def import_cycles() -> list[list[str]]:
    """The strongly connected groups of two or more library modules, each sorted, all sorted.

    Every import counts, including those in functions and under ``TYPE_CHECKING``: either one
    means the two modules cannot be read or changed apart.
    """
    graph = {m.name: library_edges(m, loaded_only=False) for m in library_modules()}
    # Tarjan's algorithm, iterative so that deep chains cannot overflow the stack.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def docstrings(module: Module) -> Iterator[tuple[str, str]]:
    """``(where, text)`` for the module's docstring and every class and function docstring."""
    text = ast.get_docstring(module.tree)
    if text:
        yield module.name, text
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node)
            if text:
                yield f"{module.name}:{node.lineno} {node.name}", text


_LITERAL = re.compile(r"``.*?``|`[^`]*`", re.S)
_BREAK = re.compile(r"\n\s*\n|\n\s*(?=[-*•] |\d+[.)] |:\w)|\n\s*[-=~]{3,}\s*(?:\n|$)")
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][)\"'*\]])|(?<=[.!?]\*\*))\s+(?=[\"'(`*A-Z0-9])"
)
_ABBREVIATION = re.compile(r"\b(e\.g|i\.e|etc|vs|cf)\.$")


def sentences(text: str) -> Iterator[str]:
    """The sentences of a docstring, one string each, whitespace collapsed.

    Paragraphs, list items, ``:field:`` lines and heading underlines end a sentence; so do
    ``.``, ``!`` and ``?`` before the next word.
    Literals in backquotes count as one word each, whatever they contain.
    """
    text = _LITERAL.sub("LITERAL", text)
    for block in _BREAK.split(text):
        pending = ""
        for piece in _SENTENCE_END.split(block):
            pending = f"{pending} {piece}".strip() if pending else piece.strip()
            if _ABBREVIATION.search(pending):
                continue
            if pending:
                yield " ".join(pending.split())
            pending = ""
        if pending:
            yield " ".join(pending.split())


_FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1", re.S | re.M)
_NOT_PROSE = ("|", "#", "--8<--", ":::", "<!--")


def markdown_prose(text: str) -> str:
    """A Markdown page without its code blocks, tables, headings and snippet lines."""
    text = _FENCE.sub("", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(_NOT_PROSE))


_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
_CODE_LINE = re.compile(r"^ {4,}\S.*$", re.M)


def nested_parentheses(text: str) -> int:
    """How many times the prose of ``text`` opens a parenthesis inside another.

    Literals in backquotes, Markdown link targets and lines indented four spaces or more, which
    are code examples, do not count.
    """
    text = _CODE_LINE.sub("", _LINK_TARGET.sub("]", _LITERAL.sub("LITERAL", text)))
    found = 0
    for paragraph in re.split(r"\n\s*\n", text):
        found += _nesting(paragraph)
    return found


def _nesting(text: str) -> int:
    depth = found = 0
    for char in text:
        if char == "(":
            depth += 1
            found += depth == 2
        elif char == ")":
            depth = max(0, depth - 1)
    return found


def words(sentence: str) -> int:
    return len(sentence.split())
