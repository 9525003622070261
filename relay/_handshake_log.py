"""A quieter websockets server log: a connection that hangs up before its request is no error.

Port scanners, TCP health checks of load balancers and a client cancelled while it
connects all open a connection and close it without a request. websockets logs each
one at ERROR with a traceback ("opening handshake failed"). This filter logs them
at DEBUG instead, in one line; every other handshake failure stays an ERROR.
"""

from __future__ import annotations

import logging

from websockets.exceptions import InvalidMessage

__all__ = ["install"]

_MESSAGE = "opening handshake failed"


class HangUpBeforeRequest(logging.Filter):
    """Turns websockets' ERROR for a connection closed before its request into DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != _MESSAGE or not record.exc_info:
            return True
        exc = record.exc_info[1]
        if not isinstance(exc, InvalidMessage) or not isinstance(exc.__cause__, EOFError):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg = "a connection closed before it sent its request"
        record.exc_info = record.exc_text = None
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_FILTER = HangUpBeforeRequest()


def install() -> None:
    """Put the filter on websockets' server logger (once; later calls do nothing)."""
    logger = logging.getLogger("websockets.server")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
