"""Answers typed or spoken: read a person's text by a question's JSON Schema, without I/O.

``parse_answer(text, schema)`` returns ``ParsedAnswer(ok, value, problem)``:

* a boolean takes yes or no, in English or Russian: ``yes``, ``y``, ``sure``, ``да``, ``no``,
  ``нет``, ...;
* a number or an integer takes a number such as ``1 000`` or ``2,5``, inside its ``minimum``
  and ``maximum``;
* an ``enum`` or a ``const`` takes one of its members, whatever the case;
* ``anyOf`` and ``oneOf`` take the first member the text fits;
* an object with one property, or one required property, takes the text as that field;
* an array takes JSON or a comma-separated list, each item read by ``items``;
* a string takes the text as it is;
* anything takes JSON that fits the schema.

Otherwise ``problem`` says what is wrong, in words to show the person.
``answer_format(schema)`` says what an answer looks like, such as ``a number from 1 to 5``, for
the prompt. ``answer_choices(schema)`` lists the members a person picks from: an ``enum``, also
as an object's one field. Local ``$ref`` links such as ``#/$defs/...`` are followed, as pydantic
writes them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

__all__ = ["ParsedAnswer", "answer_choices", "answer_format", "parse_answer"]

# Russian words are Cyrillic on purpose (ruff would take some letters for Latin look-alikes).
_YES = {
    "yes", "y", "yeah", "yep", "yup", "sure", "ok", "okay", "true", "1", "of course",
    "да", "ага", "угу", "конечно", "верно", "ок", "давай", "хорошо",  # noqa: RUF001
}  # fmt: skip
_NO = {
    "no", "n", "nope", "nah", "false", "0", "never",
    "нет", "не", "неа", "не надо", "никогда",
}  # fmt: skip


@dataclass(frozen=True)
class ParsedAnswer:
    """What ``parse_answer`` read: ``ok`` and ``value``, or a ``problem`` to show the person."""

    ok: bool
    value: Any = None
    problem: str | None = None


class _Refused(Exception):
    pass


def parse_answer(text: str, schema: dict[str, Any] | None) -> ParsedAnswer:
    """Read ``text`` by ``schema`` (see the module docstring)."""
    schema = schema or {}
    cleaned = text.strip()
    try:
        value = _read(cleaned, schema, schema)
    except _Refused as exc:
        as_json = _json(cleaned, schema)
        if as_json is not _NOTHING:
            return ParsedAnswer(True, as_json)
        return ParsedAnswer(False, problem=f"{exc} (expected {answer_format(schema)})")
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return ParsedAnswer(False, problem=f"{exc.message} (expected {answer_format(schema)})")
    return ParsedAnswer(True, value)


_NOTHING = object()


def _json(text: str, schema: dict[str, Any]) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return _NOTHING
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return _NOTHING
    return value


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in schema and seen < 20:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            break
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**node, **rest}
        seen += 1
    if "allOf" in schema and len(schema["allOf"]) == 1:
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        schema = {**_resolve(schema["allOf"][0], root), **rest}
    return schema


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [str(kind)] if kind is not None else []


def _read(text: str, schema: dict[str, Any], root: dict[str, Any]) -> Any:
    schema = _resolve(schema, root)
    if "const" in schema:
        return _member(text, [schema["const"]])
    if "enum" in schema:
        return _member(text, list(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            for member in schema[key]:
                try:
                    value = _read(text, member, root)
                    jsonschema.validate(value, _resolve(member, root) | {"$defs": _defs(root)})
                except (_Refused, jsonschema.ValidationError):
                    continue
                return value
            raise _Refused(f"{text!r} fits none of the choices")
    types = _types(schema)
    if not types:
        if "properties" in schema:
            types = ["object"]
        elif "items" in schema:
            types = ["array"]
        else:
            return text
    problems: list[str] = []
    for kind in types:
        try:
            return _read_type(text, kind, schema, root)
        except _Refused as exc:
            problems.append(str(exc))
    raise _Refused(problems[0])


def _defs(root: dict[str, Any]) -> dict[str, Any]:
    defs = root.get("$defs")
    return defs if isinstance(defs, dict) else {}


def _read_type(text: str, kind: str, schema: dict[str, Any], root: dict[str, Any]) -> Any:
    if kind == "boolean":
        said = re.sub(r"[\s.!?,]+$", "", text.lower()).strip()
        if said in _YES:
            return True
        if said in _NO:
            return False
        raise _Refused(f"{text!r} is neither yes nor no")
    if kind in ("number", "integer"):
        number = _number(text)
        if number is None:
            raise _Refused(f"{text!r} is not a number")
        if kind == "integer":
            if not float(number).is_integer():
                raise _Refused(f"{text!r} is not a whole number")
            number = int(number)
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and number < low:
            raise _Refused(f"{number} is below {low}")
        if high is not None and number > high:
            raise _Refused(f"{number} is above {high}")
        return number
    if kind == "string":
        if not text and schema.get("minLength", 0) > 0:
            raise _Refused("the answer is empty")
        return text
    if kind == "null":
        if text.lower() in ("", "null", "none", "nothing", "ничего"):
            return None
        raise _Refused(f"{text!r} is not empty")
    if kind == "array":
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                items = None
            if isinstance(items, list):
                return items
        parts = [p.strip() for p in re.split(r"[,;\n]", text) if p.strip()]
        item_schema = schema.get("items")
        if not isinstance(item_schema, dict):
            return parts
        return [_read(p, item_schema, root) for p in parts]
    if kind == "object":
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                return obj
        field = _single_field(schema)
        if field is None:
            raise _Refused("this answer needs several fields, as JSON")
        name, field_schema = field
        return {name: _read(text, field_schema, root)}
    raise _Refused(f"cannot read {text!r}")  # pragma: no cover


def _single_field(schema: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    props = schema.get("properties") or {}
    required = schema.get("required") or []
    if len(props) == 1:
        name = next(iter(props))
        return name, props[name]
    if len(required) == 1 and required[0] in props:
        return required[0], props[required[0]]
    return None


def _number(text: str) -> float | int | None:
    cleaned = text.replace("\u00a0", "").replace(" ", "").replace("_", "")
    if re.fullmatch(r"[-+]?\d+,\d+", cleaned):
        cleaned = cleaned.replace(",", ".")
    else:
        cleaned = cleaned.replace(",", "")
    try:
        value = int(cleaned)
    except ValueError:
        try:
            number = float(cleaned)
        except ValueError:
            return None
        if not math.isfinite(number):
            return None
        return number
    return value


def _member(text: str, members: list[Any]) -> Any:
    for member in members:
        if isinstance(member, str) and member == text:
            return member
    folded = text.casefold()
    for member in members:
        if isinstance(member, str) and member.casefold() == folded:
            return member
        if not isinstance(member, str) and json.dumps(member) == text:
            return member
    for member in members:
        if isinstance(member, bool):
            continue
        if isinstance(member, int | float) and _number(text) == member:
            return member
    raise _Refused(f"{text!r} is not one of {', '.join(str(m) for m in members)}")


def answer_format(schema: dict[str, Any] | None) -> str:
    """What an answer to ``schema`` looks like, in words for the prompt."""
    schema = schema or {}
    return _format(schema, schema)


def answer_choices(schema: dict[str, Any] | None) -> list[Any] | None:
    """The members an answer picks from, or None when the answer is not a choice.

    An ``enum`` gives its members; an object with one field gives that
    field's. ``parse_answer`` reads each member written as text.
    """
    root = schema or {}
    node = _resolve(root, root)
    if _types(node) == ["object"] or ("properties" in node and not _types(node)):
        field = _single_field(node)
        if field is None:
            return None
        node = _resolve(field[1], root)
    if "enum" in node:
        return list(node["enum"])
    return None


def _format(schema: dict[str, Any], root: dict[str, Any]) -> str:
    schema = _resolve(schema, root)
    if "const" in schema:
        return str(schema["const"])
    if "enum" in schema:
        return "one of: " + ", ".join(str(m) for m in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_format(m, root) for m in schema[key])
    types = _types(schema) or (["object"] if "properties" in schema else [])
    if not types:
        return "any text"
    return " or ".join(_format_type(kind, schema, root) for kind in types)


def _format_type(kind: str, schema: dict[str, Any], root: dict[str, Any]) -> str:
    if kind == "boolean":
        return "yes or no"
    if kind in ("number", "integer"):
        what = "a whole number" if kind == "integer" else "a number"
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            return f"{what} from {low} to {high}"
        if low is not None:
            return f"{what} of at least {low}"
        if high is not None:
            return f"{what} of at most {high}"
        return what
    if kind == "string":
        return "text"
    if kind == "null":
        return "nothing"
    if kind == "array":
        items = schema.get("items")
        inner = _format(items, root) if isinstance(items, dict) else "any text"
        return f"a comma-separated list of {inner}"
    if kind == "object":
        field = _single_field(schema)
        if field is not None:
            return _format(field[1], root)
        names = ", ".join(schema.get("properties") or {})
        return f"JSON with the fields {names}" if names else "JSON"
    return "any text"  # pragma: no cover
