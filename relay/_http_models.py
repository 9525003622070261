"""What the HTTP API's requests may carry: body models, query parameters, and error statuses.

The body models (``PostMessage``, ``PostCancel``, ``PostResume``) are what
``relay._http_api`` validates bodies with and what ``relay.openapi`` describes.
The query helpers read a parameter and refuse a bad one with
``VALIDATION_ERROR``, naming it in ``details.param``. ``STATUS`` maps each error
code to its HTTP status (``docs/reference/protocol/http.md``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field

from transport.errors import (
    CONFLICT,
    DUPLICATE_RUN,
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    INTERRUPT_ANSWER_INVALID,
    INTERRUPT_EXPIRED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PAYLOAD_TOO_LARGE,
    PROTOCOL_ERROR,
    RATE_LIMITED,
    RUN_NOT_ACTIVE,
    RUN_NOT_FOUND,
    STORE_UNAVAILABLE,
    THREAD_ACCESS_DENIED,
    THREAD_BUSY,
    TOKEN_EXPIRED,
    UNAUTHORIZED,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import Intent, Multitask, ThreadAccess
from transport.messages import UIMessage

__all__ = [
    "SESSION_ID",
    "STATUS",
    "Body",
    "PostCancel",
    "PostMessage",
    "PostResume",
    "float_param",
    "int_param",
    "opt_int_param",
    "param",
    "position",
    "session_id",
    "shape",
]

SESSION_ID = re.compile(r"[A-Za-z0-9._:\-]{1,200}")
"""A session id: 1-200 characters out of A-Z a-z 0-9 . _ : -"""

STATUS: dict[str, int] = {
    VALIDATION_ERROR: 400,
    PROTOCOL_ERROR: 400,
    UNAUTHORIZED: 401,
    TOKEN_EXPIRED: 401,
    NOT_FOUND: 404,
    RUN_NOT_FOUND: 404,
    RUN_NOT_ACTIVE: 409,
    THREAD_BUSY: 409,
    DUPLICATE_RUN: 409,
    THREAD_ACCESS_DENIED: 409,
    CONFLICT: 409,
    EPOCH_MISMATCH: 409,
    INTERRUPT_ANSWER_INVALID: 400,
    INTERRUPT_EXPIRED: 410,
    PAYLOAD_TOO_LARGE: 413,
    RATE_LIMITED: 429,
    INTERNAL_ERROR: 500,
    NOT_IMPLEMENTED: 501,
    STORE_UNAVAILABLE: 503,
}
"""The HTTP status of each error code (``UNAUTHORIZED`` with ``details.needs``: 403;
codes not listed, such as an input check's refusal: 400)."""


class Body(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


Id = Annotated[str, Field(min_length=1, max_length=200)]


class PostMessage(Body):
    """The body of ``POST /v1/sessions/{id}/messages``."""

    message: UIMessage | str
    message_id: Id | None = None
    run_id: Id | None = None
    intent: Intent = "prompt"
    multitask: Multitask | None = None
    agent: Id | None = None
    parent_id: Id | None = None
    parent_run_id: Id | None = None
    thread_access: ThreadAccess | None = None
    client_id: Id | None = None


class PostCancel(Body):
    """The body of ``POST /v1/sessions/{id}/runs/{run_id}/cancel``."""

    reason: str | None = Field(default=None, max_length=1000)
    id: Id | None = None
    client_id: Id | None = None


class PostResume(Body):
    """The body of ``POST /v1/sessions/{id}/runs/{run_id}/resume``."""

    responses: dict[str, Any] = Field(default_factory=dict)
    decline: bool = False
    reason: str | None = Field(default=None, max_length=1000)
    id: Id | None = None
    client_id: Id | None = None


def session_id(segment: str) -> str:
    """The session id a path segment names (percent-decoded), or ``VALIDATION_ERROR``."""
    value = unquote(segment)
    if not SESSION_ID.fullmatch(value):
        raise RunwireError(
            VALIDATION_ERROR,
            "a session id is 1-200 characters out of A-Z a-z 0-9 . _ : -",
            details={"session_id": value[:300]},
        )
    return value


def shape(query: dict[str, list[str]]) -> str:
    """The ``format`` of an event stream: ``entries`` (the default) or ``ag-ui``."""
    value = param(query, "format") or "entries"
    if value not in ("entries", "ag-ui"):
        raise RunwireError(VALIDATION_ERROR, "format must be entries or ag-ui")
    return value


def param(query: dict[str, list[str]], name: str) -> str | None:
    """The last value of the query parameter ``name``, or None."""
    values = query.get(name)
    return values[-1] if values else None


def _parse_int(name: str, text: str, low: int, high: int | None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise RunwireError(
            VALIDATION_ERROR, f"{name}: an integer {bounds}", details={"param": name}
        )
    return value


_POSITION = re.compile(r"(\d{1,15})(?:@([A-Za-z0-9]{1,64}))?")


def position(name: str, text: str) -> tuple[int, str | None]:
    """An event stream's position: ``<serial>`` (without an epoch: the form ids had before
    they carried one) or ``<serial>@<epoch>``."""
    match = _POSITION.fullmatch(text)
    if match is None:
        raise RunwireError(
            VALIDATION_ERROR,
            f"{name}: a serial, or <serial>@<epoch> (an id: line of the stream)",
            details={"param": name},
        )
    return int(match[1]), match[2]


def int_param(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    """An integer parameter from ``low`` to ``high`` (``default`` when absent)."""
    text = param(query, name)
    return default if not text else _parse_int(name, text, low, high)


def opt_int_param(query: dict[str, list[str]], name: str) -> int | None:
    """A parameter of 0 or more, or None when absent."""
    text = param(query, name)
    return None if not text else _parse_int(name, text, 0, None)


def float_param(
    query: dict[str, list[str]], name: str, default: float, low: float, high: float
) -> float:
    """A number from ``low`` to ``high`` (``default`` when absent)."""
    text = param(query, name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise RunwireError(
            VALIDATION_ERROR, f"{name}: a number {low:g}..{high:g}", details={"param": name}
        )
    return value
