"""Token verification: algorithms, keys, expiry, claims, capabilities per session pattern."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt.utils import base64url_encode

from relay.auth import Identity, TokenVerifier, matches, mint_token, token_from_request
from transport.errors import RunwireError

SECRET = "s3cret-for-tests-only-" + "0123456789abcdef" * 3


def pem_pair(kind: str) -> tuple[str, str]:
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if kind == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def hs256(payload: dict[str, Any], key: str) -> str:
    """An HS256 JWT made by hand (PyJWT refuses to HMAC with a PEM key)."""
    header = base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = base64url_encode(json.dumps(payload).encode())
    signing = header + b"." + body
    sig = base64url_encode(hmac.new(key.encode(), signing, hashlib.sha256).digest())
    return (signing + b"." + sig).decode()


def claims(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sub": "alice",
        "exp": int(time.time()) + 600,
        "sessions": {"trip-*": ["publish", "steer"]},
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def refusal(verifier: TokenVerifier, token: str | None) -> tuple[str, str | None]:
    with pytest.raises(RunwireError) as info:
        verifier.verify(token)
    return info.value.code, info.value.details.get("reason")


def test_a_good_hs256_token_gives_the_user_and_rights() -> None:
    token = mint_token(
        user="alice",
        sessions={"trip-*": ["publish", "cancel-any"], "*": ["subscribe"]},
        secret=SECRET,
        client_id="alice-phone",
    )
    identity = TokenVerifier(secret=SECRET).verify(token)
    assert (identity.user_id, identity.client_id) == ("alice", "alice-phone")
    assert identity.caps("trip-42") == {"publish", "cancel-any", "cancel", "subscribe"}
    assert identity.caps("work-1") == {"subscribe"}
    assert identity.expires_at > time.time()


@pytest.mark.parametrize(
    ("token_claims", "reason"),
    [
        (claims(sub=None), "claims"),
        (claims(exp=None), "claims"),
        (claims(sessions=None), "claims"),
        (claims(sub=""), "claims"),
        (claims(sessions={"*": "publish"}), "claims"),
        (claims(sessions={"*": ["publish", "root"]}), "claims"),
        (claims(client_id=7), "claims"),
        (claims(client_id="relay"), "claims"),  # the relay's own client id
        (claims(exp=10**400), "claims"),  # was an OverflowError out of verify()
    ],
)
def test_missing_or_bad_claims_are_refused(token_claims: dict[str, Any], reason: str) -> None:
    token = jwt.encode(token_claims, SECRET, algorithm="HS256")
    assert refusal(TokenVerifier(secret=SECRET), token) == ("UNAUTHORIZED", reason)


def test_expired_tokens_are_refused_as_expired() -> None:
    token = jwt.encode(claims(exp=int(time.time()) - 5), SECRET, algorithm="HS256")
    assert refusal(TokenVerifier(secret=SECRET), token)[0] == "TOKEN_EXPIRED"


def test_a_token_over_max_bytes_is_refused_unread() -> None:
    token = jwt.encode(claims(), SECRET, algorithm="HS256")
    assert TokenVerifier(secret=SECRET, max_bytes=len(token)).verify(token).user_id == "alice"
    with pytest.raises(RunwireError) as info:
        TokenVerifier(secret=SECRET, max_bytes=len(token) - 1).verify(token)
    assert info.value.code == "UNAUTHORIZED"
    assert info.value.details == {
        "reason": "too_large",
        "size": len(token),
        "limit": len(token) - 1,
    }
    # Refused before anything else is looked at: even a forged one of that size.
    assert refusal(TokenVerifier(secret=SECRET, max_bytes=10), "x" * 11) == (
        "UNAUTHORIZED",
        "too_large",
    )
    assert TokenVerifier(secret=SECRET).max_bytes == 32 * 1024


def test_forged_tokens_are_refused() -> None:
    verifier = TokenVerifier(secret=SECRET)
    forged = jwt.encode(claims(), "another-secret-" + "x" * 60, algorithm="HS256")
    assert refusal(verifier, forged) == ("UNAUTHORIZED", "signature")
    good = jwt.encode(claims(), SECRET, algorithm="HS256")
    head, _, sig = good.split(".")
    other_body = jwt.encode(claims(sub="mallory"), SECRET, algorithm="HS256").split(".")[1]
    assert refusal(verifier, f"{head}.{other_body}.{sig}") == ("UNAUTHORIZED", "signature")
    assert refusal(verifier, "not-a-jwt") == ("UNAUTHORIZED", "malformed")
    assert refusal(verifier, None) == ("UNAUTHORIZED", "missing")


@pytest.mark.parametrize("alg", ["HS512", "HS384", "none"])
def test_algorithms_other_than_the_configured_ones_are_refused(alg: str) -> None:
    key = None if alg == "none" else SECRET
    token = jwt.encode(claims(), key, algorithm=alg)
    assert refusal(TokenVerifier(secret=SECRET), token) == ("UNAUTHORIZED", "algorithm")


@pytest.mark.parametrize(("kind", "alg"), [("rsa", "RS256"), ("ec", "ES256")])
def test_public_key_tokens(kind: str, alg: str) -> None:
    private, public = pem_pair(kind)
    token = mint_token(user="bob", sessions={"*": ["agent"]}, private_key=private, algorithm=alg)
    identity = TokenVerifier(public_key=public).verify(token)
    assert identity.user_id == "bob" and identity.caps("x") == {"agent", "subscribe"}
    # An HS256 token "signed" with the public key text (the algorithm-confusion attack).
    assert refusal(TokenVerifier(public_key=public), hs256(claims(), public)) == (
        "UNAUTHORIZED",
        "algorithm",
    )
    # A key pair the relay does not know is refused on signature.
    other_private, _ = pem_pair(kind)
    stranger = mint_token(user="eve", sessions={}, private_key=other_private, algorithm=alg)
    assert refusal(TokenVerifier(public_key=public), stranger) == ("UNAUTHORIZED", "signature")


def test_secret_only_relays_refuse_public_key_tokens() -> None:
    private, _ = pem_pair("rsa")
    token = mint_token(user="bob", sessions={}, private_key=private, algorithm="RS256")
    assert refusal(TokenVerifier(secret=SECRET), token) == ("UNAUTHORIZED", "algorithm")


def test_patterns_match_whole_ids_and_only_star_is_special() -> None:
    identity = Identity(
        user_id="u",
        client_id=None,
        grants=(("trip-*", frozenset({"publish"})), ("a.b", frozenset({"steer"}))),
        expires_at=0,
    )
    assert identity.caps("trip-") == {"publish"}
    assert identity.caps("my-trip-1") == frozenset()
    assert identity.caps("a.b") == {"steer"}
    assert identity.caps("axb") == frozenset()
    assert identity.grants_anywhere("publish") and not identity.grants_anywhere("agent")


def test_tokens_come_from_the_header_or_the_query() -> None:
    assert token_from_request({"Authorization": "Bearer abc"}, "/?token=zzz") == "abc"
    assert token_from_request({}, "/relay?x=1&token=zzz") == "zzz"
    assert token_from_request({"Authorization": "Basic abc"}, "/") is None


def test_minting_refuses_unknown_capabilities_and_needs_a_key() -> None:
    with pytest.raises(ValueError):
        mint_token(user="a", sessions={"*": ["fly"]}, secret=SECRET)
    with pytest.raises(ValueError):
        mint_token(user="a", sessions={"*": ["publish"]})
    with pytest.raises(ValueError):
        TokenVerifier()


def test_a_pattern_with_many_stars_is_matched_in_linear_time() -> None:
    # The pattern comes from the token, the session id from the client. As a regular
    # expression of ``.*`` parts, this pair took seconds (six stars and 200 dashes: minutes),
    # holding the relay's event loop, and so every other connection, all that time.
    identity = Identity(
        user_id="u",
        client_id=None,
        grants=(("*-*-*-*-*-x", frozenset({"subscribe"})),),
        expires_at=0,
    )
    started = time.perf_counter()
    assert identity.caps("-" * 170) == frozenset()
    assert identity.caps("-" * 199 + "x") == {"subscribe"}
    assert time.perf_counter() - started < 0.5


def _reference(pattern: str, session_id: str) -> bool:
    regex = "".join(".*" if c == "*" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, session_id, flags=re.DOTALL) is not None


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.text(alphabet="ab-*", max_size=8),
    session_id=st.text(alphabet="ab-", max_size=12),
)
def test_pattern_matching_agrees_with_the_glob_definition(pattern: str, session_id: str) -> None:
    assert matches(pattern, session_id) == _reference(pattern, session_id)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


@settings(max_examples=300, deadline=None)
@given(
    sub=st.just("alice") | _JSON,
    exp=st.integers(-(10**20), 10**500) | st.floats() | _JSON,
    sessions=st.just({"*": ["subscribe"]}) | _JSON,
    extra=st.dictionaries(st.sampled_from(["iat", "nbf", "client_id", "aud", "iss"]), _JSON),
)
def test_any_signed_claims_give_an_identity_or_a_refusal(
    sub: Any, exp: Any, sessions: Any, extra: dict[str, Any]
) -> None:
    """Whatever a correctly signed token holds, ``verify`` answers with an ``Identity`` or a
    ``RunwireError``, never another exception (a 500, a socket closed 1011)."""
    body = json.dumps({"sub": sub, "exp": exp, "sessions": sessions, **extra}).encode()
    token = jwt.api_jws.encode(body, SECRET, algorithm="HS256")
    try:
        identity = TokenVerifier(secret=SECRET).verify(token)
    except RunwireError as exc:
        assert exc.code in ("UNAUTHORIZED", "TOKEN_EXPIRED")
    else:
        assert identity.user_id == sub and identity.expires_at > time.time() - 1


@pytest.mark.parametrize("claim", ["iat", "nbf"])
def test_a_fresh_token_from_a_clock_a_moment_ahead_is_accepted(claim: str) -> None:
    # A back end whose clock is 2 s ahead (or that rounds iat up) mints a token and the
    # client uses it at once: PyJWT without leeway refused it as "not yet valid", a final
    # UNAUTHORIZED for the SDKs.
    now = int(time.time())
    token = jwt.encode(claims(**{claim: now + 2}), SECRET, algorithm="HS256")
    assert TokenVerifier(secret=SECRET).verify(token).user_id == "alice"
    later = jwt.encode(claims(**{claim: now + 120}), SECRET, algorithm="HS256")
    assert refusal(TokenVerifier(secret=SECRET), later) == ("UNAUTHORIZED", "invalid")
    bad = jwt.encode(claims(**{claim: "soon"}), SECRET, algorithm="HS256")
    assert refusal(TokenVerifier(secret=SECRET), bad) == ("UNAUTHORIZED", "invalid")
