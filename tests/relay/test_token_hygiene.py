"""Token hygiene: an HS256 secret shorter than 32 bytes is refused at start-up (``TokenVerifier``,
``relay.serve``, ``runwire relay``), and a token whose ``exp`` is not a number is refused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

import relay
from relay.auth import MIN_SECRET_BYTES, TokenVerifier
from transport.errors import RunwireError

SECRET = "token-hygiene-secret-" + "0123456789abcdef" * 2


def test_a_secret_shorter_than_32_bytes_is_refused() -> None:
    assert MIN_SECRET_BYTES == 32
    with pytest.raises(ValueError, match="at least 32"):
        TokenVerifier(secret="x" * 31)
    # Bytes, not characters: 11 three-byte characters are 33 bytes.
    TokenVerifier(secret="€" * 11)
    TokenVerifier(secret="y" * 32)


@pytest.mark.anyio
async def test_serve_raises_value_error_for_a_short_secret() -> None:
    with pytest.raises(ValueError, match="HS256 secret is 6 bytes"):
        async with relay.serve(port=0, store="memory://", secret="short!"):
            pass


def test_the_cli_exits_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("too-short-secret\n")
    done = subprocess.run(
        [sys.executable, "-m", "relay", "--port", "0", "--store", "memory://",
         "--secret-file", str(secret)],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "HS256 secret is 16 bytes; it must be at least 32" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("exp", ["9999999999", str(int(time.time()) + 600), True, [1], None])
def test_an_exp_that_is_not_a_number_is_refused(exp: Any) -> None:
    claims = {"sub": "alice", "exp": exp, "sessions": {"*": ["subscribe"]}}
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    with pytest.raises(RunwireError) as caught:
        TokenVerifier(secret=SECRET).verify(token)
    assert caught.value.code == "UNAUTHORIZED"
    assert caught.value.details["reason"] in ("claims", "invalid")
    if isinstance(exp, str):
        assert "'exp' must be a number" in caught.value.message


@pytest.mark.parametrize("exp", [int(time.time()) + 600, time.time() + 600.5])
def test_a_numeric_exp_is_accepted(exp: float) -> None:
    claims = {"sub": "alice", "exp": exp, "sessions": {"*": ["subscribe"]}}
    identity = TokenVerifier(secret=SECRET).verify(jwt.encode(claims, SECRET, algorithm="HS256"))
    assert identity.expires_at == pytest.approx(exp, abs=1)
