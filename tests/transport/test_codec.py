"""``transport._codec``: what the decoders refuse, and with which code."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from transport import _codec as codec
from transport.errors import VALIDATION_ERROR, RunwireError

_WELCOME = {"type": "welcome", "client_id": "c", "connection_id": "k", "max_frame_bytes": 1000}


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "ack", "req": 1, "serial": True},
        {"type": "ack", "req": True, "serial": 1},
        {"type": "attached", "req": 1, "session_id": "s", "epoch": "e", "head": False}
        | {"entries": [], "has_older": False},
        _WELCOME | {"max_frame_bytes": True},
        _WELCOME | {"v": True},
        _WELCOME | {"max_frame_bytes": "1000"},
    ],
)
def test_a_relay_frame_with_a_bool_or_a_string_for_an_integer_is_refused(
    frame: dict[str, Any],
) -> None:
    with pytest.raises(RunwireError) as info:
        codec.decode_relay_frame(orjson.dumps(frame))
    assert info.value.code == VALIDATION_ERROR
    assert info.value.details["errors"][0]["type"] == "int_type"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"kind": "cancel", "id": "e", "run_id": "r", "serial": True}, "serial"),
        ({"kind": "cancel", "id": "e", "run_id": "r", "ts": False}, "ts"),
        ({"kind": "checkpoint", "id": "e", "run_id": "r", "step": True}, "step"),
        ({"kind": "checkpoint", "id": "e", "run_id": "r", "step": 0, "turn": True}, "turn"),
        (
            {"kind": "checkpoint", "id": "e", "run_id": "r", "step": 0, "iterations": True},
            "iterations",
        ),
        (
            {"kind": "interrupt", "id": "e", "run_id": "r", "status": "paused"}
            | {"interrupts": [{"id": "q", "expires_at": True}]},
            "expires_at",
        ),
    ],
)
def test_an_entry_with_a_bool_for_an_integer_is_refused(entry: dict[str, Any], field: str) -> None:
    with pytest.raises(RunwireError) as info:
        codec.decode_entry(entry)
    assert info.value.code == VALIDATION_ERROR
    assert info.value.details["errors"][0]["loc"][-1] == field


def test_integers_are_still_taken() -> None:
    entry = codec.decode_entry({"kind": "checkpoint", "id": "e", "run_id": "r", "step": 2, "ts": 5})
    assert entry.ts == 5
    ack = codec.decode_relay_frame(b'{"type": "ack", "req": 1, "serial": 7}')
    assert ack.type == "ack" and ack.serial == 7


@pytest.mark.parametrize("value", [1, 0, "true", "yes"])
def test_a_boolean_field_takes_json_true_or_false_only(value: object) -> None:
    base = {"kind": "run", "id": "e", "run_id": "r", "status": "active"}
    with pytest.raises(RunwireError) as info:
        codec.decode_entry(base | {"durable": value})
    assert info.value.code == VALIDATION_ERROR
    with pytest.raises(RunwireError):
        codec.decode_relay_frame(orjson.dumps({"type": "ack", "req": 1, "duplicate": value}))
    assert codec.decode_entry(base | {"durable": True}).durable is True  # type: ignore[union-attr]
