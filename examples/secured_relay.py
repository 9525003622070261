"""A relay facing the internet: tokens, the pages that may use it, and its limits.

Run it with a secret file of 32 bytes or more (``python examples/secured_relay.py SECRET_FILE``);
``docs/howto/securing-the-relay.md`` explains each option.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

import relay


# --8<-- [start:options]
def options(secret_file: str) -> dict[str, Any]:
    """The ``relay.serve`` keyword arguments of a relay facing the internet."""
    return dict(
        host="0.0.0.0",
        port=8787,
        store="sqlite:///./runwire.db",
        secret=Path(secret_file).read_text().strip(),  # 32 bytes or more
        allowed_origins=["https://app.example.com"],
        max_connections=5_000,
        max_connections_per_ip=200,
        request_timeout=10.0,
    )


# --8<-- [end:options]


async def main(secret_file: str) -> None:
    async with relay.serve(**options(secret_file)) as server:
        print(f"relay listening on {server.url}", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
