"""Shared entry vectors (tests/vectors/entries/*.json): what ``transport._codec.decode_entry``
takes and refuses, for ``client_side/js/runwire.js``'s ``decodeEntry`` to match
(tests/js/entries.test.mjs).

``fields.json``: a full entry of every kind (``bases``); ``nulls``: each field (at any
depth, down to the fields a model types) set to ``null``, and whether Python takes it
(``decodeEntry`` must agree both ways); ``refused``: each field set to a value of a wrong
type that Python refuses (``decodeEntry`` must refuse it too), among them booleans for
integers and ``1``, ``0``, ``"true"`` and ``"false"`` for booleans
(``test_bools_and_ints_do_not_mix``); ``lengths``: each string field set to ``astral`` (an
emoji, two UTF-16 code units but one code point) repeated ``repeat`` times, at and just past
every length limit, and whether Python takes it: limits count code points, as Python's ``len``
does, not UTF-16 code units (``test_length_limits_count_code_points``). Regenerate with
``python -m tests.transport.test_entry_vectors`` after a model changes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

from transport import _codec as codec
from transport.errors import RunwireError
from transport.frames import EntryBody, ErrorBody, Interrupt
from transport.messages import UIMessage

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ROOT / "tests" / "vectors" / "entries" / "fields.json"

_COMMON = {
    "serial": 3,
    "ts": 1700000000000,
    "user_id": "u1",
    "client_id": "c1",
    "id": "e1",
    "run_id": "r1",
}
_MESSAGE: dict[str, Any] = {
    "id": "m1",
    "role": "user",
    "parts": [
        {"type": "text", "text": "hi"},
        {"type": "reasoning", "text": "hm"},
        {"type": "tool-call", "tool_call_id": "t1", "tool_name": "f", "input": {"a": 1}},
        {
            "type": "tool-result",
            "tool_call_id": "t1",
            "tool_name": "f",
            "output": {"b": 2},
            "is_error": False,
        },
    ],
    "metadata": {"k": "v"},
}
_ERROR = {"code": "X", "message": "m", "details": {"a": 1}}
_QUESTION = {
    "id": "q1",
    "kind": "input",
    "reason": "why",
    "message": "what",
    "response_schema": {"type": "string"},
    "expires_at": 1800000000000,
    "tool_call_id": "t1",
    "tool_name": "f",
    "details": {"d": 1},
    "response": "yes",
}
BASES: dict[str, dict[str, Any]] = {
    "message": {
        **_COMMON,
        "kind": "message",
        "intent": "prompt",
        "message": _MESSAGE,
        "parent_id": "p1",
        "agent": "a",
        "multitask": "enqueue",
        "parent_run_id": "r0",
        "thread_access": "shared",
        "queued": True,
        "interrupts": ["r9"],
        "activate": False,
    },
    "run": {
        **_COMMON,
        "kind": "run",
        "status": "error",
        "error": _ERROR,
        "durable": True,
        "seen": ["m2"],
        "timeout": 2.5,
    },
    "cancel": {**_COMMON, "kind": "cancel", "reason": "stop", "interrupted_by": "m3"},
    "cancel_denied": {**_COMMON, "kind": "cancel_denied", "cancel_id": "e0", "reason": "no"},
    "response_open": {
        **_COMMON,
        "kind": "response_open",
        "message_id": "a1",
        "parent_id": "m1",
        "seen": ["m2"],
        "metadata": {"k": 1},
    },
    "response_append": {
        **_COMMON,
        "kind": "response_append",
        "message_id": "a1",
        "chunks": [{"type": "text-delta", "id": "t", "delta": "x"}],
    },
    "response_close": {
        **_COMMON,
        "kind": "response_close",
        "message_id": "a1",
        "message": {**_MESSAGE, "role": "assistant"},
        "metadata": {"k": 1},
    },
    "refused": {
        **_COMMON,
        "kind": "refused",
        "message_id": "m1",
        "intent": "steer",
        "error": _ERROR,
    },
    "checkpoint": {
        **_COMMON,
        "kind": "checkpoint",
        "step": 1,
        "turn": 2,
        "iterations": 3,
        "seen": ["m2"],
        "state": {"s": 1},
    },
    "interrupt": {
        **_COMMON,
        "kind": "interrupt",
        "status": "paused",
        "interrupts": [_QUESTION],
        "responses": {"q1": "yes"},
        "checkpoint": {"v": 1},
        "reason": "r",
    },
}
_OPAQUE = frozenset(
    {"input", "output", "details", "response_schema", "response", "metadata", "state"}
    | {"checkpoint", "responses", "chunks"}
)
"""Fields typed ``Any`` or ``dict[str, Any]``: a null inside them is anybody's business."""


def _paths(obj: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield (*prefix, key)
            if key not in _OPAQUE:
                yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


def _at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def _with(base: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    target: Any = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


def takes(entry: dict[str, Any]) -> bool:
    """Whether the Python decoder takes ``entry``."""
    try:
        codec.decode_entry(entry)
    except RunwireError:
        return False
    return True


WRONG = (5, 1, 0, 1.5, "s", "5", "true", "false", True, False, [], {})
"""Values of the wrong type for some field or other: ``true``/``false`` and ``"5"`` for an
integer, ``1``, ``0``, ``"true"`` and ``"false"`` for a boolean (pydantic's lax modes take
them, the models must not)."""

ASTRAL = "\U0001f600"
"""One code point outside the BMP: ``len`` 1 in Python, ``length`` 2 in JavaScript."""
REPEATS = (1, 200, 201, 1000, 1001, 10_000, 10_001)
"""At and just past every length limit of an entry (ids 200, reasons 1000 or 200, a
question's message 10 000)."""


def vectors() -> dict[str, Any]:
    """The bases; every field of each set to null, and whether Python takes that; every
    field set to each of ``WRONG`` where Python refuses that; and every string field set to
    ``ASTRAL`` repeated each of ``REPEATS`` times, and whether Python takes that."""
    nulls, refused, lengths = [], [], []
    for name, base in BASES.items():
        for path in _paths(base):
            valid = takes(_with(base, path, None))
            nulls.append({"kind": name, "path": list(path), "valid": valid})
            for value in WRONG:
                if not takes(_with(base, path, value)):
                    refused.append({"kind": name, "path": list(path), "value": value})
            if isinstance(_at(base, path), str):
                for n in REPEATS:
                    valid = takes(_with(base, path, ASTRAL * n))
                    lengths.append({"kind": name, "path": list(path), "repeat": n, "valid": valid})
    return {
        "bases": BASES,
        "nulls": nulls,
        "refused": refused,
        "astral": ASTRAL,
        "lengths": lengths,
    }


def _dump(data: dict[str, Any]) -> str:
    """One case a line (the file is long, but its diffs read well)."""

    def lines(cases: list[dict[str, Any]]) -> str:
        return ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in cases)

    return (
        '{\n "bases": '
        + json.dumps(data["bases"], indent=1, ensure_ascii=False).replace("\n", "\n ")
        + ',\n "nulls": [\n'
        + lines(data["nulls"])
        + '\n ],\n "refused": [\n'
        + lines(data["refused"])
        + '\n ],\n "astral": '
        + json.dumps(data["astral"], ensure_ascii=False)
        + ',\n "lengths": [\n'
        + lines(data["lengths"])
        + "\n ]\n}\n"
    )


def test_the_bases_are_taken_and_set_every_field_of_their_models() -> None:
    kinds = {m.model_fields["kind"].default: m for m in get_args(get_args(EntryBody)[0])}
    assert set(BASES) == set(kinds)
    for name, base in BASES.items():
        assert takes(base), name
        assert set(base) == set(kinds[name].model_fields), name
    assert set(_MESSAGE) == set(UIMessage.model_fields)
    assert set(_ERROR) == set(ErrorBody.model_fields)
    assert set(_QUESTION) == set(Interrupt.model_fields)


def test_bools_and_ints_do_not_mix() -> None:
    refused = {(c["kind"], tuple(c["path"]), json.dumps(c["value"])) for c in vectors()["refused"]}
    for kind, path in [
        ("message", ("serial",)),
        ("cancel", ("ts",)),
        ("checkpoint", ("step",)),
        ("checkpoint", ("turn",)),
        ("checkpoint", ("iterations",)),
        ("interrupt", ("interrupts", 0, "expires_at")),
    ]:
        for value in (True, False, "5"):
            assert (kind, path, json.dumps(value)) in refused, (kind, path, value)
    for kind, path in [
        ("message", ("queued",)),
        ("run", ("durable",)),
        ("message", ("message", "parts", 3, "is_error")),
        ("response_close", ("message", "parts", 3, "is_error")),
    ]:
        for value in (1, 0, "true", "false"):
            assert (kind, path, json.dumps(value)) in refused, (kind, path, value)
    # ``is_error`` defaults to false but is not ``bool | None``: null is refused.
    nulls = {(c["kind"], tuple(c["path"])): c["valid"] for c in vectors()["nulls"]}
    assert nulls[("message", ("message", "parts", 3, "is_error"))] is False
    assert nulls[("message", ("queued",))] is True
    assert nulls[("run", ("durable",))] is True


def test_length_limits_count_code_points() -> None:
    """A limit of N takes N astral characters (2N UTF-16 code units) and refuses N + 1."""
    lengths = {(c["kind"], tuple(c["path"]), c["repeat"]): c["valid"] for c in vectors()["lengths"]}
    for kind, path, limit in [
        ("message", ("id",), 200),
        ("message", ("message", "id"), 200),
        ("message", ("interrupts", 0), 200),
        ("run", ("seen", 0), 200),
        ("cancel", ("reason",), 1000),
        ("cancel_denied", ("reason",), 1000),
        ("interrupt", ("reason",), 1000),
        ("interrupt", ("interrupts", 0, "reason"), 200),
        ("interrupt", ("interrupts", 0, "message"), 10_000),
    ]:
        assert lengths[(kind, path, limit)] is True, (kind, path, limit)
        assert lengths[(kind, path, limit + 1)] is False, (kind, path, limit)
    # No limit on a text part.
    assert lengths[("message", ("message", "parts", 0, "text"), 10_001)] is True


def test_the_vectors_are_what_python_does() -> None:
    assert json.loads(FIELDS.read_text(encoding="utf-8")) == json.loads(_dump(vectors()))
    assert FIELDS.read_text(encoding="utf-8") == _dump(vectors()), (
        "tests/vectors/entries/fields.json is stale: python -m tests.transport.test_entry_vectors"
    )


if __name__ == "__main__":
    FIELDS.write_text(_dump(vectors()), encoding="utf-8")
