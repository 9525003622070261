"""Tokens: who a connection is and what it may do, per session.

A token is a JWT, read with PyJWT. Its claims are ``sub``, the user id; ``exp``; an optional
``client_id``; and ``sessions``. ``sessions`` maps a session-id pattern, where ``*`` matches
any run of characters, to a list of capabilities. The capabilities are ``subscribe``,
``publish``, ``steer``, ``cancel``, ``cancel-any`` and ``agent``. A connection's rights in a
session are the union over every pattern that matches the session id. ``cancel-any`` implies
``cancel``, and ``agent`` implies ``subscribe``, since an agent reads the conversation it answers.

The relay verifies HS256 tokens with a shared ``secret`` of at least ``MIN_SECRET_BYTES`` (32);
a shorter one is refused at start-up. It verifies RS256 and ES256 tokens with a PEM
``public_key``, and may take both. Nothing else is accepted: no ``none``, and no HMAC with the
public key.

A failed verification raises ``RunwireError``: ``TOKEN_EXPIRED`` for an expired token, and
``UNAUTHORIZED`` for everything else, with ``details.reason``. A token longer than ``max_bytes``,
the relay's ``max_token_bytes``, is refused unread, with the reason ``too_large`` and
``details.size`` and ``details.limit``. ``nbf`` and ``iat`` may be up to ``CLOCK_SKEW`` seconds
ahead of the relay's clock; ``exp`` is exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt

from transport._policy import RELAY
from transport._runs import AGENT, CANCEL, CANCEL_ANY, CAPABILITIES, SUBSCRIBE
from transport.errors import TOKEN_EXPIRED, UNAUTHORIZED, RunwireError

__all__ = [
    "MAX_TOKEN_BYTES",
    "MIN_SECRET_BYTES",
    "Identity",
    "TokenVerifier",
    "matches",
    "mint_token",
    "token_from_request",
    "token_too_large",
]

MIN_SECRET_BYTES = 32
"""The shortest HS256 secret a ``TokenVerifier`` takes (RFC 7518: a key at least as long as
the hash, 256 bits); a shorter one could be guessed offline from any token it signed."""
MAX_TOKEN_BYTES = 32 * 1024
"""The default largest token a ``TokenVerifier`` reads (``RelayOptions.max_token_bytes``)."""

_IMPLIES: dict[str, frozenset[str]] = {
    CANCEL_ANY: frozenset({CANCEL}),
    AGENT: frozenset({SUBSCRIBE}),
}


def matches(pattern: str, session_id: str) -> bool:
    """True if ``pattern`` (``*`` matches any run of characters, nothing else is special)
    matches the whole of ``session_id``.

    Greedy matching with one backtrack point (the last ``*``): time linear in
    ``len(pattern) * len(session_id)`` at worst, whatever the pattern. A regular
    expression of ``.*`` parts backtracks exponentially in the number of stars: one
    token pattern with a few stars and a session id the client chose could hold the
    relay's event loop for minutes.
    """
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == session_id
    first, *middle, last = parts
    if len(session_id) < len(first) + len(last):
        return False
    if not session_id.startswith(first) or not session_id.endswith(last):
        return False
    pos = len(first)
    end = len(session_id) - len(last)
    for part in middle:
        if not part:
            continue
        found = session_id.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return True


@dataclass(frozen=True)
class Identity:
    """A verified token: the user, an optional client id, rights per session, and expiry."""

    user_id: str
    client_id: str | None
    grants: tuple[tuple[str, frozenset[str]], ...]
    expires_at: float

    def caps(self, session_id: str) -> frozenset[str]:
        """Every capability the token grants in ``session_id`` (implications included)."""
        out: set[str] = set()
        for pattern, caps in self.grants:
            if matches(pattern, session_id):
                out |= caps
        for cap in list(out):
            out |= _IMPLIES.get(cap, frozenset())
        return frozenset(out)

    def grants_anywhere(self, capability: str) -> bool:
        """True if some session pattern grants ``capability``."""
        return any(
            capability in caps or any(capability in _IMPLIES.get(c, ()) for c in caps)
            for _, caps in self.grants
        )


class TokenVerifier:
    """Checks tokens against a shared secret (HS256) and/or a public key (RS256, ES256)."""

    def __init__(
        self,
        *,
        secret: str | None = None,
        public_key: str | None = None,
        max_bytes: int = MAX_TOKEN_BYTES,
    ) -> None:
        if not secret and not public_key:
            raise ValueError("a TokenVerifier needs a secret or a public key")
        if secret and len(secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(
                f"the HS256 secret is {len(secret.encode())} bytes; it must be at least "
                f"{MIN_SECRET_BYTES} (make one with: python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        self.secret = secret or None
        self.public_key = public_key or None
        self.max_bytes = max_bytes

    def verify(self, token: str | None) -> Identity:
        """The token's ``Identity``; raises ``RunwireError`` (see the module docstring)."""
        if not token:
            raise _refused("no token: send 'Authorization: Bearer <token>' or ?token=", "missing")
        size = len(token.encode())
        if size > self.max_bytes:
            raise token_too_large(size, self.max_bytes)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _refused("the token is not a JWT", "malformed") from None
        alg = header.get("alg")
        key: str | None
        if alg == "HS256":
            key = self.secret
        elif alg in ("RS256", "ES256"):
            key = self.public_key
        else:
            key = None
        if key is None:
            raise _refused(f"tokens signed with {alg!r} are not accepted here", "algorithm")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[str(alg)],
                options={
                    "require": ["exp", "sub"],
                    "verify_aud": False,
                    "verify_exp": False,  # checked below, once it is known to be a number
                    "verify_iat": False,  # checked below, allowing for clock skew
                    "verify_nbf": False,
                },
            )
        except jwt.ExpiredSignatureError:
            raise RunwireError(TOKEN_EXPIRED, "the token has expired") from None
        except jwt.InvalidSignatureError:
            raise _refused("the token's signature does not verify", "signature") from None
        except jwt.MissingRequiredClaimError as exc:
            raise _refused(f"the token has no {exc.claim!r} claim", "claims") from None
        except jwt.PyJWTError as exc:
            raise _refused(f"the token is not valid: {exc}", "invalid") from None
        now = time.time()
        _check_not_before(claims, now)
        identity = _identity(claims)
        if identity.expires_at <= now:
            raise RunwireError(TOKEN_EXPIRED, "the token has expired")
        return identity


CLOCK_SKEW = 30.0
"""Seconds a token's ``nbf`` / ``iat`` may be ahead of the relay's clock (the clock of the
back end that minted it may be ahead a little, and a token is often used the moment it is
made). ``exp`` has none: a token expires when it says."""


def _check_not_before(claims: Mapping[str, Any], now: float) -> None:
    """Refuse a token that is not valid yet: ``nbf`` or ``iat`` more than ``CLOCK_SKEW``
    seconds ahead.

    PyJWT with no leeway at all would also refuse a fresh token whose ``iat`` was rounded up,
    or one minted where the clock is a moment ahead.
    """
    for name in ("nbf", "iat"):
        if name not in claims:
            continue
        try:
            at = int(claims[name])
        except (TypeError, ValueError, OverflowError):
            raise _refused(f"the token's {name!r} must be a number of seconds", "invalid") from None
        if at > now + CLOCK_SKEW:
            raise _refused(f"the token is not valid yet ({name!r} is in the future)", "invalid")


def _identity(claims: Mapping[str, Any]) -> Identity:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise _refused("the token's 'sub' must be a non-empty string", "claims")
    client_id = claims.get("client_id")
    if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= 200):
        raise _refused("the token's 'client_id' must be a string of 1-200 characters", "claims")
    if client_id == RELAY.client_id:
        # The relay's own: its entries are told apart by it (every node, replaying them,
        # would take this connection's for the relay's), and no hello may claim it either.
        raise _refused(f"the token's 'client_id' {client_id!r} is the relay's own", "claims")
    sessions = claims.get("sessions")
    if not isinstance(sessions, dict):
        raise _refused("the token has no 'sessions' map of pattern -> capabilities", "claims")
    grants: list[tuple[str, frozenset[str]]] = []
    for pattern, caps in sessions.items():
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise _refused(f"sessions[{pattern!r}] must be a list of capabilities", "claims")
        unknown = set(caps) - CAPABILITIES
        if unknown:
            raise _refused(f"unknown capabilities {sorted(unknown)}", "claims")
        grants.append((pattern, frozenset(caps)))
    if isinstance(claims["exp"], bool) or not isinstance(claims["exp"], int | float):
        # PyJWT takes whatever int() takes: the string "9999999999" too.
        raise _refused("the token's 'exp' must be a number of seconds since 1970", "claims")
    try:
        expires_at = float(claims["exp"])
    except (OverflowError, TypeError, ValueError):
        expires_at = math.nan
    if not math.isfinite(expires_at):
        # 1e400 as an integer: PyJWT takes it, float() does not (and the expiry timer
        # could not be set): an OverflowError, a 500 or a socket closed 1011, not a refusal.
        raise _refused("the token's 'exp' must be a number of seconds since 1970", "claims")
    return Identity(user_id=sub, client_id=client_id, grants=tuple(grants), expires_at=expires_at)


def token_too_large(size: int, limit: int, where: str = "the token") -> RunwireError:
    """The refusal of a token over ``limit`` bytes (``size``: the token's, or the size of
    ``where``, the request line or header that carried it, when it was too long to read)."""
    return RunwireError(
        UNAUTHORIZED,
        f"the token is too large: {where} is {size} bytes, and a token may be at most "
        f"{limit} bytes (grant fewer session patterns, or wildcards)",
        details={"reason": "too_large", "size": size, "limit": limit},
    )


def _refused(message: str, reason: str) -> RunwireError:
    return RunwireError(UNAUTHORIZED, message, details={"reason": reason})


def token_from_request(headers: Mapping[str, str], path: str) -> str | None:
    """The token of a WebSocket handshake: ``Authorization: Bearer``, else ``?token=``."""
    auth = headers.get("Authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    values = parse_qs(urlsplit(path).query).get("token")
    return values[0] if values else None


def mint_token(
    *,
    user: str,
    sessions: Mapping[str, Sequence[str]],
    secret: str | None = None,
    private_key: str | None = None,
    algorithm: str | None = None,
    ttl: float = 3600,
    client_id: str | None = None,
    now: float | None = None,
) -> str:
    """A token for development and tests (``runwire token``): HS256 with ``secret``, or
    ``algorithm`` (RS256 / ES256) with ``private_key``.

    Raises ``ValueError`` for an unknown capability or a missing key.
    """
    for caps in sessions.values():
        unknown = set(caps) - CAPABILITIES
        if unknown:
            raise ValueError(f"unknown capabilities: {', '.join(sorted(unknown))}")
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {
        "sub": user,
        "iat": int(issued),
        "exp": int(issued + ttl),
        "sessions": {pattern: list(caps) for pattern, caps in sessions.items()},
    }
    if client_id is not None:
        claims["client_id"] = client_id
    if private_key is not None:
        return jwt.encode(claims, private_key, algorithm=algorithm or "RS256")
    if not secret:
        raise ValueError("mint_token needs a secret or a private key")
    return jwt.encode(claims, secret, algorithm=algorithm or "HS256")
