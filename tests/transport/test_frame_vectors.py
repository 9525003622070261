"""Shared relay frame vectors: which values of a relay frame's fields
``transport._codec.decode_relay_frame`` takes, for ``client_side/js/runwire.js``'s
``checkRelayFrame`` to match (tests/js/frames.test.mjs).

tests/vectors/frames/booleans.json: ``bases``, a full frame of every relay frame type that has a
boolean field; ``cases``, each boolean field set to ``true``, ``false``, ``1``, ``0``, ``"true"``,
``"false"`` and ``null``, or left out (a case without ``value``), and whether Python takes the
frame (the JS client must agree both ways: a frame Python refuses is dropped, as the Python
client drops it).

tests/vectors/frames/types.json: the same for every field of every relay frame type. ``fields``
is the table ``field_table()`` computes from the pydantic models (each field's kind and whether
it is ``required``, has a ``default`` or is ``optional``: absent or null); ``bases``, a frame of
every type with every field set; ``cases``, every field set to each of ``PROBES`` (integers,
strings, lists, objects, error bodies, null) or left out, with whether Python takes the frame.
No case has a float with no fraction part (``5.0``) or an integer past 2**53: after
``JSON.parse`` JavaScript cannot tell ``5.0`` from ``5``, so it takes an integer field of
``5.0`` (or ``1e3``) that Python refuses. Unknown fields are left out too: the JS client ignores
them, as docs/protocol.md asks clients to. runwire.js's own ``RELAY_FRAME_FIELDS`` must equal
``fields`` (``test_the_js_table_is_the_models_table``).

Regenerate both with ``python -m tests.transport.test_frame_vectors`` after a relay frame changes.
"""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

from transport import _codec as codec
from transport import frames
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import RelayFrame

ROOT = Path(__file__).resolve().parents[2]
BOOLEANS = ROOT / "tests" / "vectors" / "frames" / "booleans.json"
TYPES = ROOT / "tests" / "vectors" / "frames" / "types.json"
RUNWIRE_JS = ROOT / "client_side" / "js" / "src" / "frames.ts"

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


def _cases(
    fields: dict[str, Any], bases: dict[str, dict[str, Any]], values: tuple[Any, ...]
) -> list[dict[str, Any]]:
    """Each field of each frame type (``fields``: type -> its fields) set to each of
    ``values`` in that type's base frame, or left out, with whether Python takes it."""
    cases = []
    for kind, names in fields.items():
        for field in names:
            for value in (*values, _ABSENT):
                frame = copy.deepcopy(bases[kind])
                case: dict[str, Any] = {"type": kind, "field": field}
                if value is _ABSENT:
                    del frame[field]
                else:
                    frame[field] = case["value"] = value
                case["valid"] = takes(frame)
                cases.append(case)
    return cases


def vectors() -> dict[str, Any]:
    return {"bases": BASES, "cases": _cases(boolean_fields(), BASES, VALUES)}


def _dump(data: dict[str, Any]) -> str:
    """One case a line (one field a line for ``fields``)."""
    head = ""
    if "fields" in data:
        head = (
            '\n "fields": {\n'
            + ",\n".join(
                f"  {json.dumps(kind)}: {{\n"
                + ",\n".join(f"   {json.dumps(n)}: {json.dumps(r)}" for n, r in fields.items())
                + "\n  }"
                for kind, fields in data["fields"].items()
            )
            + "\n },"
        )
    return (
        "{"
        + head
        + '\n "bases": '
        + json.dumps(data["bases"], indent=1, ensure_ascii=False).replace("\n", "\n ")
        + ',\n "cases": [\n'
        + ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in data["cases"])
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


# ------------------------------------------------------------ every field's type ---

FULL_BASES: dict[str, dict[str, Any]] = {
    "welcome": {
        "type": "welcome",
        "v": 1,
        "req": 1,
        "client_id": "c1",
        "user_id": "u1",
        "connection_id": "k1",
        "max_frame_bytes": 1048576,
        "multitask": "alongside",
        "agent_grace": 30.0,
    },
    "attached": BASES["attached"],
    "ack": BASES["ack"],
    "page": BASES["page"],
    "deliver": {"type": "deliver", "session_id": "s1", "entries": []},
    "dispatch": BASES["dispatch"],
    "error": {
        "type": "error",
        "req": 4,
        "session_id": "s1",
        "error": {"code": "NOT_FOUND", "message": "no such session", "details": {}},
    },
}

# What a relay frame field's type is, as runwire.js names it (RELAY_FRAME_FIELDS).
KINDS: tuple[tuple[Any, str], ...] = (
    (frames.Int, "int"),
    (frames.Serial, "serial"),
    (frames.ReqId, "req"),
    (str, "str"),
    (frames.Bool, "bool"),
    (dict[str, Any], "object"),
    (list[dict[str, Any]], "entries"),
    (frames.Multitask, "multitask"),
    (frames.Seconds, "seconds"),
    (frames.ErrorBody, "error"),
    (frames.RelayErrorBody, "error"),  # the error frame's (unknown fields ignored)
)

PROBES: tuple[Any, ...] = (
    True,
    False,
    0,
    1,
    -1,
    2**53 - 1,
    1.5,
    "",
    "5",
    "x",
    "alongside",
    "a" * 100,
    "a" * 101,
    "\U0001f600" * 100,
    "\U0001f600" * 101,
    [],
    [{}],
    [{"kind": "run"}, {}],
    [1],
    [{}, "x"],
    [None],
    [[]],
    {},
    {"k": 1},
    {"code": "X"},
    {"code": "X", "message": "m", "details": {"k": 1}},
    {"code": ""},
    {"code": 5},
    {"message": "m"},
    {"code": "X", "message": None},
    {"code": "X", "message": 5},
    {"code": "X", "details": None},
    {"code": "X", "details": []},
    None,
)
"""The values every field is set to (with ``_ABSENT``, left out): one of each JSON type, edge
integers and string lengths (``req`` strings take at most 100 code points), lists of objects or
not, and error bodies good and bad."""


def _kind(annotation: Any) -> tuple[str, bool]:
    """A field annotation's kind (``KINDS``) and whether it takes null."""
    nullable = False
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = get_args(annotation)
        rest = tuple(a for a in args if a is not type(None))
        nullable = len(rest) < len(args)
        if nullable:
            annotation = rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007
    for known, kind in KINDS:
        if annotation == known:
            return kind, nullable
    raise AssertionError(f"no kind for {annotation!r}: teach KINDS and runwire.js checkRelayFrame")


def field_table() -> dict[str, dict[str, list[str]]]:
    """Every relay frame type's fields but ``type``: ``[kind, rule]``, the rule ``required``,
    ``default`` (absent: its default; null refused) or ``optional`` (absent or null: none)."""
    table: dict[str, dict[str, list[str]]] = {}
    for model in get_args(get_args(RelayFrame)[0]):
        hints = typing.get_type_hints(model, include_extras=True)
        fields: dict[str, list[str]] = {}
        for name, info in model.model_fields.items():
            if name == "type":
                continue
            kind, nullable = _kind(hints[name])
            if info.is_required():
                assert not nullable, f"{model.__name__}.{name}: required and nullable"
                rule = "required"
            else:
                assert nullable == (info.get_default(call_default_factory=True) is None), name
                rule = "optional" if nullable else "default"
            fields[name] = [kind, rule]
        table[model.model_fields["type"].default] = fields
    return table


def type_vectors() -> dict[str, Any]:
    table = field_table()
    return {"fields": table, "bases": FULL_BASES, "cases": _cases(table, FULL_BASES, PROBES)}


def js_table() -> Any:
    """The JS client's ``RELAY_FRAME_FIELDS`` (client_side/js/src/frames.ts), JSON to read."""
    found = re.search(
        r"^(?:export )?const RELAY_FRAME_FIELDS(?:: [^=\n]+)? = (\{.*?^\});$",
        RUNWIRE_JS.read_text(encoding="utf-8"),
        re.S | re.M,
    )
    assert found is not None, "runwire.js has no RELAY_FRAME_FIELDS table"
    return json.loads(found.group(1))


def test_every_relay_frame_type_has_a_full_base() -> None:
    table = field_table()
    assert set(FULL_BASES) == set(table) == codec.RELAY_FRAME_TYPES
    for kind, base in FULL_BASES.items():
        assert takes(base), kind
        assert set(base) == {"type", *table[kind]}, kind


def test_the_js_table_is_the_models_table() -> None:
    assert js_table() == field_table(), (
        "runwire.js's RELAY_FRAME_FIELDS differs from transport/frames.py: "
        "update it (and checkRelayFrame for a new kind), then regenerate the vectors"
    )


def test_a_field_takes_its_type_only() -> None:
    by_case = {
        (c["type"], c["field"], json.dumps(c["value"]) if "value" in c else None): c["valid"]
        for c in type_vectors()["cases"]
    }
    # An integer is a JSON integer: not a string, a boolean or a number with a fraction part.
    for value in ('"x"', '"5"', "true", "1.5", "null", "[]", "{}"):
        assert not by_case[("welcome", "max_frame_bytes", value)], value
    assert not by_case[("welcome", "max_frame_bytes", None)]
    assert by_case[("welcome", "v", None)] and not by_case[("welcome", "v", "null")]
    # A serial is not negative; a req is an integer or a string of at most 100 code points.
    assert not by_case[("attached", "head", "-1")] and by_case[("attached", "head", "0")]
    assert by_case[("ack", "serial", "null")] and not by_case[("ack", "serial", '"5"')]
    assert by_case[("ack", "req", '"5"')] and by_case[("ack", "req", "-1")]
    assert by_case[("ack", "req", json.dumps("\U0001f600" * 100))]
    assert not by_case[("ack", "req", json.dumps("a" * 101))]
    assert not by_case[("ack", "req", "true")] and not by_case[("ack", "req", None)]
    # entries: a list of objects (what is in each is decode_entry's business).
    assert by_case[("deliver", "entries", "[{}]")] and not by_case[("deliver", "entries", "[1]")]
    assert not by_case[("page", "entries", "{}")] and not by_case[("attached", "entries", None)]
    # strings, objects, an error body, a multitask strategy.
    assert not by_case[("attached", "epoch", "1")] and not by_case[("welcome", "client_id", None)]
    assert by_case[("welcome", "user_id", "null")] and not by_case[("welcome", "user_id", "1")]
    assert not by_case[("dispatch", "checkpoint", "[]")]
    assert by_case[("dispatch", "checkpoint", "{}")]
    assert by_case[("error", "error", '{"code": "X"}')]
    assert not by_case[("error", "error", '{"message": "m"}')]
    assert not by_case[("error", "error", '{"code": "X", "message": null}')]
    assert by_case[("welcome", "multitask", '"alongside"')]
    assert not by_case[("welcome", "multitask", '"x"')]


def test_the_type_vectors_are_what_python_does() -> None:
    assert TYPES.read_text(encoding="utf-8") == _dump(type_vectors()), (
        "tests/vectors/frames/types.json is stale: python -m tests.transport.test_frame_vectors"
    )


if __name__ == "__main__":
    BOOLEANS.parent.mkdir(exist_ok=True)
    BOOLEANS.write_text(_dump(vectors()), encoding="utf-8")
    TYPES.write_text(_dump(type_vectors()), encoding="utf-8")
