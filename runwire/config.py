"""Options from flags, environment variables and a TOML file, derived from an argparse parser.

Every option ``--some-flag`` of a command is also the environment variable
``RUNWIRE_SOME_FLAG`` and the key ``some-flag`` of the command's table (``[relay]``,
``[worker]``) in the file ``--config`` names. A flag beats the environment, the
environment beats the file, and the file beats the default. Bad values and unknown
keys are errors that exit with status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from transport import logcontext

__all__ = [
    "ENV_PREFIX",
    "Resolved",
    "add_config_options",
    "env_name",
    "option_actions",
    "render",
    "resolve",
    "toml_key",
]

ENV_PREFIX = "RUNWIRE_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# argparse names its action classes and a parser's actions privately, with no public way to
# list a parser's options: this module reads them, and so does runwire.cli.
_LISTS = (argparse._AppendAction, argparse._ExtendAction)  # noqa: SLF001
_SECRET_WORDS = ("token", "secret", "password")
# The options that choose where configuration comes from are not configuration themselves.
_META = {"config", "print_config", "help", "version"}


def add_config_options(parser: argparse.ArgumentParser, *, print_config: bool = True) -> None:
    """Add ``--config FILE`` (and ``--print-config``) to ``parser``."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of options (flags beat RUNWIRE_* variables, which beat the file)",
    )
    if print_config:
        parser.add_argument(
            "--print-config",
            action="store_true",
            help="print the effective configuration, secrets masked, and exit",
        )


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-level`` and ``--log-format``, the same for every command that logs."""
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ...")
    parser.add_argument(
        "--log-format",
        choices=logcontext.FORMATS,
        default="text",
        help="text: time, level, logger, message; json: one object a line",
    )


def check_log_level(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with status 2 and one line when ``--log-level`` names no level."""
    if args.log_level.upper() not in logging.getLevelNamesMapping():
        parser.error(f"--log-level: unknown level {args.log_level!r}")


def option_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's options and positionals that take part in configuration (not help,
    version or config)."""
    return [
        action
        for action in parser._actions  # noqa: SLF001
        if action.dest not in _META
        and action.dest != argparse.SUPPRESS
        and not isinstance(action, argparse._SubParsersAction)  # noqa: SLF001
    ]


def _long_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.dest.replace("_", "-")
    longs = [s for s in action.option_strings if s.startswith("--")]
    return (longs or action.option_strings)[0].lstrip("-")


def env_name(action: argparse.Action) -> str:
    """``--secret-file`` -> ``RUNWIRE_SECRET_FILE`` (a positional ``app`` -> ``RUNWIRE_APP``)."""
    return ENV_PREFIX + _long_name(action).upper().replace("-", "_")


def toml_key(action: argparse.Action) -> str:
    """``--secret-file`` -> ``secret-file`` (``secret_file`` is accepted as well)."""
    return _long_name(action)


@dataclass(frozen=True)
class Resolved:
    """Parsed options and the source of each: ``flag``, ``env NAME``, ``file PATH``, ``default``."""

    args: argparse.Namespace
    sources: dict[str, str]


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _given_on_command_line(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The dests the command line sets (parsing over a namespace of markers)."""
    marked = argparse.Namespace()
    for action in option_actions(parser):
        # List and count actions build on what the namespace holds: None means "nothing yet".
        listy = isinstance(action, (*_LISTS, argparse._CountAction))  # noqa: SLF001
        setattr(marked, action.dest, None if listy else _UNSET)
    parsed = parser.parse_args(list(argv), namespace=marked)
    return {
        action.dest
        for action in option_actions(parser)
        if getattr(parsed, action.dest) is not _UNSET and getattr(parsed, action.dest) is not None
    }


def _convert(action: argparse.Action, value: object, where: str) -> object:
    """A value from the environment (a string) or the file (TOML) as the flag would give it."""
    if action.nargs == 0:  # store_true / store_false / store_const
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            value = value.strip().lower() in _TRUE
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return action.const if value else action.default
    if isinstance(action, _LISTS):
        if isinstance(value, str):
            items: list[object] = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, list):
            items = list(value)
        else:
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return [_one(action, item, where) for item in items]
    return _one(action, value, where)


def _one(action: argparse.Action, value: object, where: str) -> object:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: expected a single value, got {value!r}")
    text = str(value)
    convert = action.type if callable(action.type) else str
    try:
        result = convert(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"{where}: {exc}") from None
    except (ValueError, TypeError):
        kind = getattr(convert, "__name__", "")
        raise ValueError(f"{where}: invalid {kind} value {text!r}") from None
    if action.choices is not None and result not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ValueError(f"{where}: {text!r} is not one of {choices}")
    return result


def _read_file(path: str, table: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config {path}: not valid TOML: {exc}") from None
    loose = sorted(k for k, v in document.items() if not isinstance(v, dict))
    if loose:
        raise ValueError(f"--config {path}: {', '.join(loose)} must be in a table ([{table}])")
    section = document.get(table, {})
    if not isinstance(section, dict):
        raise ValueError(f"--config {path}: [{table}] must be a table")
    return section


def resolve(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    *,
    table: str,
    environ: Mapping[str, str] | None = None,
) -> Resolved:
    """Parse ``argv`` and fill what it leaves out from ``environ`` then ``[table]`` of
    ``--config``. A bad value or an unknown key exits with status 2 (``parser.error``)."""
    environ = os.environ if environ is None else environ
    args = parser.parse_args(list(argv))
    given = _given_on_command_line(parser, argv)
    actions = option_actions(parser)
    config_path = getattr(args, "config", None) or environ.get(ENV_PREFIX + "CONFIG") or None
    file_values: dict[str, tuple[object, str]] = {}
    if config_path:
        try:
            section = _read_file(config_path, table)
        except ValueError as exc:
            parser.error(str(exc))
        by_key = {toml_key(a): a for a in actions}
        unknown = sorted(k for k in section if k.replace("_", "-") not in by_key)
        if unknown:
            known = ", ".join(sorted(by_key))
            parser.error(
                f"--config {config_path}: unknown key(s) in [{table}]: "
                f"{', '.join(unknown)} (known: {known})"
            )
        for key, value in section.items():
            file_values[by_key[key.replace("_", "-")].dest] = (value, key)
    sources: dict[str, str] = {}
    try:
        for action in actions:
            name = env_name(action)
            if action.dest in given:
                sources[action.dest] = "flag"
            elif name in environ:
                value = _convert(action, environ[name], name)
                setattr(args, action.dest, value)
                sources[action.dest] = f"env {name}"
            elif action.dest in file_values:
                raw, key = file_values[action.dest]
                where = f"--config {config_path}: [{table}] {key}"
                setattr(args, action.dest, _convert(action, raw, where))
                sources[action.dest] = f"file {config_path}"
            else:
                sources[action.dest] = "default"
    except ValueError as exc:
        parser.error(str(exc))
    return Resolved(args, sources)


def is_secret(action: argparse.Action) -> bool:
    """Options whose value is itself a credential (a token, a password), not a path to one."""
    return _long_name(action).rsplit("-", 1)[-1] in _SECRET_WORDS


def mask(value: object) -> object:
    """Hide the password of a URL (``redis://:pw@host`` -> ``redis://:***@host``)."""
    if not isinstance(value, str) or "://" not in value or "@" not in value:
        return value
    parts = urlsplit(value)
    if parts.password is None:
        return value
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def render(parser: argparse.ArgumentParser, resolved: Resolved, *, table: str) -> str:
    """The effective configuration as TOML, each line commented with its source."""
    lines = [f"[{table}]"]
    for action in option_actions(parser):
        value = getattr(resolved.args, action.dest)
        if value is None:
            text = "# " + toml_key(action) + " is not set"
        else:
            shown: object = "***" if is_secret(action) and value else mask(value)
            if isinstance(shown, (list, tuple)):
                shown = [mask(v) for v in shown]
            text = f"{toml_key(action)} = {_toml(shown)}"
        lines.append(f"{text}  # {resolved.sources[action.dest]}")
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
