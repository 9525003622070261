"""tests/vectors/errors/groups.json is ``transport.errors.ERROR_GROUPS``, for the JavaScript client.

The JavaScript client checks its own table against the same file (tests/js/errors.test.mjs), so
both SDKs put each code in the same group. Run ``python -m tests.transport.test_error_vectors`` to
write the file again after a change to ``ERROR_GROUPS``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transport.errors import ERROR_GROUPS, RunwireError

ROOT = Path(__file__).resolve().parents[2]
VECTOR = ROOT / "tests" / "vectors" / "errors" / "groups.json"


def groups_vector() -> dict[str, Any]:
    """The table as JSON: each group's name with its codes, sorted."""
    return {
        "groups": {group.__name__: sorted(codes) for group, codes in ERROR_GROUPS.items()},
        "ungrouped": ["TOOL_ERROR", "SOMETHING_NEW"],
    }


def test_the_vector_is_the_python_table() -> None:
    assert VECTOR.exists(), f"run python -m tests.transport.test_error_vectors to write {VECTOR}"
    assert json.loads(VECTOR.read_text(encoding="utf-8")) == groups_vector(), (
        f"{VECTOR} is stale: run python -m tests.transport.test_error_vectors"
    )


def test_the_vector_says_what_python_builds() -> None:
    data = json.loads(VECTOR.read_text(encoding="utf-8"))
    classes = {group.__name__: group for group in ERROR_GROUPS}
    for name, codes in data["groups"].items():
        for code in codes:
            error = RunwireError(code, "m")
            assert type(error) is classes[name], code
            assert error.code == code
    for code in data["ungrouped"]:
        assert type(RunwireError(code)) is RunwireError


def write_vector() -> None:
    VECTOR.parent.mkdir(parents=True, exist_ok=True)
    VECTOR.write_text(json.dumps(groups_vector(), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_vector()
