"""Network cuts between the clients and the relay, and between the workers and the relay.

A ``LinkProxy`` (tests/integration/link_proxy.py) stands in the cut side's path:
``cut()`` aborts every connection through it and refuses new ones until
``heal()``. Each cut comes while every session streams, and the devices steer
their Runs during it. What a cut exercises depends on its length against the
relay's ``agent_grace``, so the lengths are kinds, scaled with the grace:

* ``blip`` (0.5 s): the SDKs' first reconnects are refused; they resume from
  their serial, and the relay keeps the workers' Runs.
* ``under-grace`` (5 s of the default 30 s grace; half the grace in CI):
  reconnects back off to their cap, still within the grace: a worker comes back
  to its own Runs and finishes them.
* ``past-grace`` (40 s of 30 s; four thirds of the grace in CI): longer than the
  grace. Cut off from the workers, the relay ends their Runs (``AGENT_LOST``, or
  hands a durable one on, which the worker adopts when it is back); cut off from
  the clients, the Runs end meanwhile and the devices catch up on all of it.

CI runs the three kinds against a 2 s grace (``rig.GRACE``); ``RUNWIRE_CHAOS_SOAK=1``
runs the issue's 0.5, 5 and 40 s against the default 30 s. A cut here is a refused
link (the proxy closes what it held). A silent partition, where packets are
dropped, is found by the keepalive and is not simulated here.
"""

from __future__ import annotations

import anyio
import pytest

from tests.cluster.conftest import Cluster
from tests.integration.link_proxy import LinkProxy

from .checker import Ledger
from .rig import CUTS, GRACE, SOAK, Fleet, port_of, wait_acks, workers

pytestmark = pytest.mark.anyio

SESSIONS = 30 if SOAK else 8
WORDS = (40, 80)
"""Words per reply: a Run streams for a few seconds, long enough to be cut mid-stream."""


@pytest.mark.parametrize("side", ["client", "agent"])
@pytest.mark.parametrize("kind", list(CUTS))
async def test_a_cut_loses_nothing_and_hangs_no_run(side: str, kind: str) -> None:
    cluster = Cluster(store="memory://")
    node = await cluster.start_node(GRACE)
    proxy = LinkProxy(port_of(node))
    await proxy.start()
    ledger = Ledger()
    client_url = proxy.url if side == "client" else node.url
    agent_url = proxy.url if side == "agent" else node.url
    try:
        async with (
            workers(agent_url, ledger, durable=False),
            workers(agent_url, ledger, n=1, durable=True),
            Fleet(client_url, ledger, f"cut-{side}-{kind}", SESSIONS) as fleet,
        ):
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.traffic, 1, WORDS)
                await wait_acks(ledger, 15 * SESSIONS)  # every session streams
                await proxy.cut()
                steers = fleet.steer_all("during-the-cut")
                await anyio.sleep(CUTS[kind])  # the cut's length, not a wait for something
                await proxy.heal()
                await fleet.published(steers)
            await fleet.settle(node.url)
            counts = await fleet.counts(node.url)
    finally:
        await proxy.aclose()
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    ended = set(fleet.runs.values())
    if side == "agent" and kind == "past-grace":
        assert "error" in ended  # the non-durable workers' Runs ended AGENT_LOST
    else:
        assert ended == {"complete"}  # the relay kept every Run: nothing gave up
    if side == "client":
        assert all(d.session.link.conn.connects == 2 for d in fleet.devices)
