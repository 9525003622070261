"""Dependencies point one way: relay, client_side, agent_side -> transport; the core is sans-I/O.

Imports are read with ``ast``, relative ones resolved, at every level of a file: in functions
and under ``TYPE_CHECKING`` too.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.source_tree import ROOT, Module, imports, library_modules, top_names

SIDES = ("relay", "client_side", "agent_side")
IO_MODULES = {"asyncio", "anyio", "websockets", "socket", "time", "random", "threading"}


def modules_of(package: str) -> list[Module]:
    return [m for m in library_modules() if m.name.split(".")[0] == package]


def core_modules() -> list[Module]:
    """``transport`` without its I/O driver ``transport.asyncio``."""
    return [m for m in modules_of("transport") if not m.name.startswith("transport.asyncio")]


def loaded_with(start: Module) -> set[str]:
    """Every module that loading ``start`` loads, following imports that run at load time."""
    by_name = {m.name: m for m in library_modules()}
    seen: set[str] = set()
    todo = [start.name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        module = by_name.get(name)
        if module is None:
            continue
        for item in imports(module):
            if item.top_level:
                todo.extend(item.targets)
    return seen


@pytest.mark.parametrize("side", SIDES)
def test_sides_do_not_import_each_other(side: str) -> None:
    others = set(SIDES) - {side}
    for module in modules_of(side):
        bad = top_names(module) & others
        assert not bad, f"{module.rel} imports {bad}"


def test_transport_imports_no_side() -> None:
    for module in modules_of("transport"):
        bad = top_names(module) & set(SIDES)
        assert not bad, f"{module.rel} imports {bad}"


def test_transport_core_does_no_io() -> None:
    for module in core_modules():
        bad = top_names(module) & IO_MODULES
        assert not bad, f"{module.rel} imports {bad}"


def test_transport_core_does_not_load_the_driver() -> None:
    """Loading a core module loads neither ``transport.asyncio`` nor an I/O library."""
    for module in core_modules():
        loaded = loaded_with(module)
        bad = {name for name in loaded if name.split(".")[0] in IO_MODULES}
        bad |= {name for name in loaded if name.startswith("transport.asyncio")}
        assert not bad, f"loading {module.name} loads {sorted(bad)}"


def test_relative_imports_are_read() -> None:
    """The reader resolves ``from .x import y`` and ``from . import x`` to library modules."""
    init = next(m for m in library_modules() if m.name == "transport")
    targets = {t for item in imports(init) for t in item.targets}
    assert "transport.checks" in targets  # from . import checks
    assert "transport._answers" in targets  # from .answers import ...
    assert "transport.asyncio._abort" in targets  # under TYPE_CHECKING and in __getattr__
    top_level = {t for item in imports(init) if item.top_level for t in item.targets}
    assert "transport.asyncio._abort" not in top_level


def test_importing_transport_loads_no_io_library() -> None:
    code = (
        "import sys, transport, transport._codec, transport._tree, transport._runs;"
        "print(sorted(m for m in ('anyio', 'asyncio', 'websockets') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_transport_still_exports_the_abort_pair() -> None:
    import transport
    from transport.asyncio._abort import AbortController, AbortSignal

    assert transport.AbortController is AbortController
    assert transport.AbortSignal is AbortSignal
    with pytest.raises(AttributeError):
        _ = transport.NoSuchName


@pytest.mark.parametrize("package", ["transport", "relay", "client_side", "agent_side"])
def test_public_names_exist(package: str) -> None:
    module = __import__(package)
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"
    assert (ROOT / package / "py.typed").exists()
