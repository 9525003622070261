"""``parse_answer``, ``answer_format``, ``answer_choices``: every rule, and round trips."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from transport import answer_format, parse_answer
from transport._answers import answer_choices

BOOL = {"type": "boolean"}
RATING = {"type": "integer", "minimum": 1, "maximum": 5}
REGION = {"enum": ["eu", "us"]}


class Color(StrEnum):
    RED = "Red"
    GREEN = "Green"


class Pick(BaseModel):
    region: Literal["eu", "us"]


class Paint(BaseModel):
    color: Color


class Both(BaseModel):
    region: str
    count: int


PICK = Pick.model_json_schema()
PAINT = Paint.model_json_schema()
BOTH = Both.model_json_schema()
UNION = {"anyOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "string"}]}
LIST = {"type": "array", "items": REGION}
NUMBER = {"type": "number"}

CASES: list[tuple[str, dict[str, Any], Any]] = [
    ("yes", BOOL, True),
    ("Yes!", BOOL, True),
    ("sure", BOOL, True),
    ("да", BOOL, True),
    ("Конечно", BOOL, True),
    ("no", BOOL, False),
    ("nope.", BOOL, False),
    ("нет", BOOL, False),
    ("3", RATING, 3),
    (" 5 ", RATING, 5),
    ("2,5", NUMBER, 2.5),
    ("1 000", NUMBER, 1000),
    ("-4.25", NUMBER, -4.25),
    ("EU", REGION, "eu"),
    ("us", REGION, "us"),
    ("eu", PICK, {"region": "eu"}),
    ("US", PICK, {"region": "us"}),
    ('{"region": "us"}', PICK, {"region": "us"}),
    ("green", PAINT, {"color": "Green"}),
    ("42", UNION, 42),
    ("yes", UNION, True),
    ("hello", UNION, "hello"),
    ("eu, US", LIST, ["eu", "us"]),
    ('["us"]', LIST, ["us"]),
    ('{"region": "eu", "count": 2}', BOTH, {"region": "eu", "count": 2}),
    ("anything at all", {}, "anything at all"),
    ("free text", {"type": "string"}, "free text"),
]


@pytest.mark.parametrize(("text", "schema", "value"), CASES)
def test_parse_answer_reads_every_rule(text: str, schema: dict[str, Any], value: Any) -> None:
    parsed = parse_answer(text, schema)
    assert parsed.ok, parsed.problem
    assert parsed.value == value


PROBLEMS: list[tuple[str, dict[str, Any], str]] = [
    ("maybe", BOOL, "neither yes nor no (expected yes or no)"),
    ("7", RATING, "7 is above 5 (expected a whole number from 1 to 5)"),
    ("0", RATING, "0 is below 1"),
    ("2.5", {"type": "integer"}, "not a whole number"),
    ("lots", NUMBER, "'lots' is not a number (expected a number)"),
    ("mars", REGION, "'mars' is not one of eu, us (expected one of: eu, us)"),
    ("mars", PICK, "expected one of: eu, us"),
    ("eu, mars", LIST, "expected a comma-separated list of one of: eu, us"),
    ("eu", BOTH, "needs several fields, as JSON (expected JSON with the fields region, count)"),
]


@pytest.mark.parametrize(("text", "schema", "problem"), PROBLEMS)
def test_parse_answer_says_what_is_wrong(text: str, schema: dict[str, Any], problem: str) -> None:
    parsed = parse_answer(text, schema)
    assert not parsed.ok and parsed.value is None
    assert parsed.problem is not None and problem in parsed.problem


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        (BOOL, "yes or no"),
        (RATING, "a whole number from 1 to 5"),
        ({"type": "number", "minimum": 0}, "a number of at least 0"),
        (REGION, "one of: eu, us"),
        (PICK, "one of: eu, us"),
        (PAINT, "one of: Red, Green"),
        (LIST, "a comma-separated list of one of: eu, us"),
        (UNION, "a whole number or yes or no or text"),
        (BOTH, "JSON with the fields region, count"),
        ({}, "any text"),
    ],
)
def test_answer_format(schema: dict[str, Any], text: str) -> None:
    assert answer_format(schema) == text


# ---------------------------------------------------- round trips (hypothesis) ---

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


@st.composite
def schema_and_text(draw: st.DrawFn) -> tuple[dict[str, Any], str, Any]:
    """A schema, an answer written the way ``answer_format`` describes, and its value."""
    kind = draw(st.sampled_from(["bool", "int", "enum", "list", "object"]))
    if kind == "bool":
        value = draw(st.booleans())
        said = draw(st.sampled_from(["yes", "Yes", "да"] if value else ["no", "NO", "нет"]))
        return BOOL, said, value
    if kind == "int":
        low = draw(st.integers(-1000, 1000))
        high = draw(st.integers(low, low + 1000))
        value = draw(st.integers(low, high))
        schema = {"type": "integer", "minimum": low, "maximum": high}
        assert answer_format(schema) == f"a whole number from {low} to {high}"
        return schema, str(value), value
    members = draw(st.lists(words, min_size=1, max_size=5, unique_by=str.casefold))
    enum = {"enum": members}
    assert answer_format(enum) == "one of: " + ", ".join(members)
    if kind == "enum":
        member = draw(st.sampled_from(members))
        return enum, draw(st.sampled_from([member, member.upper()])), member
    if kind == "list":
        picked = draw(st.lists(st.sampled_from(members), min_size=1, max_size=4))
        return {"type": "array", "items": enum}, ", ".join(picked), picked
    member = draw(st.sampled_from(members))
    schema = {"type": "object", "properties": {"field": enum}, "required": ["field"]}
    return schema, member.capitalize(), {"field": member}


@given(schema_and_text())
def test_an_answer_written_as_the_format_says_reads_back(case: tuple[Any, str, Any]) -> None:
    schema, text, value = case
    parsed = parse_answer(text, schema)
    assert parsed.ok, parsed.problem
    assert parsed.value == value


@pytest.mark.parametrize(
    ("schema", "choices"),
    [
        (REGION, ["eu", "us"]),
        (PICK, ["eu", "us"]),
        (PAINT, ["Red", "Green"]),  # the enum behind a $ref, as pydantic writes it
        (BOOL, None),
        (RATING, None),
        (BOTH, None),
        (LIST, None),
        (None, None),
    ],
)
def test_answer_choices(schema: dict[str, Any] | None, choices: list[Any] | None) -> None:
    assert answer_choices(schema) == choices
    for member in choices or []:
        parsed = parse_answer(str(member), schema)
        assert parsed.ok, parsed.problem
