"""``runwire``: the command line (``relay``, ``demo``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``runwire`` console script."""
    from relay import cli as relay_cli

    parser = argparse.ArgumentParser(prog="runwire", description="runwire relay and tools")
    sub = parser.add_subparsers(dest="command", required=True)
    relay_cli.build_parser(sub.add_parser("relay", help="run a relay"))
    demo = sub.add_parser("demo", help="relay + demo agent + chat page + terminal chat, no API key")
    demo.add_argument("--port", type=int, default=8787)
    demo.add_argument("--store", default="sqlite:///./runwire-demo.db")
    demo.add_argument("--session", default=None, help="session id (default: a new one)")
    demo.add_argument(
        "--no-chat", action="store_true", help="serve the chat page only, no terminal chat"
    )
    args = parser.parse_args(argv)
    if args.command == "relay":
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
        anyio.run(relay_cli.run, args)
    elif args.command == "demo":
        from .demo import run_demo

        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        anyio.run(run_demo, args)
