"""Dependencies point one way: relay, client_side, agent_side -> transport; the core is sans-I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("relay", "client_side", "agent_side")
IO_MODULES = {"asyncio", "anyio", "websockets", "socket", "time", "random", "threading"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("side", SIDES)
def test_sides_do_not_import_each_other(side: str) -> None:
    others = set(SIDES) - {side}
    for path in (ROOT / side).rglob("*.py"):
        bad = imports(path) & others
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_transport_imports_no_side() -> None:
    for path in (ROOT / "transport").rglob("*.py"):
        bad = imports(path) & set(SIDES)
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_transport_core_does_no_io() -> None:
    for path in (ROOT / "transport").glob("*.py"):
        bad = imports(path) & IO_MODULES
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("package", ["transport", "relay", "client_side", "agent_side"])
def test_public_names_exist(package: str) -> None:
    module = __import__(package)
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"
    assert (ROOT / package / "py.typed").exists()
