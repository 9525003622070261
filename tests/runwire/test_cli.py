"""The command line: ``--version``, defaults in every ``--help``, ``--pace``, and a quiet ^C."""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import relay
from relay import _cli as relay_cli
from runwire.cli import build_parser, main


def parsers() -> dict[str, argparse.ArgumentParser]:
    """The ``runwire`` parser and each subcommand's, by name."""
    top = build_parser()
    found = {"runwire": top}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    found["python -m relay"] = relay_cli.build_parser()
    return found


@pytest.mark.parametrize(
    ("argv", "printed"), [(["--version"], "runwire"), (["relay", "--version"], "runwire relay")]
)
def test_version(argv: list[str], printed: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{printed} {metadata.version('runwire')}\n"


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's help as ``--help`` prints it (defaults added), by its last name."""
    formatter = parser._get_formatter()
    return {
        action.option_strings[-1]: formatter._expand_help(action)
        for action in parser._actions
        if action.option_strings and action.help
    }


@pytest.mark.parametrize("name", ["runwire", "relay", "demo", "token", "python -m relay"])
def test_every_help_shows_each_default(name: str) -> None:
    parser = parsers()[name]
    text = parser.format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "(default: [])" not in text
    shown = helps(parser)
    for action in parser._actions:
        default = action.default
        if not action.option_strings or default in (None, False, [], argparse.SUPPRESS):
            continue
        assert "(default" in shown[action.option_strings[-1]], action


def test_the_defaults_people_look_for() -> None:
    relay_help = helps(parsers()["relay"])
    demo_help = helps(parsers()["demo"])
    assert relay_help["--port"] == "port (0 picks a free one) (default: 8787)"
    assert relay_help["--store"].endswith("(default: sqlite:///./runwire.db)")
    assert relay_help["--multitask"].endswith("(default: alongside)")
    assert demo_help["--pace"] == (
        "words a second the demo model streams; lower it to steer at leisure (default: 8.0)"
    )
    assert demo_help["--store"] == "the relay's store (default: sqlite:///./runwire-demo.db)"
    assert demo_help["--session"] == "session id (default: a new one)"
    assert helps(parsers()["token"])["--ttl"] == "seconds until it expires (default: 3600)"


@pytest.mark.parametrize("pace", ["0", "-3", "fast", "1e9"])
def test_a_pace_that_is_no_pace_is_refused(pace: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--pace", pace])
    assert exited.value.code == 2
    assert f"argument --pace: {pace!r} is not a number of words a second" in capsys.readouterr().err


def test_pace_is_words_a_second() -> None:
    args = parsers()["runwire"].parse_args(["demo", "--pace", "2.5"])
    assert args.pace == 2.5
    assert parsers()["runwire"].parse_args(["demo"]).pace == 8.0


@pytest.mark.anyio
async def test_an_anonymous_loopback_relay_says_so_once_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="runwire.relay"):
        async with relay.serve(host="127.0.0.1", port=0, store="memory://"):
            pass
    said = [r for r in caplog.records if "anonymous" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in said] == [
        (
            logging.INFO,
            "the relay is anonymous and listens on loopback only (no secret or public key)",
        )
    ]


@pytest.mark.anyio
async def test_an_anonymous_relay_open_to_the_network_still_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="runwire.relay"):
        async with relay.serve(host="0.0.0.0", port=0, store="memory://", allow_anonymous=True):
            pass
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warned] == [
        "the relay is anonymous (no secret or public key) on 0.0.0.0: every connection has "
        "every right"
    ]


def test_the_demo_says_once_that_its_relay_is_anonymous_and_leaves_quietly_on_ctrl_c(
    tmp_path: Path,
) -> None:
    """Through a pipe the chat reads plain lines; SIGINT (^C) ends it without a traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "runwire", "demo", "--port", "0", "--store", "memory://"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = []
        while not lines or "Type to chat" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, f"the demo ended early: {lines}"
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait(timeout=10)
    text = "".join(lines) + rest
    assert "Traceback" not in text and "WARNING" not in text.upper(), text
    assert text.count("anonymous") == 1, text
    assert (
        "The relay is anonymous and listens on loopback only: only this machine reaches it.\n"
        in text
    )
