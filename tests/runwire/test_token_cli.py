"""`runwire token` mints development tokens a relay accepts; `runwire relay` token options."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from relay import _cli as relay_cli
from relay.auth import TokenVerifier
from runwire.cli import main

SECRET = "cli-secret-" + "0123456789abcdef" * 3


def mint(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    main(["token", *argv])
    return capsys.readouterr().out.strip()


def test_token_prints_a_token_the_relay_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    printed = mint(
        capsys,
        "--user",
        "alice",
        "--session",
        "trip-*",
        "--session",
        "demo",
        "--cap",
        "publish,steer,cancel",
        "--secret-file",
        str(secret_file),
        "--ttl",
        "60",
    )
    identity = TokenVerifier(secret=SECRET).verify(printed)
    assert identity.user_id == "alice"
    assert identity.caps("trip-9") == identity.caps("demo") == {"publish", "steer", "cancel"}
    assert identity.caps("other") == frozenset()


def test_token_reads_the_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNWIRE_SECRET", SECRET)
    printed = mint(capsys, "--user", "bob", "--session", "*", "--cap", "agent", "--client-id", "w1")
    identity = TokenVerifier(secret=SECRET).verify(printed)
    assert (identity.user_id, identity.client_id) == ("bob", "w1")


@pytest.mark.parametrize("cap", ["publish,fly", "publish"])
def test_token_refuses_unknown_capabilities_and_a_missing_secret(
    cap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RUNWIRE_SECRET", raising=False)
    if cap == "publish,fly":
        monkeypatch.setenv("RUNWIRE_SECRET", SECRET)
    with pytest.raises(SystemExit) as info:
        main(["token", "--user", "a", "--session", "*", "--cap", cap])
    assert info.value.code == 2
    assert "runwire token:" in capsys.readouterr().err


def test_relay_options_read_the_key_files(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    args = relay_cli.build_parser().parse_args(
        [
            "--secret-file",
            str(secret_file),
            "--multitask",
            "enqueue",
            "--max-concurrent-runs",
            "4",
            "--thread-access",
            "shared",
        ]
    )
    options = relay_cli.options(args)
    assert options["secret"] == SECRET
    assert (options["multitask"], options["max_concurrent_runs"]) == ("enqueue", 4)
    assert options["thread_access"] == "shared" and options["allow_anonymous"] is False


@pytest.mark.anyio
async def test_an_anonymous_relay_on_a_public_host_exits_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args: argparse.Namespace = relay_cli.build_parser().parse_args(
        ["--host", "0.0.0.0", "--port", "0", "--store", "memory://"]
    )
    with pytest.raises(SystemExit) as info:
        await relay_cli.run(args)
    assert info.value.code == 2
    assert "--allow-anonymous" in capsys.readouterr().err
