"""The OpenAPI 3.1 document of the HTTP API (``/v1``), served at ``GET /v1/openapi.json``.

The request bodies' schemas come from the models ``relay._http_api`` validates
bodies with, so the document cannot drift from what the relay accepts. The
paths, parameters and responses are written out here; ``tests/relay/test_openapi.py``
checks them against the routes the relay answers, and ``docs/reference/protocol/openapi.json``
is this document as generated (``python -m relay.openapi`` writes it).
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ._http_models import PostCancel, PostMessage, PostResume

__all__ = ["DOCS_COPY", "document", "render"]

DOCS_COPY = Path(__file__).resolve().parents[1] / "docs/reference/protocol/openapi.json"
"""Where the docs keep a copy of the document (``python -m relay.openapi`` writes it)."""

_REF = "#/components/schemas/{model}"


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _errors(*statuses: int) -> dict[str, Any]:
    meaning = {
        400: "VALIDATION_ERROR or PROTOCOL_ERROR: a bad body, field, parameter or id",
        401: "UNAUTHORIZED (no token, a forged or malformed one) or TOKEN_EXPIRED",
        403: "UNAUTHORIZED with details.needs: the token lacks a capability here",
        404: "RUN_NOT_FOUND",
        409: "RUN_NOT_ACTIVE, THREAD_BUSY, DUPLICATE_RUN, THREAD_ACCESS_DENIED",
        410: "INTERRUPT_EXPIRED",
        413: "PAYLOAD_TOO_LARGE: a body over max_frame_bytes",
        429: "RATE_LIMITED",
        503: "STORE_UNAVAILABLE",
    }
    return {
        str(status): {"description": meaning[status], "content": _json(_ref("Error"))}
        for status in statuses
    }


_SESSION = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The session id: 1-200 characters out of A-Z a-z 0-9 . _ : -",
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:\\-]{1,200}$"},
}
_RUN = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "description": "The Run's id (1-200 characters)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
}


def _published(**extra: dict[str, Any]) -> dict[str, Any]:
    """The answer of a publish: its serial, Run and whether it was a retry, and ``extra``."""
    return {
        "type": "object",
        "required": ["serial", "run_id", "duplicate", *extra],
        "properties": {
            "serial": {"type": "integer", "description": "The entry's serial in the session"},
            "run_id": {"type": "string"},
            "duplicate": {
                "type": "boolean",
                "description": "True for a retry: the first publish's serial and Run",
            },
            **extra,
        },
    }


def _post(model: str, summary: str, status: int, answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": False, "content": _json(_ref(model))},
            "responses": {
                str(status): {"description": summary, "content": _json(answer)},
                **_errors(400, 401, 403, 404, 409, 410, 413, 429, 503),
            },
        }
    }


def _schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [PostMessage, PostCancel, PostResume]
    schemas: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemas["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "description": "A stable error code"},
                    "message": {"type": "string"},
                    "details": {"type": "object"},
                },
            }
        },
    }
    return schemas


@cache
def document() -> dict[str, Any]:
    """The OpenAPI document of ``/v1`` (built once)."""
    read_errors = _errors(400, 401, 403, 503)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runwire relay HTTP API",
            "version": "1",
            "description": (
                "Sessions through plain HTTP: publish messages, cancel and resume Runs, read "
                "history, follow the event stream. The same tokens, entries and error codes "
                "as the WebSocket protocol (docs/reference/protocol/http.md)."
            ),
        },
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "query": {"type": "apiKey", "in": "query", "name": "token"},
            },
        },
        "security": [{"bearer": []}, {"query": []}, {}],
        "paths": {
            "/v1/sessions/{id}/messages": {
                "parameters": [_SESSION],
                **_post(
                    "PostMessage",
                    "Publish a message entry",
                    201,
                    _published(message_id={"type": "string"}),
                ),
            },
            "/v1/sessions/{id}/runs/{run_id}/cancel": {
                "parameters": [_SESSION, _RUN],
                **_post("PostCancel", "Cancel a Run", 202, _published()),
            },
            "/v1/sessions/{id}/runs/{run_id}/resume": {
                "parameters": [_SESSION, _RUN],
                **_post("PostResume", "Answer a paused Run's questions", 202, _published()),
            },
            "/v1/sessions/{id}/history": {
                "parameters": [_SESSION],
                "get": {
                    "summary": "A page of entries below a serial",
                    "parameters": [
                        _query("before", "integer", "Entries below this serial (default: all)"),
                        _query("limit", "integer", "At most this many entries (50, 1-1000)"),
                    ],
                    "responses": {
                        "200": {
                            "description": "The page, oldest first",
                            "content": _json(
                                {
                                    "type": "object",
                                    "required": ["entries", "has_older", "head", "epoch"],
                                    "properties": {
                                        "entries": {"type": "array", "items": {"type": "object"}},
                                        "has_older": {"type": "boolean"},
                                        "head": {"type": "integer"},
                                        "epoch": {"type": ["string", "null"]},
                                    },
                                }
                            ),
                        },
                        **read_errors,
                    },
                },
            },
            "/v1/sessions/{id}/events": {
                "parameters": [_SESSION],
                "get": {
                    "summary": "The session's entries as Server-Sent Events",
                    "description": (
                        "Events `entry` (id: the serial, data: the entry), `interrupt-required` "
                        "(after an entry that pauses a Run: run_id, serial, interrupts) and "
                        "`reset` (data: epoch, head, first). Each batch ends with an id "
                        "`<serial>@<epoch>` to resume from (Last-Event-ID). With Accept: "
                        "text/event-stream the response stays open; else it is one batch."
                    ),
                    "parameters": [
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "required": False,
                            "description": "Resume after this id: <serial> or <serial>@<epoch>",
                            "schema": {"type": "string"},
                        },
                        _query("from", "string", "Resume after this serial (or serial@epoch)"),
                        _query("wait", "number", "Seconds to wait for an entry (15, 0-25)"),
                        _query("limit", "integer", "At most this many entries (100, 1-1000)"),
                    ],
                    "responses": {
                        "200": {
                            "description": "An event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **read_errors,
                    },
                },
            },
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [{}],
                    "responses": {"200": {"description": "OpenAPI 3.1", "content": _json({})}},
                }
            },
        },
    }


def _query(name: str, kind: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": kind},
    }


@cache
def render() -> bytes:
    """The document as the bytes served (sorted keys, so the docs copy compares equal)."""
    return (json.dumps(document(), indent=2, sort_keys=True) + "\n").encode()


if __name__ == "__main__":  # pragma: no cover - python -m relay.openapi [path]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DOCS_COPY
    target.write_bytes(render())
    print(f"wrote {target}")
