"""``runwire relay`` / ``python -m relay``: run a relay from the command line."""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Sequence

import anyio

from transport import checks

from .server import serve

__all__ = ["build_parser", "main", "run"]


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The relay's options (shared by ``runwire relay`` and ``python -m relay``)."""
    parser = parser or argparse.ArgumentParser(prog="runwire relay", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8787, help="port (0 picks a free one)")
    parser.add_argument(
        "--store",
        default="sqlite:///./runwire.db",
        help="memory://, sqlite:///relative.db or sqlite:////absolute.db",
    )
    parser.add_argument(
        "--agent-grace",
        type=float,
        default=30.0,
        help="seconds an agent may be gone before its active Runs end AGENT_LOST",
    )
    parser.add_argument(
        "--max-frame-bytes", type=int, default=1024 * 1024, help="largest frame accepted"
    )
    parser.add_argument(
        "--check",
        action="append",
        default=[],
        choices=sorted(checks.CHECKS),
        metavar="NAME",
        help="an input check every message passes before it is stored (repeatable): "
        + ", ".join(sorted(checks.CHECKS)),
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ...")
    return parser


async def run(args: argparse.Namespace) -> None:
    """Serve until SIGINT or SIGTERM."""
    async with serve(
        host=args.host,
        port=args.port,
        store=args.store,
        agent_grace=args.agent_grace,
        max_frame_bytes=args.max_frame_bytes,
        input_checks=[checks.named(name) for name in args.check],
    ) as server:
        logging.getLogger("runwire.relay").info(
            "relay listening on %s (store %s)", server.url, server.store.url
        )
        print(f"runwire relay listening on {server.url} (store {server.store.url})", flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m relay``."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    anyio.run(run, args)
