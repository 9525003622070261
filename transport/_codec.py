"""The codec: frames to bytes and back. The only module that touches orjson.

Decoding never raises anything but ``RunwireError``, with a stable code:

* ``PAYLOAD_TOO_LARGE``: over ``max_bytes``;
* ``PROTOCOL_ERROR``: not JSON, not an object, or no string ``type``;
* ``UNKNOWN_FRAME``: a ``type`` this side does not know;
* ``VALIDATION_ERROR``: a known frame with bad fields, which ``details.errors`` names.

``request_id()`` recovers the ``req`` of a frame that failed, so the error reply still matches
its request. ``decode_client_frame`` refuses fields the models do not know, and so does every
entry. ``decode_relay_frame`` drops them; docs/explanation/wire-protocol.md says why.

A frame nested more than ``MAX_DEPTH`` (100) levels deep is a ``VALIDATION_ERROR`` with
``details.limit``. ``loads`` checks it before any model sees the frame. orjson encodes no more
than 254 levels, so a deeper entry could be decoded but never stored. ``decode_relay_frame``
allows ``RELAY_FRAME_DEPTH``, a few levels more, since a relay frame wraps the entries it carries.

Entries are stored and delivered as bytes. The relay encodes an entry once, without its serial,
and ``splice_serial`` adds the serial in front without encoding it again. So fan-out to many
subscribers costs one encode.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import (
    PAYLOAD_TOO_LARGE,
    PROTOCOL_ERROR,
    UNKNOWN_FRAME,
    VALIDATION_ERROR,
    RunwireError,
)
from .frames import (
    ClientFrame,
    EntryBody,
    RelayFrame,
    client_frame_adapter,
    entry_adapter,
    relay_frame_adapter,
)

__all__ = [
    "CLIENT_FRAME_TYPES",
    "MAX_DEPTH",
    "RELAY_FRAME_DEPTH",
    "RELAY_FRAME_TYPES",
    "attached_frame",
    "decode_client_frame",
    "decode_entry",
    "decode_relay_frame",
    "deliver_frame",
    "dumps",
    "encode",
    "encode_entry",
    "error_frame",
    "loads",
    "page_frame",
    "request_id",
    "splice_serial",
    "validation_error",
]

CLIENT_FRAME_TYPES = frozenset({"hello", "attach", "detach", "publish", "history", "worker"})
RELAY_FRAME_TYPES = frozenset(
    {"welcome", "attached", "ack", "page", "deliver", "dispatch", "error"}
)


MAX_DEPTH = 100
"""The deepest nesting of objects and arrays a frame or an HTTP body may have."""
RELAY_FRAME_DEPTH = MAX_DEPTH + 8
"""The same for a frame the relay sends: ``deliver`` and ``page`` put entries a level deeper."""


def dumps(value: Any) -> bytes:
    """JSON-encode plain data."""
    return orjson.dumps(value)


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """JSON-decode; raises ``RunwireError(PROTOCOL_ERROR)`` on bad JSON and
    ``RunwireError(VALIDATION_ERROR)`` on JSON nested more than ``max_depth`` levels."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):  # orjson's own limit, 1024 levels
            raise _too_deep(max_depth) from None
        raise RunwireError(PROTOCOL_ERROR, f"frame is not valid JSON: {exc}") from None
    # Counting brackets is fast; only a document with more of them than the limit (some
    # perhaps inside strings) is walked to find its depth.
    if _brackets(data) > max_depth and _depth_over(value, max_depth):
        raise _too_deep(max_depth)
    return value


def _brackets(data: bytes | str) -> int:
    if isinstance(data, str):
        return data.count("{") + data.count("[")
    return data.count(b"{") + data.count(b"[")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels deep (a walk
    with a stack of its own: no recursion to run out of)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for item in node.values() if isinstance(node, dict) else node:
            if isinstance(item, dict | list):
                stack.append((item, depth + 1))
    return False


def _too_deep(limit: int) -> RunwireError:
    return RunwireError(
        VALIDATION_ERROR,
        f"JSON nested more than {limit} levels deep (objects and arrays)",
        details={"limit": limit},
    )


def encode(frame: BaseModel) -> bytes:
    """Encode a frame model (fields left at None are omitted)."""
    return orjson.dumps(frame.model_dump(mode="json", exclude_none=True))


def encode_entry(entry: BaseModel) -> bytes:
    """Encode an entry without its serial (the store adds it with ``splice_serial``)."""
    return orjson.dumps(entry.model_dump(mode="json", exclude_none=True, exclude={"serial"}))


def splice_serial(entry: bytes, serial: int) -> bytes:
    """Put ``"serial": N`` first in an encoded entry object."""
    if entry == b"{}":
        return b'{"serial":%d}' % serial
    return b'{"serial":%d,' % serial + entry[1:]


def deliver_frame(session_id: str, entries: Iterable[bytes]) -> bytes:
    """A ``deliver`` frame around already-encoded entries."""
    return (
        b'{"type":"deliver","session_id":'
        + orjson.dumps(session_id)
        + b',"entries":['
        + b",".join(entries)
        + b"]}"
    )


def attached_frame(
    req: int | str,
    session_id: str,
    epoch: str,
    head: int,
    *,
    has_older: bool,
    reset: bool,
    entries: Iterable[bytes],
) -> bytes:
    """An ``attached`` frame (``frames.Attached``) around already-encoded entries."""
    return (
        b'{"type":"attached","req":'
        + orjson.dumps(req)
        + b',"session_id":'
        + orjson.dumps(session_id)
        + b',"epoch":'
        + orjson.dumps(epoch)
        + b',"head":%d,"has_older":%s,"reset":%s,"entries":['
        % (head, _bool(has_older), _bool(reset))
        + b",".join(entries)
        + b"]}"
    )


def page_frame(req: int | str, session_id: str, has_older: bool, entries: Iterable[bytes]) -> bytes:
    """A ``page`` frame (``frames.Page``) around already-encoded entries."""
    return (
        b'{"type":"page","req":'
        + orjson.dumps(req)
        + b',"session_id":'
        + orjson.dumps(session_id)
        + b',"has_older":'
        + _bool(has_older)
        + b',"entries":['
        + b",".join(entries)
        + b"]}"
    )


def error_frame(error: dict[str, Any], req: int | str | None = None) -> bytes:
    """An ``error`` frame (``frames.Error``) with ``error`` (``RunwireError.to_wire()``)."""
    frame: dict[str, Any] = {"type": "error", "error": error}
    if req is not None:
        frame["req"] = req
    return orjson.dumps(frame)


def _bool(value: bool) -> bytes:
    return b"true" if value else b"false"


def _frame_size(data: bytes | str, max_bytes: int) -> int:
    """The size of a frame in bytes as it came over the wire (a text frame received as
    ``str`` counts its UTF-8 bytes, not its characters: up to four bytes each).

    Only a ``str`` that could exceed ``max_bytes`` and is not ASCII is encoded to count.
    """
    size = len(data)
    if isinstance(data, str) and size <= max_bytes < 4 * size and not data.isascii():
        size = len(data.encode("utf-8", "surrogatepass"))
    return size


def _decode(
    data: bytes | str,
    adapter: TypeAdapter[Any],
    known: frozenset[str],
    max_bytes: int | None,
    max_depth: int = MAX_DEPTH,
) -> Any:
    if max_bytes is not None:
        size = _frame_size(data, max_bytes)
        if size > max_bytes:
            raise RunwireError(
                PAYLOAD_TOO_LARGE,
                f"frame of {size} bytes exceeds the limit of {max_bytes}",
                details={"size": size, "limit": max_bytes},
            )
    obj = loads(data, max_depth=max_depth)
    if not isinstance(obj, dict):
        raise RunwireError(PROTOCOL_ERROR, "frame must be a JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise RunwireError(PROTOCOL_ERROR, "frame has no string 'type'")
    if kind not in known:
        raise RunwireError(UNKNOWN_FRAME, f"unknown frame type {kind[:50]!r}")
    try:
        return adapter.validate_python(obj)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def validation_error(exc: ValidationError) -> RunwireError:
    """The ``VALIDATION_ERROR`` for a pydantic error (``details.errors``: loc, msg, type)."""
    return _validation_error(exc)


def _validation_error(exc: ValidationError) -> RunwireError:
    errors = [
        {"loc": [str(p) for p in err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    ][:20]
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    where = ".".join(first["loc"]) or "frame"
    return RunwireError(VALIDATION_ERROR, f"{where}: {first['msg']}", details={"errors": errors})


def decode_client_frame(data: bytes | str, *, max_bytes: int | None = None) -> ClientFrame:
    """Decode a frame sent to the relay; a field it does not know is a ``VALIDATION_ERROR``."""
    frame: ClientFrame = _decode(data, client_frame_adapter, CLIENT_FRAME_TYPES, max_bytes)
    return frame


def decode_relay_frame(data: bytes | str) -> RelayFrame:
    """Decode a frame sent by the relay; fields it does not know are ignored (dropped)."""
    frame: RelayFrame = _decode(
        data, relay_frame_adapter, RELAY_FRAME_TYPES, None, RELAY_FRAME_DEPTH
    )
    return frame


def decode_entry(data: dict[str, Any]) -> EntryBody:
    """Validate one delivered entry."""
    try:
        return entry_adapter.validate_python(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def request_id(data: bytes | str) -> int | str | None:
    """Best effort: the ``req`` of a frame that failed to decode, if it had a usable one."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if isinstance(obj, dict):
        req = obj.get("req")
        if isinstance(req, bool):
            return None
        if isinstance(req, int) or (isinstance(req, str) and len(req) <= 100):
            return req
    return None
