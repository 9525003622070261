"""Tokens never reach a log: a logging filter that redacts them from every record.

``RedactTokens`` rewrites a record's message, its traceback text and its stack text, at every
level. It redacts the value of a ``token=`` query parameter and of an ``Authorization`` header,
and whatever follows ``Bearer``. It also redacts any string that looks like a JWT: three
base64url parts, the first starting ``eyJ``.

``install()`` puts the filter on the loggers of websockets and of runwire, listed in ``LOGGERS``;
a second call changes nothing. The relay and the SDK connections call it as they start.
``runwire relay`` also puts it on the handlers of the root logger, which sees every record that
propagates.
"""

from __future__ import annotations

import logging
import re

__all__ = ["LOGGERS", "REDACTED", "RedactTokens", "install", "redact"]

REDACTED = "[REDACTED]"

LOGGERS = (
    "websockets",
    "websockets.server",
    "websockets.client",
    "runwire",
    "runwire.relay",
    "runwire.relay.store",
    "runwire.agent",
    "runwire.client",
    "runwire.connection",
    "runwire.abort",
    "runwire.mirror",
    "runwire.view",
    "runwire.worker",
    "runwire.access",
)
"""The loggers ``install`` filters: a filter on a logger sees only the records logged to it,
not those its children pass up, so each is named."""

_PATTERNS = (
    # ?token=... or &token=... (also access_token=), up to the next separator.
    (re.compile(r"(\b(?:access_)?token=)[^&\s#\"'<>]+", re.IGNORECASE), r"\1" + REDACTED),
    # An Authorization header, as a header line or a repr: its whole value.
    (
        re.compile(r"(\bauthorization[\"']?\s*[:=,]\s*[\"']?)[^\r\n\"']+", re.IGNORECASE),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(\bbearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
)


def redact(text: str) -> str:
    """``text`` with every token in it replaced by ``[REDACTED]``."""
    if not _may_hold_a_token(text):
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _may_hold_a_token(text: str) -> bool:
    lowered = text.lower()
    return (
        "token=" in lowered or "authorization" in lowered or "bearer" in lowered or ("eyJ" in text)
    )


class RedactTokens(logging.Filter):
    """Redacts tokens from each record it sees (never drops one)."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format: leave it to the handler
            return True
        clean = redact(message)
        if clean != message:
            record.msg = clean
            record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactTokens()


def install(*targets: logging.Logger | logging.Handler) -> None:
    """Put the filter on ``LOGGERS`` and on ``targets`` (once each)."""
    for target in (*(logging.getLogger(name) for name in LOGGERS), *targets):
        if not any(isinstance(f, RedactTokens) for f in target.filters):
            target.addFilter(_FILTER)
