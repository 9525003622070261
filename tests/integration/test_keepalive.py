"""Keepalive: a silently partitioned agent (its link blackholed: packets dropped, no FIN or
RST) is found by the relay within ``keepalive_timeout``, then gets ``agent_grace``; the
agent finds its own dead link as fast and stops its Runs with ``AGENT_LOST``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import Run
from transport._keepalive import keepalive
from transport.errors import AGENT_LOST, RunwireError

from .harness import wait_until
from .link_proxy import LinkProxy

pytestmark = pytest.mark.anyio


async def test_a_blackholed_agent_is_found_by_the_relay_and_stops_its_own_run() -> None:
    reasons: list[object] = []
    chunks = 0

    async def model(run: Run) -> AsyncIterator[str]:
        nonlocal chunks
        while not run.abort_signal.aborted:
            chunks += 1
            yield "word "
            await anyio.sleep(0.01)

    async def handle(run: Run) -> None:
        await run.start()
        await run.pipe(model(run))
        reasons.append(run.abort_signal.reason)

    async with relay.serve(
        port=0, store="memory://", agent_grace=0.3, keepalive_timeout=0.5
    ) as server:
        proxy = LinkProxy(server.port)
        await proxy.start()
        try:
            worker = agent_side.Agent(proxy.url, keepalive_timeout=0.5)
            worker.on_run(handle)
            async with worker, client_side.connect(server.url, "s") as session:
                run = await session.send("talk")
                await wait_until(lambda: chunks > 3)
                proxy.blackhole()
                with anyio.fail_after(10):  # the default keepalive alone would take 40 s
                    result = await run.result()
                    await wait_until(lambda: bool(reasons))
                assert result.status == "error"
                info = session.view.run(run.run_id)
                assert info is not None and info.error is not None
                assert info.error["code"] == AGENT_LOST
                [reason] = reasons
                assert isinstance(reason, RunwireError) and reason.code == AGENT_LOST
                assert reason.details == {"grace_seconds": 0.3}
        finally:
            await proxy.aclose()


async def test_a_run_goes_on_when_the_link_heals_within_the_grace() -> None:
    """A short silence is no loss: the agent's Run is not stopped while the relay would
    still take it back."""
    release = anyio.Event()

    async def handle(run: Run) -> None:
        await run.start()
        await release.wait()
        assert not run.abort_signal.aborted
        await run.end()

    async with relay.serve(port=0, store="memory://", agent_grace=30) as server:
        proxy = LinkProxy(server.port)
        await proxy.start()
        try:
            worker = agent_side.Agent(proxy.url, keepalive_timeout=0.5)
            worker.on_run(handle)
            async with worker, client_side.connect(server.url, "s") as session:
                run = await session.send("hi")
                await wait_until(lambda: run.status == "active")
                proxy.blackhole()
                await wait_until(lambda: not worker.connection.connected)
                await proxy.heal()
                await wait_until(lambda: worker.connection.connected)
                release.set()
                with anyio.fail_after(10):
                    result = await run.result()
                assert result.status == "complete"
        finally:
            await proxy.aclose()


def test_the_keepalive_timeout_bounds_pings_and_close() -> None:
    ping = keepalive(10, close_max=2)
    assert ping.ping_interval + ping.ping_timeout + ping.close_timeout <= 10
    assert keepalive(1, close_max=2).close_timeout == pytest.approx(0.2)
    with pytest.raises(ValueError):
        keepalive(0, close_max=2)


async def test_the_relay_closes_a_blackholed_client_within_its_keepalive_timeout() -> None:
    async with relay.serve(port=0, store="memory://", keepalive_timeout=0.5) as server:
        proxy = LinkProxy(server.port)
        await proxy.start()
        try:
            async with client_side.connect(proxy.url, "s", keepalive_timeout=60):
                await wait_until(lambda: len(server.hub.peers) == 1)
                proxy.blackhole()
                # The client pings too seldom to notice: the relay's own pings find it.
                await wait_until(lambda: not server.hub.peers, timeout=10)
        finally:
            await proxy.aclose()


def test_the_relay_cli_takes_the_new_options() -> None:
    from relay import _cli as cli

    args = cli.build_parser().parse_args(["--max-run-seconds", "90", "--keepalive-timeout", "4"])
    options = cli.options(args)
    assert (options["max_run_seconds"], options["keepalive_timeout"]) == (90.0, 4.0)
    defaults = cli.options(cli.build_parser().parse_args([]))
    assert (defaults["max_run_seconds"], defaults["keepalive_timeout"]) == (None, 10.0)
