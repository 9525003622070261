"""Which web pages may talk to the relay: the ``Origin`` check and the CORS answer.

A browser names the page a request comes from in its ``Origin`` header, on a
WebSocket handshake and on ``fetch`` alike. A request whose ``Origin`` is not
allowed is refused with 403; a request without one (a program, not a page)
is not checked. An allowed origin is named back in
``Access-Control-Allow-Origin``, with ``Vary: Origin``: never ``*``.

Patterns are ``scheme://host`` or ``scheme://host:port``; the port may be
``*`` (any port, or none). ``null`` allows the opaque origin of sandboxed
frames and ``file:`` pages, and ``*`` alone allows every origin. The relay's
own origin (the scheme and the ``Host`` header the request came with) is
always allowed. By default an anonymous relay on a loopback host also allows
``http://localhost:*``, ``http://127.0.0.1:*`` and ``http://[::1]:*``;
any other relay allows its own origin only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from websockets.datastructures import Headers
from websockets.http11 import Response

from transport.errors import UNAUTHORIZED, RunwireError

from ._admission import BurstLog

__all__ = ["LOOPBACK_ORIGINS", "OriginPolicy", "cors", "origin_refused"]

LOOPBACK_ORIGINS = ("http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*")
"""Allowed by default on an anonymous relay listening on a loopback host."""

_PATTERN = re.compile(r"(https?)://(\[[0-9a-f:.]+\]|[a-z0-9.\-]+)(?::(\*|\d{1,5}))?")
_DEFAULT_PORT = {"http": "80", "https": "443"}


@dataclass(frozen=True)
class _Rule:
    scheme: str
    host: str
    port: str | None  # None: the scheme's default port; "*": any


def _parse(origin: str) -> _Rule | None:
    match = _PATTERN.fullmatch(origin.strip().lower().rstrip("/"))
    if match is None:
        return None
    scheme, host, port = match.groups()
    return _Rule(scheme, host, None if port == _DEFAULT_PORT[scheme] else port)


class OriginPolicy:
    """The origins one relay allows (see the module docstring)."""

    def __init__(self, patterns: Iterable[str], *, loopback_only_host: bool = False) -> None:
        """``patterns``: the allowed origins; ``loopback_only_host``: the relay's own origin
        counts only when its ``Host`` is a loopback name (an anonymous relay, which a page
        could otherwise reach by pointing its own name at 127.0.0.1)."""
        self.any = False
        self.null = False
        self.rules: list[_Rule] = []
        self.loopback_only_host = loopback_only_host
        self.refusals = BurstLog()
        """Logs the first refusal of a burst (``relay._admission``)."""
        for pattern in patterns:
            text = pattern.strip()
            if text == "*":
                self.any = True
            elif text == "null":
                self.null = True
            elif text:
                rule = _parse(text)
                if rule is None:
                    raise ValueError(
                        f"allowed origin {pattern!r} is not scheme://host or "
                        "scheme://host:port (the port may be *)"
                    )
                self.rules.append(rule)

    @classmethod
    def default(cls, *, anonymous: bool, loopback: bool) -> OriginPolicy:
        """The policy when none is configured."""
        if anonymous and loopback:
            return cls(LOOPBACK_ORIGINS, loopback_only_host=True)
        return cls((), loopback_only_host=anonymous)

    def allows(self, origin: str, host: str | None) -> bool:
        """Whether a request from ``origin`` with the ``Host`` header ``host`` is allowed."""
        if self.any:
            return True
        if origin.strip() == "null":
            return self.null
        rule = _parse(origin)
        if rule is None or rule.port == "*":
            return False
        if host is not None and self._own(rule, host):
            return True
        return any(
            r.scheme == rule.scheme and r.host == rule.host and r.port in ("*", rule.port)
            for r in self.rules
        )

    def _own(self, origin: _Rule, host: str) -> bool:
        own = _parse(f"{origin.scheme}://{host}")
        if own is None or own != origin:
            return False
        return not self.loopback_only_host or _loopback_name(own.host)


def _loopback_name(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def origin_refused(origin: str) -> RunwireError:
    """The error a request from an origin that is not allowed is answered with (403)."""
    return RunwireError(
        UNAUTHORIZED,
        f"origin {origin[:200]!r} is not allowed (the relay's --allowed-origins)",
        details={"reason": "origin", "origin": origin[:200]},
    )


def cors(response: Response, origin: str | None) -> Response:
    """``response`` with the CORS answer for a request from ``origin`` (already allowed):
    ``Access-Control-Allow-Origin`` names it, ``Vary: Origin`` tells caches it depends."""
    headers: Headers = response.headers
    if "Access-Control-Allow-Origin" in headers:
        del headers["Access-Control-Allow-Origin"]
    if origin is not None:
        headers["Access-Control-Allow-Origin"] = origin
    if "Vary" not in headers:
        headers["Vary"] = "Origin"
    return response
