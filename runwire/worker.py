"""``runwire worker module:attr``: run an agent worker the way ``uvicorn app:app`` runs an app.

``attr`` names an ``agent_side.Agent`` or a factory that returns one. A factory is
called with the Agent's options as keywords (``url``, ``token``, ``name``,
``client_id``, ``durable``, ``max_iterations``), taken from flags, ``RUNWIRE_*``
variables or the ``[worker]`` table of ``--config``. An Agent built already keeps
its own options. SIGTERM or SIGINT stops the worker gracefully (``Agent.shutdown``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from agent_side import Agent
from transport import logcontext

from . import config

__all__ = ["AGENT_OPTIONS", "add_arguments", "load", "main", "run"]

log = logging.getLogger("runwire.worker")

AGENT_OPTIONS = ("url", "token", "name", "client_id", "durable", "max_iterations")
"""The worker's options a factory receives as keywords."""


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``runwire worker``."""
    parser.add_argument(
        "app", nargs="?", help="module:attr, an Agent or a factory returning one (RUNWIRE_APP)"
    )
    parser.add_argument("--url", default="ws://127.0.0.1:8787", help="the relay's URL")
    parser.add_argument("--token", help="the worker's token (prefer --token-file)")
    parser.add_argument("--token-file", help="a file holding the worker's token")
    parser.add_argument("--name", default="default", help="the agent name it serves")
    parser.add_argument("--client-id", help="the client id it connects as")
    parser.add_argument("--durable", action="store_true", help="Runs checkpoint every step")
    parser.add_argument(
        "--max-iterations", type=int, help="model calls a turn may make (default: no limit)"
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        help="seconds Runs may go on after SIGTERM before they are handed over or ended",
    )
    parser.add_argument(
        "--app-dir", default=".", help="directory put first on sys.path to import the app"
    )
    config.add_log_options(parser)
    config.add_config_options(parser)
    return parser


def load(spec: str, options: dict[str, Any], explicit: Sequence[str]) -> Agent:
    """The Agent ``module:attr`` names (a factory is called with ``options``).

    Raises ``ValueError`` with one line saying what is wrong."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{spec!r} is not module:attr (for example myapp.agents:agent)")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, Agent):
        if explicit:
            names = ", ".join("--" + n.replace("_", "-") for n in explicit)
            raise ValueError(f"{spec} is an Agent built already: {names} apply to a factory only")
        return target
    if not callable(target):
        raise ValueError(f"{spec} is neither an Agent nor a factory returning one")
    built = target(**options)
    if inspect.isawaitable(built):
        raise ValueError(f"{spec} is a coroutine function; make the factory a plain function")
    if not isinstance(built, Agent):
        raise ValueError(f"{spec}() returned {type(built).__name__}, not an Agent")
    return built


async def run(agent: Agent, grace: float) -> None:
    """Serve until SIGTERM or SIGINT, then shut down within ``grace`` seconds."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with agent:
            print(f"runwire worker serving agent {agent.name!r} on {agent.url}", flush=True)
            async for signum in signals:
                name = signal.Signals(signum).name
                print(f"runwire worker stopping ({name}, grace {grace:g} s)", flush=True)
                break
            await agent.shutdown(grace)
    print("runwire worker stopped", flush=True)


def main(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """``runwire worker``: exits with status 2 and one line on bad input."""
    resolved = config.resolve(parser, argv, table="worker")
    args = resolved.args
    if args.print_config:
        print(config.render(parser, resolved, table="worker"), end="")
        raise SystemExit(0)
    if not args.app:
        parser.error("give the app as module:attr (or RUNWIRE_APP, or app in [worker])")
    if args.token_file and args.token:
        parser.error("give --token or --token-file, not both")
    if args.shutdown_grace < 0:
        parser.error("--shutdown-grace: must be 0 or more")
    config.check_log_level(parser, args)
    logcontext.setup(args.log_level, args.log_format)  # tokens redacted
    try:
        token = Path(args.token_file).read_text().strip() if args.token_file else args.token
    except OSError as exc:
        parser.error(f"--token-file {args.token_file}: {exc.strerror or exc}")
    options: dict[str, Any] = {name: getattr(args, name) for name in AGENT_OPTIONS}
    options["token"] = token
    explicit = [
        name
        for name in (*AGENT_OPTIONS, "token_file")
        if resolved.sources.get(name, "default") != "default"
    ]
    sys.path.insert(0, os.path.abspath(args.app_dir))
    try:
        agent = load(args.app, options, explicit)
    except ValueError as exc:
        parser.error(str(exc))
    anyio.run(run, agent, args.shutdown_grace)
