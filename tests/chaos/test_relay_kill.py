"""A SQLite relay SIGKILLed mid-stream, restarted on the same file and port.

Twenty sessions (sixty in the soak) stream and steer through one relay process
while two in-process workers answer. The relay is killed with SIGKILL while
every session has a Run going (twice; five times in the soak), every device
steers its Run while the relay is dead, and the relay is started again on the
same file and port: the clients and the workers reconnect by themselves, re-send
what was not acknowledged and resume from the serial they held. Nothing acknowledged may be
lost, nothing stored twice, no device may see a gap, and every Run must end.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from client_side import Delivery
from tests.cluster.conftest import Cluster

from .checker import Ledger
from .rig import GRACE, SOAK, Device, Fleet, port_of, wait_acks, workers

pytestmark = pytest.mark.anyio

KILLS = 5 if SOAK else 2
DOWN = 0.5
"""Seconds the relay stays dead: the devices steer meanwhile, so those publishes wait."""


async def test_a_sqlite_relay_sigkilled_mid_stream_loses_nothing(tmp_path: Path) -> None:
    cluster = Cluster(store=f"sqlite:///{tmp_path / 'chaos.db'}")
    node = await cluster.start_node(GRACE)
    port = port_of(node)
    ledger = Ledger()
    steers: list[tuple[Device, Delivery]] = []
    try:
        async with workers(node.url, ledger), Fleet(node.url, ledger, "kill") as fleet:
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.traffic)
                for _ in range(KILLS):
                    await fleet.connected()  # so this kill drops every device again
                    await wait_acks(ledger, 300)  # every session is streaming by now
                    node.kill()
                    steers.extend(fleet.steer_all("while-the-relay-is-dead"))
                    await anyio.sleep(DOWN)  # how long it stays dead, not a wait
                    node = await cluster.start_node(GRACE, "--port", str(port))
                await fleet.published(steers)
            await fleet.settle()
            counts = await fleet.counts()
    finally:
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    assert len(ledger.runs) == fleet.prompts
    assert all(d.session.link.conn.connects == KILLS + 1 for d in fleet.devices)
