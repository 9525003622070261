"""Extras: a client or agent install pulls none of the relay's server-only dependencies.

The metadata of the installed distribution says which requirement belongs to
which extra. The import tests run Python with the relay-only modules refused
by a ``sys.meta_path`` finder, as on an install without the extras.
"""

from __future__ import annotations

import functools
import re
import signal
import subprocess
import sys
import textwrap
from importlib import metadata

import anyio
import pytest

import agent_side
import relay
from runwire.demo import DEMO_TOOLS, demo_model

RELAY_ONLY = {"prometheus-client", "pyjwt"}
"""The relay's server-only distributions (the ``relay`` extra)."""

BLOCKER = textwrap.dedent(
    """
    import sys

    class Refuse:
        def __init__(self, names):
            self.names = names

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Refuse(set(sys.argv[1].split(","))))
    """
)


def requirements(extra: str | None) -> set[str]:
    """The distribution names runwire requires, in one extra or (None) without any."""
    found = set()
    for requirement in metadata.requires("runwire") or []:
        spec, _, marker = requirement.partition(";")
        in_extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", marker)
        if (in_extra.group(1) if in_extra else None) == extra:
            name = re.match(r"[A-Za-z0-9._-]+", spec.strip())
            assert name is not None
            found.add(name.group(0).lower().replace("_", "-"))
    return found


def blocked(modules: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python that refuses to import ``modules`` (comma-separated)."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code), modules],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_core_requirements_leave_the_server_dependencies_out() -> None:
    core = requirements(None)
    assert {"websockets", "pydantic", "anyio", "orjson", "jsonschema"} <= core
    assert not core & RELAY_ONLY
    assert "prompt-toolkit" not in core


@pytest.mark.parametrize("extra", ["relay", "redis", "demo", "dev"])
def test_each_server_extra_carries_the_relay(extra: str) -> None:
    assert RELAY_ONLY <= requirements(extra)


def test_the_demo_and_dev_extras_carry_the_terminal_chat() -> None:
    assert "prompt-toolkit" in requirements("demo")
    assert "prompt-toolkit" in requirements("dev")


def test_clients_and_agents_import_without_the_relay_extras() -> None:
    done = blocked(
        "jwt,prometheus_client,cryptography,prompt_toolkit,redis,hiredis",
        """
        import agent_side, client_side, transport
        print("imported", agent_side.steering_loop.__name__, client_side.connect.__name__)
        assert "relay" not in sys.modules, "a client or agent import pulled the relay in"
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "imported steering_loop connect" in done.stdout


@pytest.mark.parametrize("missing", ["jwt", "prometheus_client"])
def test_the_relay_without_its_extra_says_which_to_install(missing: str) -> None:
    done = blocked(
        missing,
        """
        try:
            import relay
        except ImportError as exc:
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert f"the runwire relay needs the 'relay' extra ({missing} is missing)" in done.stdout
    assert "pip install 'runwire[relay]'" in done.stdout


def test_the_command_without_the_relay_gives_its_version_and_says_what_is_missing() -> None:
    code = """
        from runwire.cli import main
        try:
            main(sys.argv[2:])
        except SystemExit as exc:
            print("exit", exc.code)
        """
    version = blocked("jwt", code.replace("sys.argv[2:]", "['--version']"))
    assert version.stdout.strip().splitlines() == [
        f"runwire {metadata.version('runwire')}",
        "exit 0",
    ]
    command = blocked("jwt", code.replace("sys.argv[2:]", "['relay', '--port', '0']"))
    assert command.stdout.strip() == "exit 2"
    assert command.stderr.strip() == (
        "runwire relay: the runwire relay needs the 'relay' extra (jwt is missing): "
        "pip install 'runwire[relay]'"
    )


def test_the_terminal_chat_without_prompt_toolkit_names_the_demo_extra() -> None:
    done = blocked(
        "prompt_toolkit",
        """
        from runwire.cli import main
        try:
            main(["demo", "--port", "0", "--store", "memory://"])
        except SystemExit as exc:
            print("exit", exc.code)
        """,
    )
    assert done.stdout.strip() == "exit 2", done.stderr
    assert "runwire demo: the demo's terminal chat needs prompt_toolkit" in done.stderr
    assert "pip install 'runwire[demo]'" in done.stderr


@pytest.mark.anyio
async def test_a_client_without_the_relay_extras_talks_to_a_relay() -> None:
    model = functools.partial(demo_model, delay=0)
    code = """
        import anyio, client_side

        async def main(url):
            async with client_side.connect(url, "packaging") as session:
                run = await session.send("Plan 2 days in Oslo")
                print((await run.result()).status)
                print(session.view.messages()[-1].message.text().splitlines()[0])

        anyio.run(main, sys.argv[2])
        """
    with anyio.fail_after(60):
        async with relay.serve(port=0, store="memory://") as server:
            agent = agent_side.Agent(server.url, name="default")

            @agent.on_run
            async def handle(run: agent_side.Run) -> None:
                await agent_side.steering_loop(run, model, tools=DEMO_TOOLS)

            async with agent:
                done = await anyio.to_thread.run_sync(
                    lambda: subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            BLOCKER + textwrap.dedent(code),
                            "jwt,prometheus_client,cryptography,prompt_toolkit,relay",
                            server.url,
                        ],
                        capture_output=True,
                        text=True,
                        timeout=50,
                    )
                )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["complete", "Here is a 2-day plan for Oslo."]


def test_the_demo_page_alone_runs_without_prompt_toolkit() -> None:
    code = """
        from runwire.cli import main
        main(["demo", "--no-chat", "--port", "0", "--store", "memory://"])
        print("left", "prompt_toolkit" in sys.modules)
        """
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code), "prompt_toolkit"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Chat in a browser: http://127.0.0.1:"):
            line = proc.stdout.readline()
            assert line, f"the demo ended early: {lines}"
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == "left False\n"
    finally:
        proc.kill()
        proc.wait(timeout=10)
