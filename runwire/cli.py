"""``runwire``: the command line (``relay``, ``demo``, ``token``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from transport import redact

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
    token = sub.add_parser("token", help="print a development token (JWT)")
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
    token.add_argument("--client-id", default=None, help="pin the client id (claim 'client_id')")
    token.add_argument("--ttl", type=float, default=3600, help="seconds until it expires")
    token.add_argument(
        "--secret-file", help="HS256 secret (default: the RUNWIRE_SECRET environment variable)"
    )
    token.add_argument("--private-key-file", help="PEM private key, to sign RS256 / ES256")
    token.add_argument("--algorithm", choices=("HS256", "RS256", "ES256"), default=None)
    args = parser.parse_args(argv)
    if args.command == "relay":
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
        redact.install(*logging.getLogger().handlers)  # every record that reaches the log
        anyio.run(relay_cli.run, args)
    elif args.command == "token":
        print(_token(args))
    elif args.command == "demo":
        from .demo import run_demo

        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        redact.install(*logging.getLogger().handlers)
        anyio.run(run_demo, args)


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
