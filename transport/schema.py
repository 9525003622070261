"""JSON Schemas of the wire protocol, generated from the pydantic models of ``transport.frames``.

``frame_schemas()`` returns one JSON Schema, draft 2020-12, per frame and per entry kind. It also
returns the unions a receiver dispatches on. They are what ``docs/schema/*.json`` holds:
``python -m transport.schema`` writes them there, and a test fails when the two differ. So a
client in another language can be built from the documents alone.

The schemas come from ``TypeAdapter.json_schema()``. Three facts of the wire that the models
leave implicit are made explicit:

* the discriminator is required: ``type`` of a frame or part, ``kind`` of an entry;
* an entry the relay delivers is *stamped*: ``serial``, ``ts`` and ``client_id`` are always
  there, and ``user_id`` when the connection has one; a publisher may leave them out of
  ``publish.entry``, since the relay overwrites them anyway;
* the ``entries`` of ``attached``, ``page`` and ``deliver`` are stamped entries.

Each schema's name is its file name without ``.json``:

* the frames a peer sends: ``hello``, ``attach``, ``detach``, ``publish``, ``history``,
  ``worker``;
* the frames the relay sends: ``welcome``, ``attached``, ``ack``, ``page``, ``deliver``,
  ``dispatch``, ``error``;
* the entry bodies a peer publishes: ``entry-message``, ``entry-run``, ``entry-cancel``,
  ``entry-cancel_denied``, ``entry-response_open``, ``entry-response_append``,
  ``entry-response_close``, ``entry-refused``, ``entry-checkpoint``;
* the unions ``client-frame``, ``relay-frame``, ``entry`` as published, and ``stamped-entry`` as
  delivered.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from .frames import (
    Ack,
    Attach,
    Attached,
    CancelDenied,
    CancelEntry,
    CheckpointEntry,
    ClientFrame,
    Deliver,
    Detach,
    Dispatch,
    EntryBody,
    Error,
    Hello,
    History,
    MessageEntry,
    Page,
    Publish,
    RefusedEntry,
    RelayFrame,
    ResponseAppend,
    ResponseClose,
    ResponseOpen,
    RunEntry,
    Welcome,
    Worker,
)

__all__ = ["DIALECT", "frame_schemas", "main", "schema_files"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"

_CLIENT_FRAMES: dict[str, type[BaseModel]] = {
    "hello": Hello,
    "attach": Attach,
    "detach": Detach,
    "publish": Publish,
    "history": History,
    "worker": Worker,
}
_RELAY_FRAMES: dict[str, type[BaseModel]] = {
    "welcome": Welcome,
    "attached": Attached,
    "ack": Ack,
    "page": Page,
    "deliver": Deliver,
    "dispatch": Dispatch,
    "error": Error,
}
_ENTRIES: dict[str, type[BaseModel]] = {
    "message": MessageEntry,
    "run": RunEntry,
    "cancel": CancelEntry,
    "cancel_denied": CancelDenied,
    "response_open": ResponseOpen,
    "response_append": ResponseAppend,
    "response_close": ResponseClose,
    "refused": RefusedEntry,
    "checkpoint": CheckpointEntry,
}
_ENTRY_DEFS = frozenset(model.__name__ for model in _ENTRIES.values())
_STAMPED: dict[str, dict[str, Any]] = {
    "serial": {"minimum": 0, "title": "Serial", "type": "integer"},
    "ts": {"title": "Ts", "type": "integer"},
    "client_id": {"title": "Client Id", "type": "string"},
}


def frame_schemas() -> dict[str, dict[str, Any]]:
    """Every frame's and entry's JSON Schema, by name (see the module docstring).

    Each call builds fresh dicts; the caller may change them.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, model in _CLIENT_FRAMES.items():
        out[name] = _finish(TypeAdapter(model).json_schema())
    for name, model in _RELAY_FRAMES.items():
        out[name] = _finish(_stamped_entries(TypeAdapter(model).json_schema()))
    for name, model in _ENTRIES.items():
        out[f"entry-{name}"] = _finish(TypeAdapter(model).json_schema())
    out["client-frame"] = _finish(
        TypeAdapter(ClientFrame).json_schema(), "ClientFrame", "Any frame a peer sends the relay."
    )
    out["relay-frame"] = _finish(
        _stamped_entries(TypeAdapter(RelayFrame).json_schema()),
        "RelayFrame",
        "Any frame the relay sends a peer.",
    )
    out["entry"] = _finish(
        TypeAdapter(EntryBody).json_schema(),
        "Entry",
        "An entry body as a peer publishes it (publish.entry).",
    )
    stamped = TypeAdapter(EntryBody).json_schema()
    _stamp_defs(stamped)
    out["stamped-entry"] = _finish(
        stamped, "StampedEntry", "An entry as the relay delivers it: stamped with its serial."
    )
    return out


def schema_files() -> dict[str, str]:
    """The files of ``docs/schema``: file name -> text, exactly as written there."""
    return {
        f"{name}.json": json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        for name, schema in sorted(frame_schemas().items())
    }


def _finish(
    schema: dict[str, Any], title: str | None = None, description: str | None = None
) -> dict[str, Any]:
    """Add the dialect (and a title to a union), and require every discriminator."""
    _require_discriminators(schema)
    for definition in schema.get("$defs", {}).values():
        _require_discriminators(definition)
    head: dict[str, Any] = {"$schema": DIALECT}
    if title is not None:
        head["title"] = title
    if description is not None:
        head["description"] = description
    return {**head, **schema}


def _require_discriminators(schema: dict[str, Any]) -> None:
    properties = schema.get("properties", {})
    for key in ("type", "kind"):
        prop = properties.get(key)
        if isinstance(prop, dict) and "const" in prop:
            required: list[str] = schema.setdefault("required", [])
            if key not in required:
                required.insert(0, key)


def _stamped_entries(schema: dict[str, Any]) -> dict[str, Any]:
    """Make every ``entries`` array of the (relay) frame schema hold stamped entries."""
    entry = TypeAdapter(EntryBody).json_schema()
    _stamp_defs(entry)
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    for name, definition in entry.pop("$defs").items():
        if name in defs and defs[name] != definition:
            raise AssertionError(f"two different schemas named {name}")  # pragma: no cover
        defs[name] = definition
    defs["StampedEntry"] = {
        "description": "An entry as the relay delivers it: stamped with its serial.",
        **entry,
    }
    ref = {"$ref": "#/$defs/StampedEntry"}
    for frame in [schema, *defs.values()]:
        entries = frame.get("properties", {}).get("entries")
        if isinstance(entries, dict) and entries.get("type") == "array":
            entries["items"] = copy.deepcopy(ref)
    return schema


def _stamp_defs(schema: dict[str, Any]) -> None:
    for name, definition in schema.get("$defs", {}).items():
        if name not in _ENTRY_DEFS:
            continue
        definition["properties"].update(copy.deepcopy(_STAMPED))
        required: list[str] = definition.setdefault("required", [])
        for key in reversed(_STAMPED):
            if key not in required:
                required.insert(0, key)


def main(argv: list[str] | None = None) -> int:
    """``python -m transport.schema [DIR]``: (re)write the schema files into DIR.

    DIR defaults to ``docs/schema``; ``*.json`` files there that no schema
    names any more are removed. Returns the exit status.
    """
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0] if args else "docs/schema")
    directory.mkdir(parents=True, exist_ok=True)
    files = schema_files()
    for stale in directory.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} schemas to {directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
