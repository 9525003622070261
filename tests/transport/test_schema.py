"""The JSON Schemas in docs/schema: in sync with the models, and true of real frames."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator
from websockets.asyncio.client import connect

import relay
from transport._codec import CLIENT_FRAME_TYPES, RELAY_FRAME_TYPES
from transport.schema import DIALECT, frame_schemas, main, schema_files

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "docs" / "schema"
VECTORS = sorted((ROOT / "tests" / "vectors" / "tree").glob("*.json"))


@cache
def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMA_DIR / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def errors(name: str, instance: Any) -> list[str]:
    return [e.message for e in validator(name).iter_errors(instance)]


def test_docs_schema_is_in_sync_with_the_models() -> None:
    expected = schema_files()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in SCHEMA_DIR.glob("*.json")}
    stale = sorted(set(on_disk) - set(expected))
    missing = sorted(set(expected) - set(on_disk))
    changed = sorted(n for n in set(expected) & set(on_disk) if expected[n] != on_disk[n])
    assert not (stale or missing or changed), (
        f"docs/schema is out of date (stale {stale}, missing {missing}, changed {changed}); "
        "run: python -m transport.schema"
    )


def test_every_frame_type_has_a_valid_schema() -> None:
    schemas = frame_schemas()
    for name in CLIENT_FRAME_TYPES | RELAY_FRAME_TYPES:
        assert name in schemas
        assert schemas[name]["properties"]["type"]["const"] == name
    for name, schema in schemas.items():
        assert schema["$schema"] == DIALECT, name
        Draft202012Validator.check_schema(schema)


def test_the_writer_writes_what_the_test_expects_and_removes_stale_files(tmp_path: Path) -> None:
    (tmp_path / "gone.json").write_text("{}")
    assert main([str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.glob("*.json")} == schema_files()


def test_discriminators_and_stamps_are_required() -> None:
    assert "type" in errors("hello", {"v": 1})[0]
    assert errors("hello", {"type": "hello"}) == []
    published = {
        "kind": "cancel",
        "id": "e1",
        "run_id": "r1",
    }
    assert (
        errors("publish", {"type": "publish", "req": 1, "session_id": "s", "entry": published})
        == []
    )
    assert errors("entry", published) == []
    # A delivered entry always has its serial, ts and client id.
    assert errors("stamped-entry", published)
    stamped = {**published, "serial": 3, "ts": 1700000000000, "client_id": "c1"}
    assert errors("stamped-entry", stamped) == []
    deliver = {"type": "deliver", "session_id": "s", "entries": [published]}
    assert errors("deliver", deliver)
    assert errors("deliver", {**deliver, "entries": [stamped]}) == []
    # Unknown fields are refused, as the relay refuses them.
    assert errors("entry", {**published, "extra": 1})


def test_relay_frames_are_open_and_the_rest_closed() -> None:
    """A relay frame (and an error frame's error object) may carry fields a client does not
    know; a frame a peer sends, and an entry, may not (docs/protocol.md, section 1)."""
    ack = {"type": "ack", "req": 1, "serial": 2, "future_field": 1}
    assert errors("ack", ack) == errors("relay-frame", ack) == []
    error = {"type": "error", "req": 1, "error": {"code": "X", "future_field": 1}}
    assert errors("error", error | {"future_field": 1}) == errors("relay-frame", error) == []
    stamped = {"kind": "cancel", "id": "c", "run_id": "r", "serial": 1, "ts": 5, "client_id": "c"}
    assert errors("deliver", {"type": "deliver", "session_id": "s", "entries": [stamped]}) == []
    deliver = {"type": "deliver", "session_id": "s", "entries": [stamped | {"future_field": 1}]}
    assert errors("deliver", deliver)
    run = stamped | {"kind": "run", "status": "error", "error": {"code": "X", "future_field": 1}}
    assert errors("stamped-entry", run)
    for frame in ({"type": "hello", "future_field": 1}, {"type": "worker", "req": 1, "x": 1}):
        assert errors(frame["type"], frame)
        assert errors("client-frame", frame)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_the_tree_vectors_hold_valid_stamped_entries(path: Path) -> None:
    for entry in json.loads(path.read_text())["entries"]:
        assert errors("stamped-entry", entry) == [], entry


def done(received: list[dict[str, Any]]) -> bool:
    kinds = [f["type"] for f in received]
    entries = sum(len(f["entries"]) for f in received if f["type"] == "deliver")
    return kinds.count("ack") == 2 and entries == 2 and "page" in kinds and "error" in kinds


@pytest.mark.anyio
async def test_real_frames_of_a_conversation_match_their_schemas() -> None:
    sent: list[dict[str, Any]] = [
        {"type": "hello", "v": 1, "client_id": "phone-1"},
        {"type": "attach", "req": 1, "session_id": "schema-test"},
        {
            "type": "publish",
            "req": 2,
            "session_id": "schema-test",
            "entry": {
                "kind": "message",
                "id": "m1",
                "run_id": "r1",
                "intent": "prompt",
                "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]},
            },
        },
        {
            "type": "publish",
            "req": 3,
            "session_id": "schema-test",
            "entry": {"kind": "cancel", "id": "c1", "run_id": "r1"},
        },
        {"type": "history", "req": 4, "session_id": "schema-test", "before": 2, "limit": 10},
        {
            "type": "publish",
            "req": 5,
            "session_id": "nope",
            "entry": {"kind": "cancel", "id": "c2", "run_id": "r1"},
        },
    ]
    for frame in sent:
        assert errors("client-frame", frame) == [], frame
        assert errors(frame["type"], frame) == [], frame
    received: list[dict[str, Any]] = []
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        async with connect(server.url) as ws:
            with anyio.fail_after(10):
                for frame in sent:
                    await ws.send(json.dumps(frame))
                while not done(received):
                    received.append(json.loads(await ws.recv()))
    kinds = {f["type"] for f in received}
    assert kinds == {"welcome", "attached", "ack", "deliver", "page", "error"}
    delivered = [e for f in received if f["type"] == "deliver" for e in f["entries"]]
    assert [e["kind"] for e in delivered] == ["message", "cancel"]
    assert delivered[0]["client_id"] == "phone-1"
    for frame in received:
        assert errors("relay-frame", frame) == [], frame
        assert errors(frame["type"], frame) == [], frame
