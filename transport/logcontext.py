"""Log records that know their session, Run and client, and the two log formats.

``SESSION_ID``, ``RUN_ID`` and ``CLIENT_ID`` are context variables: a task that
serves one connection or one Run sets them once, and every record logged from that
task (or a task it starts) carries them. A record's own ``extra`` fields win.
``setup()`` configures the root logger: ``text`` is one line with the time, the
level name, the logger and the message; ``json`` is one JSON object a line.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from . import redact

__all__ = [
    "CLIENT_ID",
    "FORMATS",
    "RUN_ID",
    "SESSION_ID",
    "TEXT_FORMAT",
    "ContextFilter",
    "JsonFormatter",
    "LogFormat",
    "bind",
    "setup",
]

SESSION_ID: ContextVar[str | None] = ContextVar("runwire_session_id", default=None)
RUN_ID: ContextVar[str | None] = ContextVar("runwire_run_id", default=None)
CLIENT_ID: ContextVar[str | None] = ContextVar("runwire_client_id", default=None)
_VARS = {"session_id": SESSION_ID, "run_id": RUN_ID, "client_id": CLIENT_ID}

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


@contextmanager
def bind(
    *, session_id: str | None = None, run_id: str | None = None, client_id: str | None = None
) -> Iterator[None]:
    """Records logged inside the block carry the ids given (the others stay as they were)."""
    tokens = [
        (var, var.set(value))
        for var, value in ((SESSION_ID, session_id), (RUN_ID, run_id), (CLIENT_ID, client_id))
        if value is not None
    ]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class ContextFilter(logging.Filter):
    """Puts ``session_id``, ``run_id`` and ``client_id`` on every record (None if unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _VARS.items():
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the ids known, the error."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in (*_VARS, "method", "path", "status", "duration_ms", "remote"):
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class _Quiet(logging.Filter):
    """Drops websockets' "connection rejected (200 OK)": the relay logs HTTP requests itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith("connection rejected"))


_QUIET = _Quiet()


def setup(
    level: str | int = "INFO",
    fmt: LogFormat = "text",
    *,
    access_log: bool = True,
    stream: Any = None,
) -> logging.Handler:
    """Log to ``stream`` (stderr) in ``fmt``; tokens redacted; no per-request websockets noise.

    ``access_log=False`` turns the relay's ``runwire.access`` log of HTTP requests off.
    Returns the handler it installed on the root logger.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    redact.install(handler)
    for name in ("websockets.server", "websockets"):
        logging.getLogger(name).addFilter(_QUIET)
    logging.getLogger("runwire.access").disabled = not access_log
    return handler
