"""``docs/howto/securing-the-relay.md`` stays true: its command line parses, its Python block is
``examples/secured_relay.py``'s, and those options start a relay."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

import relay
from relay import _cli as cli

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "howto" / "securing-the-relay.md"
EXAMPLE = ROOT / "examples" / "secured_relay.py"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def test_the_command_line_parses_to_the_documented_options(tmp_path: Path) -> None:
    (command,) = blocks("bash")
    words = shlex.split(command)
    assert words[:2] == ["runwire", "relay"]
    secret = tmp_path / "secret"
    secret.write_text("s" * 40)
    words = [str(secret) if w == "/etc/runwire/secret" else w for w in words[2:]]
    got = cli.options(cli.build_parser().parse_args(words))
    assert got["allowed_origins"] == ["https://app.example.com"]
    assert (got["max_connections"], got["max_connections_per_ip"]) == (5000, 200)
    assert got["request_timeout"] == 10.0


@pytest.mark.anyio
async def test_the_python_block_is_the_example_and_starts_a_relay(tmp_path: Path) -> None:
    (block,) = blocks("python")
    # The page includes the example's options() whole (pymdownx.snippets' section markers).
    assert block.strip() == '--8<-- "examples/secured_relay.py:options"'
    source = EXAMPLE.read_text()
    section = source.split("# --8<-- [start:options]\n", 1)[1].split("# --8<-- [end:options]", 1)[0]
    assert section.startswith("def options(") and "allowed_origins=" in section
    spec = importlib.util.spec_from_file_location("secured_relay", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    secret = tmp_path / "secret"
    secret.write_text("s" * 40 + "\n")
    options = module.options(str(secret))
    options.update(host="127.0.0.1", port=0, store="memory://")
    async with relay.serve(**options) as server:
        assert server.port > 0


def test_the_documented_defaults_are_the_defaults() -> None:
    from relay._options import RelayOptions
    from relay.store import _redis as redis_store
    from transport import _codec as codec

    text = DOC.read_text()
    defaults = RelayOptions()
    assert defaults.max_connections == 10_000 and "| 10,000 |" in text
    assert defaults.max_connections_per_ip is None
    assert defaults.request_timeout == 10.0 and defaults.hello_timeout == 10.0
    assert defaults.max_frame_bytes == 1024 * 1024
    assert codec.MAX_DEPTH == 100 and "**100 levels**" in text
    assert (redis_store.SOCKET_TIMEOUT, redis_store.CONNECT_TIMEOUT) == (1.5, 1.0)
    assert redis_store.HEALTH_TIMEOUT == 0.8
