"""Unknown fields, by direction (docs/protocol.md, section 1, "Fields").

A frame the relay sends may carry fields this client does not know (a later relay added
them): ``decode_relay_frame`` ignores them and reads the fields it knows as strictly as ever.
A frame a peer sends the relay, and an entry, with a field the relay does not know is
refused ``VALIDATION_ERROR`` (``extra_forbidden``), as before.
"""

from __future__ import annotations

import copy
from typing import Any, get_args

import orjson
import pytest

from transport import _codec as codec
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import Ack, ClientFrame, Dispatch, Error, RelayFrame, Welcome

_STAMPED = {"kind": "cancel", "id": "c1", "run_id": "r1", "serial": 1, "ts": 5, "client_id": "c"}

# A full frame of every type the relay sends, every field set.
RELAY_FRAMES: dict[str, dict[str, Any]] = {
    "welcome": {
        "type": "welcome",
        "v": 1,
        "req": 1,
        "client_id": "c",
        "user_id": "u",
        "connection_id": "k",
        "max_frame_bytes": 1000,
        "multitask": "enqueue",
    },
    "attached": {
        "type": "attached",
        "req": 2,
        "session_id": "s",
        "epoch": "e",
        "head": 1,
        "entries": [_STAMPED],
        "has_older": False,
        "reset": True,
    },
    "ack": {"type": "ack", "req": 3, "serial": 7, "duplicate": True},
    "page": {"type": "page", "req": 4, "session_id": "s", "entries": [_STAMPED], "has_older": True},
    "deliver": {"type": "deliver", "session_id": "s", "entries": [_STAMPED]},
    "dispatch": {
        "type": "dispatch",
        "session_id": "s",
        "run_id": "r",
        "agent": "default",
        "message_id": "m",
        "adopted": True,
        "checkpoint": {"step": 1},
    },
    "error": {
        "type": "error",
        "req": 5,
        "session_id": "s",
        "error": {"code": "RUN_NOT_FOUND", "message": "no such Run", "details": {"run_id": "r"}},
    },
}

# For each type, a known field and a value of the wrong type for it.
WRONG_TYPES: dict[str, tuple[str, Any]] = {
    "welcome": ("max_frame_bytes", "1000"),
    "attached": ("has_older", 1),
    "ack": ("serial", True),
    "page": ("entries", {}),
    "deliver": ("session_id", 5),
    "dispatch": ("adopted", "yes"),
    "error": ("error", "RUN_NOT_FOUND"),
}

CLIENT_FRAMES: dict[str, dict[str, Any]] = {
    "hello": {"type": "hello", "v": 1, "client_id": "c", "role": "client", "req": 1},
    "attach": {"type": "attach", "req": 1, "session_id": "s", "from_serial": 0, "epoch": "e"},
    "detach": {"type": "detach", "req": 1, "session_id": "s"},
    "publish": {
        "type": "publish",
        "req": 1,
        "session_id": "s",
        "entry": {"kind": "cancel", "id": "c1", "run_id": "r1"},
    },
    "history": {"type": "history", "req": 1, "session_id": "s", "before": 5, "limit": 10},
    "worker": {"type": "worker", "req": 1, "agent": "default"},
}


def decode(frame: dict[str, Any]) -> RelayFrame:
    return codec.decode_relay_frame(orjson.dumps(frame))


def refused(frame: dict[str, Any], *, relay_side: bool = False) -> RunwireError:
    with pytest.raises(RunwireError) as info:
        if relay_side:
            codec.decode_client_frame(orjson.dumps(frame))
        else:
            decode(frame)
    assert info.value.code == VALIDATION_ERROR
    return info.value


def test_every_relay_frame_type_is_covered() -> None:
    assert set(RELAY_FRAMES) == set(WRONG_TYPES) == codec.RELAY_FRAME_TYPES
    assert set(CLIENT_FRAMES) == codec.CLIENT_FRAME_TYPES
    models = {m.model_fields["type"].default for m in get_args(get_args(RelayFrame)[0])}
    assert models == codec.RELAY_FRAME_TYPES
    clients = {m.model_fields["type"].default for m in get_args(get_args(ClientFrame)[0])}
    assert clients == codec.CLIENT_FRAME_TYPES


@pytest.mark.parametrize("kind", sorted(RELAY_FRAMES))
def test_a_relay_frame_with_an_unknown_field_decodes_as_without_it(kind: str) -> None:
    frame = RELAY_FRAMES[kind]
    plain = decode(frame)
    newer = decode(frame | {"future_field": 1, "another": {"nested": [1, 2]}})
    assert type(newer) is type(plain)
    assert newer.model_dump() == plain.model_dump()
    # The unknown fields are dropped, not kept: nothing re-encodes them.
    assert "future_field" not in newer.model_dump()
    assert newer.model_extra in (None, {})
    assert orjson.loads(codec.encode(newer)) == orjson.loads(codec.encode(plain))


@pytest.mark.parametrize("kind", sorted(RELAY_FRAMES))
def test_a_relay_frame_with_an_unknown_field_keeps_every_known_field(kind: str) -> None:
    frame = RELAY_FRAMES[kind]
    decoded = decode(frame | {"future_field": 1})
    assert orjson.loads(codec.encode(decoded)) == frame


@pytest.mark.parametrize("kind", sorted(RELAY_FRAMES))
def test_a_wrong_type_in_a_known_field_is_still_refused(kind: str) -> None:
    field, value = WRONG_TYPES[kind]
    frame = RELAY_FRAMES[kind] | {field: value}
    for candidate in (frame, frame | {"future_field": 1}):
        error = refused(candidate)
        locs = [e["loc"] for e in error.details["errors"]]
        assert locs[0][:2] == [kind, field]
        assert not any("future_field" in loc for loc in locs)


@pytest.mark.parametrize("kind", sorted(RELAY_FRAMES))
def test_a_missing_required_field_is_still_refused(kind: str) -> None:
    required = [n for n, f in _model(kind).model_fields.items() if f.is_required()]
    assert required, kind
    for name in required:
        frame = {k: v for k, v in RELAY_FRAMES[kind].items() if k != name}
        error = refused(frame | {"future_field": 1})
        assert error.details["errors"][0]["type"] == "missing"
        assert error.details["errors"][0]["loc"] == [kind, name]


def _model(kind: str) -> Any:
    for model in get_args(get_args(RelayFrame)[0]):
        if model.model_fields["type"].default == kind:
            return model
    raise AssertionError(kind)  # pragma: no cover


def test_an_unknown_field_of_an_error_frames_error_object_is_ignored() -> None:
    frame = copy.deepcopy(RELAY_FRAMES["error"])
    frame["error"]["future_field"] = 1
    decoded = decode(frame)
    assert isinstance(decoded, Error)
    assert decoded.error.model_dump() == RELAY_FRAMES["error"]["error"]
    wire = RunwireError.from_wire(decoded.error.model_dump())
    assert (wire.code, wire.details) == ("RUN_NOT_FOUND", {"run_id": "r"})
    # Its known fields are still checked.
    frame["error"]["code"] = 5
    assert refused(frame).details["errors"][0]["loc"] == ["error", "error", "code"]
    del frame["error"]["code"]
    assert refused(frame).details["errors"][0]["type"] == "missing"


def test_entries_carried_by_a_relay_frame_are_checked_as_entries_still() -> None:
    """A relay frame's ``entries`` are entries, not fields of the frame: ``decode_entry``
    refuses one with a field it does not know, as the relay refuses it on publish."""
    entry = _STAMPED | {"future_field": 1}
    frame = decode(RELAY_FRAMES["deliver"] | {"entries": [entry]})
    assert frame.entries == [entry]  # type: ignore[union-attr]
    with pytest.raises(RunwireError) as info:
        codec.decode_entry(entry)
    assert info.value.code == VALIDATION_ERROR
    assert info.value.details["errors"][0]["type"] == "extra_forbidden"


def test_the_relays_own_frames_carry_no_unknown_field() -> None:
    """A relay frame built from data with a field the model does not know drops it: the
    relay never forwards one (and mypy refuses it as a keyword argument)."""
    ack = Ack.model_validate({"type": "ack", "req": 1, "serial": 2, "future_field": 1})
    assert orjson.loads(codec.encode(ack)) == {
        "type": "ack",
        "req": 1,
        "serial": 2,
        "duplicate": False,
    }
    dispatch = Dispatch.model_validate(RELAY_FRAMES["dispatch"] | {"future_field": 1})
    assert orjson.loads(codec.encode(dispatch)) == RELAY_FRAMES["dispatch"]
    welcome = Welcome.model_validate(RELAY_FRAMES["welcome"] | {"future_field": 1})
    assert "future_field" not in orjson.loads(codec.encode(welcome))


@pytest.mark.parametrize("kind", sorted(CLIENT_FRAMES))
def test_the_relay_still_refuses_a_client_frame_with_an_unknown_field(kind: str) -> None:
    frame = CLIENT_FRAMES[kind]
    assert codec.decode_client_frame(orjson.dumps(frame)).type == kind
    error = refused(frame | {"future_field": 1}, relay_side=True)
    assert error.details["errors"] == [
        {"loc": [kind, "future_field"], "msg": "Extra inputs are not permitted"}
        | {"type": "extra_forbidden"}
    ]
    assert error.message == f"{kind}.future_field: Extra inputs are not permitted"


def test_the_relay_still_refuses_an_entry_with_an_unknown_field_in_a_publish() -> None:
    frame = copy.deepcopy(CLIENT_FRAMES["publish"])
    frame["entry"]["future_field"] = 1
    error = refused(frame, relay_side=True)
    assert error.details["errors"][0]["type"] == "extra_forbidden"
    assert error.details["errors"][0]["loc"] == ["publish", "entry", "cancel", "future_field"]
