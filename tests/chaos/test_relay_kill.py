"""A SQLite relay SIGKILLed mid-stream, restarted on the same file and port.

Twenty sessions (sixty in the soak) stream and steer through one relay process
while two in-process workers answer. The relay is killed with SIGKILL while
every session has a Run going, then started again on the same file and port: the
clients and the workers reconnect by themselves, re-send what was not
acknowledged and resume from the serial they held. Nothing acknowledged may be
lost, nothing stored twice, no device may see a gap, and every Run must end.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.cluster.conftest import Cluster

from .checker import Ledger
from .rig import GRACE, SOAK, Fleet, port_of, wait_acks, workers

pytestmark = pytest.mark.anyio

KILLS = 5 if SOAK else 2


async def test_a_sqlite_relay_sigkilled_mid_stream_loses_nothing(tmp_path: Path) -> None:
    cluster = Cluster(store=f"sqlite:///{tmp_path / 'chaos.db'}")
    node = await cluster.start_node(GRACE)
    port = port_of(node)
    ledger = Ledger()
    try:
        async with workers(node.url, ledger), Fleet(node.url, ledger, "kill") as fleet:
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.traffic)
                for _ in range(KILLS):
                    await wait_acks(ledger, 300)  # every session is streaming by now
                    node.kill()
                    node = await cluster.start_node(GRACE, "--port", str(port))
            await fleet.settle()
            counts = await fleet.counts()
    finally:
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    assert len(ledger.runs) == fleet.prompts
    assert all(d.session._conn.connects == KILLS + 1 for d in fleet.devices)
