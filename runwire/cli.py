"""``runwire``: the command line (``relay``, ``worker``, ``demo``, ``token``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import anyio

from transport import redact

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``runwire`` command's parser: ``relay``, ``demo`` and ``token`` (needs the relay)."""
    from relay import _cli as relay_cli

    from .demo import DEFAULT_PACE

    formatter = relay_cli.HelpFormatter
    parser = argparse.ArgumentParser(
        prog="runwire", description="runwire relay and tools", formatter_class=formatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    relay_cli.build_parser(sub.add_parser("relay", help="run a relay"))
    demo = sub.add_parser(
        "demo",
        help="relay + demo agent + chat page + terminal chat, no API key",
        description="A relay, a demo agent, its chat page and a terminal chat, in one process.",
        formatter_class=formatter,
    )
    demo.add_argument("--port", type=int, default=8787, help="port (0 picks a free one)")
    demo.add_argument("--store", default="sqlite:///./runwire-demo.db", help="the relay's store")
    demo.add_argument("--session", default=None, help="session id (default: a new one)")
    demo.add_argument(
        "--pace",
        type=_pace,
        default=DEFAULT_PACE,
        help="words a second the demo model streams; lower it to steer at leisure",
    )
    demo.add_argument(
        "--no-chat", action="store_true", help="serve the chat page only, no terminal chat"
    )
    token = sub.add_parser(
        "token",
        help="print a development token (JWT)",
        description="Print a development token (a JWT) for a relay with a secret or a key.",
        formatter_class=formatter,
    )
    token.add_argument("--user", required=True, help="the user id (claim 'sub')")
    token.add_argument(
        "--session",
        action="append",
        required=True,
        help="session-id pattern ('*' wildcards); repeat for several",
    )
    token.add_argument(
        "--cap",
        required=True,
        help="capabilities, comma-separated: subscribe,publish,steer,cancel,cancel-any,agent",
    )
    from . import worker as worker_cli

    worker_cli.add_arguments(
        sub.add_parser(
            "worker",
            help="run an agent worker: runwire worker module:agent",
            description="Run an agent worker (module:attr names an Agent or a factory).",
            formatter_class=formatter,
        )
    )
    token.add_argument("--client-id", default=None, help="pin the client id (claim 'client_id')")
    token.add_argument("--ttl", type=float, default=3600, help="seconds until it expires")
    token.add_argument(
        "--secret-file", help="HS256 secret (default: the RUNWIRE_SECRET environment variable)"
    )
    token.add_argument("--private-key-file", help="PEM private key, to sign RS256 / ES256")
    token.add_argument(
        "--algorithm",
        choices=("HS256", "RS256", "ES256"),
        default=None,
        help="signing algorithm (default: HS256 with a secret, read from the key otherwise)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``runwire`` console script."""
    try:
        from relay import _cli as relay_cli
    except ImportError as exc:
        _without_relay(argv, exc)
        return
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command == "relay":
        # Only --version comes before the subcommand, and it exits: the rest is the relay's.
        relay_parser = _subparser(parser, "relay")
        args = relay_cli.parse(relay_parser, argv[argv.index("relay") + 1 :])
        relay_cli.setup_logging(args)
        anyio.run(relay_cli.run, args)
    elif args.command == "worker":
        from . import worker as worker_cli

        worker_cli.main(_subparser(parser, "worker"), argv[argv.index("worker") + 1 :])
    elif args.command == "token":
        print(_token(args))
    elif args.command == "demo":
        from .demo import run_demo

        if not args.no_chat:
            try:
                from . import terminal  # noqa: F401  (prompt_toolkit, of the demo extra)
            except ImportError as exc:
                print(f"runwire demo: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
        # Log lines go to whatever sys.stderr is when written: above the chat's prompt.
        logging.basicConfig(level=logging.WARNING, stream=_Stderr())
        redact.install(*logging.getLogger().handlers)
        try:
            anyio.run(run_demo, args)
        except KeyboardInterrupt:
            pass  # a ^C before the demo's own handler was in place: leave quietly


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``."""
    # argparse has no public way to reach a subcommand's parser from the top one.
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise LookupError(name)


def _without_relay(argv: Sequence[str] | None, exc: ImportError) -> None:
    """``runwire`` on an install without the ``relay`` extra: a version, or why not."""
    parser = argparse.ArgumentParser(prog="runwire", description="runwire relay and tools")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("command", choices=("relay", "demo", "token", "worker"))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "worker":  # a worker needs the agent SDK only
        from . import worker as worker_cli

        worker_parser = argparse.ArgumentParser(prog="runwire worker")
        worker_cli.main(worker_cli.add_arguments(worker_parser), args.args)
        return
    print(f"runwire {args.command}: {exc}", file=sys.stderr)
    raise SystemExit(2)


def _version() -> str:
    try:
        return metadata.version("runwire")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _pace(text: str) -> float:
    """``--pace``: a positive number of words a second."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 10_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of words a second (0 to 10000)")
    return value


class _Stderr:
    """A stream that writes to the ``sys.stderr`` of the moment (prompt_toolkit patches it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _token(args: argparse.Namespace) -> str:
    """Mint the token ``runwire token`` prints; exits with status 2 on bad input."""
    from relay.auth import mint_token

    caps = [c.strip() for c in args.cap.split(",") if c.strip()]
    try:
        private_key = Path(args.private_key_file).read_text() if args.private_key_file else None
        secret = None
        if private_key is None:
            if args.secret_file:
                secret = Path(args.secret_file).read_text().strip()
            else:
                secret = os.environ.get("RUNWIRE_SECRET")
            if not secret:
                raise ValueError("give --secret-file, --private-key-file or RUNWIRE_SECRET")
        return mint_token(
            user=args.user,
            sessions=dict.fromkeys(args.session, caps),
            secret=secret,
            private_key=private_key,
            algorithm=args.algorithm,
            ttl=args.ttl,
            client_id=args.client_id,
        )
    except (OSError, ValueError) as exc:
        print(f"runwire token: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
