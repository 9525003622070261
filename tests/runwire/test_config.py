"""Every relay option as a flag, a RUNWIRE_* variable and a TOML key; precedence; --print-config."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relay import _cli as relay_cli
from runwire import config
from runwire.cli import main


def relay_parser() -> argparse.ArgumentParser:
    return relay_cli.build_parser()


def sample(action: argparse.Action, n: int) -> object:
    """A valid value for ``action`` that differs from its default (``n`` varies it)."""
    if action.nargs == 0:
        return True
    if action.choices is not None:
        choices = [c for c in action.choices if c != action.default]
        picked = choices[n % len(choices)]
        return [picked] if isinstance(action, argparse._AppendAction) else picked
    if isinstance(action, argparse._AppendAction):
        return [f"value-{n}", f"more-{n}"]
    if action.type is int:
        return 4000 + n
    if action.type is float:
        return 2.5 + n
    return f"value-{n}"


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def flag_argv(action: argparse.Action, value: object) -> list[str]:
    name = "--" + config.toml_key(action)
    if action.nargs == 0:
        return [name]
    if isinstance(value, list):
        return [part for v in value for part in (name, str(v))]
    return [name, str(value)]


OPTIONS = config.option_actions(relay_parser())


def test_options_are_found_generically() -> None:
    names = {config.toml_key(a) for a in OPTIONS}
    assert {"store", "secret-file", "port", "check", "allow-anonymous", "log-level"} <= names
    envs = {config.env_name(a) for a in OPTIONS}
    assert {"RUNWIRE_STORE", "RUNWIRE_SECRET_FILE", "RUNWIRE_ALLOW_ANONYMOUS"} <= envs


@pytest.mark.parametrize("action", OPTIONS, ids=lambda a: config.toml_key(a))
def test_every_option_works_from_each_source_in_order(
    action: argparse.Action, tmp_path: Path
) -> None:
    parser = relay_parser()
    in_file, in_env, on_line = sample(action, 0), sample(action, 1), sample(action, 2)
    path = tmp_path / "runwire.toml"
    path.write_text(f"[relay]\n{config.toml_key(action)} = {toml_value(in_file)}\n")
    env = {config.env_name(action): env_value(in_env)}

    from_file = config.resolve(parser, ["--config", str(path)], table="relay", environ={})
    assert getattr(from_file.args, action.dest) == in_file
    assert from_file.sources[action.dest] == f"file {path}"

    from_env = config.resolve(parser, ["--config", str(path)], table="relay", environ=env)
    assert getattr(from_env.args, action.dest) == in_env
    assert from_env.sources[action.dest] == f"env {config.env_name(action)}"

    argv = ["--config", str(path), *flag_argv(action, on_line)]
    from_flag = config.resolve(parser, argv, table="relay", environ=env)
    assert getattr(from_flag.args, action.dest) == on_line
    assert from_flag.sources[action.dest] == "flag"

    plain = config.resolve(parser, [], table="relay", environ={})
    assert getattr(plain.args, action.dest) == action.default
    assert plain.sources[action.dest] == "default"


def test_the_config_file_can_come_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[relay]\nstore = "memory://"\n[worker]\nurl = "ws://x"\n')
    resolved = config.resolve(
        relay_parser(), [], table="relay", environ={"RUNWIRE_CONFIG": str(path)}
    )
    assert resolved.args.store == "memory://"


def test_snake_case_keys_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text("[relay]\nagent_grace = 5\n")
    resolved = config.resolve(relay_parser(), ["--config", str(path)], table="relay", environ={})
    assert resolved.args.agent_grace == 5.0


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[relay]\nbogus = 1\n", {}, "unknown key(s) in [relay]: bogus"),
        ('store = "memory://"\n', {}, "store must be in a table ([relay])"),
        ("[relay\n", {}, "not valid TOML"),
        ('[relay]\nport = "eighty"\n', {}, "[relay] port: invalid int value 'eighty'"),
        ('[relay]\nmultitask = "sometimes"\n', {}, "'sometimes' is not one of"),
        ("[relay]\nallow-anonymous = 3\n", {}, "expected true or false"),
        ("[relay]\nport = [1]\n", {}, "expected a single value"),
        ("", {"RUNWIRE_PORT": "x"}, "RUNWIRE_PORT: invalid int value 'x'"),
        ("", {"RUNWIRE_ALLOW_ANONYMOUS": "maybe"}, "RUNWIRE_ALLOW_ANONYMOUS: expected true"),
        ("", {"RUNWIRE_CHECK": "pii,nope"}, "RUNWIRE_CHECK: 'nope' is not one of"),
        ("", {"RUNWIRE_LOG_LEVEL": "LOUD"}, "unknown level 'LOUD'"),
    ],
)
def test_bad_configuration_exits_2_with_one_clear_line(
    text: str,
    env: dict[str, str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        main(["relay", "--config", str(path), "--print-config"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_config_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["relay", "--config", "/nonexistent/runwire.toml"])
    assert exited.value.code == 2
    assert "--config /nonexistent/runwire.toml: No such file or directory" in (
        capsys.readouterr().err
    )


def test_print_config_masks_secrets_and_names_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "relay.toml"
    path.write_text('[relay]\nstore = "redis://:hunter2@redis:6379/0"\ncheck = ["pii"]\n')
    monkeypatch.setenv("RUNWIRE_PORT", "9100")
    with pytest.raises(SystemExit) as exited:
        main(["relay", "--config", str(path), "--host", "0.0.0.0", "--print-config"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    lines = out.splitlines()
    assert lines[0] == "[relay]"
    assert 'host = "0.0.0.0"  # flag' in lines
    assert "port = 9100  # env RUNWIRE_PORT" in lines
    assert f'store = "redis://:***@redis:6379/0"  # file {path}' in lines
    assert 'multitask = "alongside"  # default' in lines
    # What it prints is itself a configuration file that gives the same options.
    body = "\n".join(line.split("  #")[0] for line in lines if not line.startswith("#"))
    again = tmp_path / "again.toml"
    again.write_text(body.replace("***", "hunter2"))
    resolved = config.resolve(relay_parser(), ["--config", str(again)], table="relay", environ={})
    assert resolved.args.port == 9100 and resolved.args.check == ["pii"]


def test_secret_options_are_masked() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    parser.add_argument("--max-token-bytes", type=int, default=5)
    resolved = config.resolve(parser, ["--token", "abc.def"], table="worker", environ={})
    text = config.render(parser, resolved, table="worker")
    assert 'token = "***"  # flag' in text and "abc.def" not in text
    assert "max-token-bytes = 5  # default" in text


def test_a_relay_starts_configured_by_the_environment_alone(tmp_path: Path) -> None:
    """The relay, as a process, takes its store and port from RUNWIRE_* variables."""
    env = {**os.environ, "RUNWIRE_STORE": "memory://", "RUNWIRE_PORT": "0"}
    env["RUNWIRE_HOST"] = "127.0.0.1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("runwire relay listening on ws://127.0.0.1:"), line
        assert "(store memory://)" in line
        assert not line.rstrip().endswith(":8787 (store memory://)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_shipped_configuration_file_is_valid() -> None:
    """deploy/runwire.toml (shown in the configuration reference) gives what it says."""
    path = Path(__file__).resolve().parents[2] / "deploy" / "runwire.toml"
    resolved = config.resolve(relay_parser(), ["--config", str(path)], table="relay", environ={})
    assert resolved.args.store == "redis://redis:6379/0"
    assert resolved.args.check == ["pii"]
    assert resolved.sources["store"] == f"file {path}"
