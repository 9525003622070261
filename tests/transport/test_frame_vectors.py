"""Shared relay frame vectors (tests/vectors/frames/booleans.json): which values of a relay
frame's boolean fields ``transport.codec.decode_relay_frame`` takes, for
``client_side/js/runwire.js``'s ``checkRelayFrame`` to match (tests/js/frames.test.mjs).

``bases``: a full frame of every relay frame type that has a boolean field; ``cases``: each
boolean field set to ``true``, ``false``, ``1``, ``0``, ``"true"``, ``"false"`` and ``null``, or
left out (a case without ``value``), and whether Python takes the frame (the JS client must
agree both ways: a frame Python refuses is dropped, as the Python client drops it). Regenerate
with ``python -m tests.transport.test_frame_vectors`` after a relay frame changes.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

from transport import codec
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import RelayFrame

ROOT = Path(__file__).resolve().parents[2]
BOOLEANS = ROOT / "tests" / "vectors" / "frames" / "booleans.json"

BASES: dict[str, dict[str, Any]] = {
    "attached": {
        "type": "attached",
        "req": 1,
        "session_id": "s1",
        "epoch": "e1",
        "head": 0,
        "entries": [],
        "has_older": False,
        "reset": False,
    },
    "ack": {"type": "ack", "req": 2, "serial": 3, "duplicate": False},
    "page": {"type": "page", "req": 3, "session_id": "s1", "entries": [], "has_older": True},
    "dispatch": {
        "type": "dispatch",
        "session_id": "s1",
        "run_id": "r1",
        "agent": "default",
        "message_id": "m1",
        "adopted": True,
        "checkpoint": {"step": 1},
    },
}
VALUES: tuple[Any, ...] = (True, False, 1, 0, "true", "false", None)
_ABSENT = object()


def _is_bool(annotation: Any) -> bool:
    """Whether a field's annotation is ``bool``, ``Bool`` or either ``| None``."""
    if annotation is bool:
        return True
    if get_origin(annotation) is typing.Annotated:
        return _is_bool(get_args(annotation)[0])
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_bool(args[0])
    return False


def boolean_fields() -> dict[str, list[str]]:
    """The boolean fields of every relay frame type that has one."""
    out: dict[str, list[str]] = {}
    for model in get_args(get_args(RelayFrame)[0]):
        names = [n for n, f in model.model_fields.items() if _is_bool(f.annotation)]
        if names:
            out[model.model_fields["type"].default] = names
    return out


def takes(frame: dict[str, Any]) -> bool:
    """Whether the Python decoder takes ``frame`` (a frame it refuses, it refuses
    ``VALIDATION_ERROR``)."""
    try:
        codec.decode_relay_frame(json.dumps(frame))
    except RunwireError as exc:
        assert exc.code == VALIDATION_ERROR, exc
        return False
    return True


def vectors() -> dict[str, Any]:
    cases = []
    for kind, fields in boolean_fields().items():
        for field in fields:
            for value in (*VALUES, _ABSENT):
                frame = copy.deepcopy(BASES[kind])
                case: dict[str, Any] = {"type": kind, "field": field}
                if value is _ABSENT:
                    del frame[field]
                else:
                    frame[field] = case["value"] = value
                case["valid"] = takes(frame)
                cases.append(case)
    return {"bases": BASES, "cases": cases}


def _dump(data: dict[str, Any]) -> str:
    """One case a line."""
    return (
        '{\n "bases": '
        + json.dumps(data["bases"], indent=1).replace("\n", "\n ")
        + ',\n "cases": [\n'
        + ",\n".join("  " + json.dumps(case) for case in data["cases"])
        + "\n ]\n}\n"
    )


def test_the_bases_are_taken_and_cover_every_boolean_field() -> None:
    fields = boolean_fields()
    assert set(BASES) == set(fields)
    for kind, base in BASES.items():
        assert takes(base), kind
        assert set(fields[kind]) <= set(base), kind


def test_a_boolean_takes_true_or_false_only() -> None:
    by_case = {
        (c["type"], c["field"], json.dumps(c["value"]) if "value" in c else None): c["valid"]
        for c in vectors()["cases"]
    }
    for kind, field in [
        ("attached", "has_older"),
        ("attached", "reset"),
        ("ack", "duplicate"),
        ("page", "has_older"),
        ("dispatch", "adopted"),
    ]:
        assert by_case[(kind, field, "true")] and by_case[(kind, field, "false")]
        for value in (1, 0, "true", "false"):
            assert not by_case[(kind, field, json.dumps(value))], (kind, field, value)
    # null: only where the field is ``Bool | None``; absent: where it has a default.
    assert not by_case[("attached", "has_older", "null")]
    assert not by_case[("attached", "reset", "null")]
    assert not by_case[("ack", "duplicate", "null")]
    assert by_case[("dispatch", "adopted", "null")]
    assert not by_case[("attached", "has_older", None)]
    assert not by_case[("page", "has_older", None)]
    assert by_case[("attached", "reset", None)]
    assert by_case[("ack", "duplicate", None)]
    assert by_case[("dispatch", "adopted", None)]


def test_the_vectors_are_what_python_does() -> None:
    assert BOOLEANS.read_text(encoding="utf-8") == _dump(vectors()), (
        "tests/vectors/frames/booleans.json is stale: python -m tests.transport.test_frame_vectors"
    )


if __name__ == "__main__":
    BOOLEANS.parent.mkdir(exist_ok=True)
    BOOLEANS.write_text(_dump(vectors()), encoding="utf-8")
