"""``runwire relay`` / ``python -m relay``: run a relay from the command line."""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import signal
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio

from runwire import config
from transport import checks, logcontext
from transport._runs import MULTITASK_STRATEGIES
from transport.errors import RunwireError

from ._server import serve
from .auth import MAX_TOKEN_BYTES

__all__ = [
    "HelpFormatter",
    "build_parser",
    "main",
    "options",
    "parse",
    "run",
    "setup_logging",
    "version",
]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that ends each option with its default, unless it has none or says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        empty = action.default is None or action.default is False or action.default == []
        if empty or "(default" in text:
            return text
        return super()._get_help_string(action)


def version() -> str:
    """The installed runwire distribution's version."""
    try:
        return metadata.version("runwire")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The relay's options (shared by ``runwire relay`` and ``python -m relay``)."""
    parser = parser or argparse.ArgumentParser(prog="runwire relay", description=__doc__)
    parser.formatter_class = HelpFormatter
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8787, help="port (0 picks a free one)")
    parser.add_argument(
        "--store",
        default="sqlite:///./runwire.db",
        help="memory://, sqlite:///relative.db, sqlite:////absolute.db or redis://host:port/db",
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
    parser.add_argument(
        "--secret-file", help="file holding the HS256 secret tokens are signed with"
    )
    parser.add_argument(
        "--public-key-file", help="PEM public key RS256 / ES256 tokens are verified with"
    )
    parser.add_argument(
        "--max-token-bytes",
        type=int,
        default=MAX_TOKEN_BYTES,
        help="largest token accepted (refused UNAUTHORIZED, reason too_large, past it)",
    )
    parser.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="without a secret or public key, listen on a non-loopback host anyway",
    )
    parser.add_argument(
        "--multitask",
        choices=MULTITASK_STRATEGIES,
        default="alongside",
        help="strategy of prompts that name none",
    )
    parser.add_argument(
        "--thread-access",
        choices=("own", "shared"),
        default="own",
        help="whether sessions whose first prompt says nothing are shared",
    )
    parser.add_argument(
        "--max-concurrent-runs",
        type=int,
        default=None,
        help="Runs going on at once on this relay; more wait queued (default: no limit)",
    )
    parser.add_argument(
        "--max-run-seconds",
        type=float,
        default=None,
        help="seconds a Run may stay active from a start before the relay ends it cancelled "
        "RUN_TIMEOUT (default: no limit; an agent's shorter timeout wins)",
    )
    parser.add_argument(
        "--keepalive-timeout",
        type=float,
        default=10.0,
        help="seconds without an answer to the relay's pings before a connection counts as "
        "dead (an agent's Runs then get --agent-grace)",
    )
    parser.add_argument(
        "--rollup-window",
        type=float,
        default=0.0,
        help="seconds a subscriber's streamed appends may wait to share a frame (default 0)",
    )
    config.add_log_options(parser)
    parser.add_argument("--no-access-log", action="store_true", help="do not log each HTTP request")
    parser.add_argument(
        "--allowed-origins",
        action="append",
        default=None,
        metavar="ORIGINS",
        help="web pages that may connect, comma-separated or repeated: scheme://host[:port|:*] "
        "(default: the relay's own origin, plus http://localhost:* and http://127.0.0.1:* "
        "on an anonymous loopback relay)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=10_000,
        help="connections open at once; more are answered 503 (default: 10000)",
    )
    parser.add_argument(
        "--max-connections-per-ip",
        type=int,
        default=None,
        help="connections open at once from one address; more are answered 429 (default: no cap)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=10.0,
        help="seconds a connection has to send its request, head and body (default: 10)",
    )
    parser.add_argument(
        "--http-idle-timeout",
        type=float,
        default=15.0,
        help="seconds an HTTP connection stays open between requests (keep-alive)",
    )
    parser.add_argument(
        "--ssl-certfile",
        help="PEM certificate chain: serve wss:// and https:// on the port (TLS)",
    )
    parser.add_argument(
        "--ssl-keyfile", help="PEM private key of --ssl-certfile (default: in that file)"
    )
    config.add_config_options(parser)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """The relay's options from ``argv``, ``RUNWIRE_*`` variables and ``--config``.

    ``--print-config`` prints the effective configuration and exits; bad input exits with
    status 2 and one line saying what is wrong."""
    resolved = config.resolve(parser, argv, table="relay")
    args = resolved.args
    config.check_log_level(parser, args)
    if args.print_config:
        print(config.render(parser, resolved, table="relay"), end="")
        raise SystemExit(0)
    return args


def options(args: argparse.Namespace) -> dict[str, Any]:
    """``serve()`` keyword arguments from parsed arguments (reads the key files)."""
    secret = Path(args.secret_file).read_text().strip() if args.secret_file else None
    public_key = Path(args.public_key_file).read_text() if args.public_key_file else None
    return {
        "host": args.host,
        "port": args.port,
        "store": args.store,
        "agent_grace": args.agent_grace,
        "max_frame_bytes": args.max_frame_bytes,
        "secret": secret,
        "public_key": public_key,
        "max_token_bytes": args.max_token_bytes,
        "allow_anonymous": args.allow_anonymous,
        "multitask": args.multitask,
        "thread_access": args.thread_access,
        "max_concurrent_runs": args.max_concurrent_runs,
        "max_run_seconds": args.max_run_seconds,
        "keepalive_timeout": args.keepalive_timeout,
        "rollup_window": args.rollup_window,
        "input_checks": [checks.named(name) for name in args.check],
        "allowed_origins": _split_list(args.allowed_origins),
        "max_connections": args.max_connections,
        "max_connections_per_ip": args.max_connections_per_ip,
        "request_timeout": args.request_timeout,
        "http_idle_timeout": args.http_idle_timeout,
        "ssl_certfile": args.ssl_certfile,
        "ssl_keyfile": args.ssl_keyfile,
    }


def raise_open_files() -> int:
    """Raise this process's soft limit of open files to its hard limit; the limit now.

    Every client connection holds a file descriptor, so the soft limit (often 1,024)
    caps the clients one relay process can hold. A relay at the limit keeps serving its
    connections, but cannot accept a new one until one closes (asyncio retries the
    accept a second later). Raising the hard limit is the system's business
    (``ulimit -Hn``, systemd's ``LimitNOFILE=``, Docker's ``--ulimit nofile=``).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logging.getLogger("runwire.relay").warning(
                "could not raise the open files limit from %d to %d: %s", soft, target, exc
            )
    return soft


def _split_list(values: list[str] | None) -> list[str] | None:
    """A repeatable, comma-separated option's items (None when it was not given)."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


async def run(args: argparse.Namespace) -> None:
    """Serve until SIGINT or SIGTERM (exits with status 2, printing one line, when the relay
    cannot start: a configuration error, a port in use, a store that cannot start)."""
    async with AsyncExitStack() as stack:
        try:
            server = await stack.enter_async_context(serve(**options(args)))
        except (OSError, ValueError, RunwireError) as exc:
            # A port in use, a bad option, a store that cannot start (a missing directory, a
            # file that is no database, an SQLite file another relay has): one line, no trace.
            print(f"runwire relay: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        limit = raise_open_files()
        logging.getLogger("runwire.relay").info(
            "relay listening on %s (store %s); at most about %d connections (open files limit)",
            server.url,
            server.store.url,
            limit,
        )
        print(f"runwire relay listening on {server.url} (store {server.store.url})", flush=True)
        # What starting allocated (modules, the store, the server) lives as long as the
        # process: out of the collector's reach, a full collection walks only what serving
        # holds, not ~50,000 more objects (a pause of 15-40 ms that lands in every tail).
        gc.collect()
        gc.freeze()
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m relay``."""
    args = parse(build_parser(), sys.argv[1:] if argv is None else argv)
    setup_logging(args)
    anyio.run(run, args)


def setup_logging(args: argparse.Namespace) -> None:
    """The log as ``--log-level``, ``--log-format`` and ``--no-access-log`` say."""
    logcontext.setup(args.log_level, args.log_format, access_log=not args.no_access_log)
