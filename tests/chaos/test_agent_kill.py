"""A worker process SIGKILLed mid-Run, with and without a second worker.

Alone, the worker's Runs end ``AGENT_LOST`` once the relay's grace passed, and a
new worker takes the prompts sent after. Beside a second worker, with durable
Runs, the relay hands the dead worker's Runs on after the grace and the other
one adopts and finishes them. Either way no Run hangs, and the devices lose,
repeat and skip nothing.
"""

from __future__ import annotations

import anyio
import pytest

from tests.cluster.conftest import Cluster

from .checker import Ledger
from .rig import GRACE, SOAK, Fleet, WorkerProcess

pytestmark = pytest.mark.anyio

SESSIONS = 24 if SOAK else 6
WORDS = (60, 100)
"""Words per reply: long enough that every Run still streams when the worker dies."""


async def test_a_lone_worker_killed_mid_run_ends_its_runs_and_a_new_one_takes_over() -> None:
    cluster = Cluster(store="memory://")
    node = await cluster.start_node(GRACE)
    ledger = Ledger()
    first = WorkerProcess(node.url)
    second: WorkerProcess | None = None
    try:
        await first.ready()
        async with Fleet(node.url, ledger, "lone", SESSIONS) as fleet:
            async with anyio.create_task_group() as tg:
                tg.start_soon(first.read)
                tg.start_soon(fleet.traffic, 2, WORDS)
                await fleet.streaming()
                lost = {d.run.run_id for d in fleet.devices if d.run is not None}
                first.kill()
                second = WorkerProcess(node.url)
                await second.ready()
                tg.start_soon(second.read)
                await fleet.settle()
                counts = await fleet.counts()
                second.kill()
    finally:
        first.close()
        if second is not None:
            second.close()
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    assert set(first.runs) == lost and len(lost) == SESSIONS
    assert {fleet.runs[r] for r in lost} == {"error"}  # AGENT_LOST after the grace
    assert second is not None and len(second.runs) == SESSIONS
    assert {fleet.runs[r] for r in second.runs} == {"complete"}


async def test_a_worker_killed_mid_run_beside_another_has_its_durable_runs_adopted() -> None:
    cluster = Cluster(store="memory://")
    node = await cluster.start_node(GRACE)
    ledger = Ledger()
    victim = WorkerProcess(node.url, durable=True)
    other = WorkerProcess(node.url, durable=True)
    try:
        await victim.ready()
        await other.ready()
        async with Fleet(node.url, ledger, "pair", SESSIONS) as fleet:
            async with anyio.create_task_group() as tg:
                tg.start_soon(victim.read)
                tg.start_soon(other.read)
                tg.start_soon(fleet.traffic, 1, WORDS)
                await fleet.streaming()
                held = set(victim.runs)
                victim.kill()
                await fleet.settle()
                counts = await fleet.counts()
                other.kill()
    finally:
        victim.close()
        other.close()
        for n in cluster.nodes:
            n.kill()
    assert counts.zero, ledger.report(counts)
    assert not fleet.errors, fleet.errors
    assert held, "the relay gave the victim no Run: nothing was exercised"
    assert held <= set(other.runs)  # each one adopted by the other worker
    assert set(fleet.runs.values()) == {"complete"}
