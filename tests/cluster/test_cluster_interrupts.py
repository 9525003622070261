"""A pause on a Redis cluster: asked through one node, answered through another."""

from __future__ import annotations

import anyio
import pytest

import client_side
from tests.agent_side.test_interrupts import final_text, worker

from .conftest import Cluster

pytestmark = pytest.mark.anyio


async def test_a_question_asked_on_one_node_is_answered_through_another(cluster: Cluster) -> None:
    a = await cluster.start_node()
    b = await cluster.start_node()
    calls = [("c1", "deploy", {"service": "api"})]
    async with (
        worker(a.url, calls),
        client_side.connect(a.url, "pause-cluster") as phone,
        client_side.connect(b.url, "pause-cluster") as laptop,
    ):
        run = await phone.send("Deploy the api")
        with anyio.fail_after(20):
            paused = await run.result()
            while laptop.paused_run() is None:
                await laptop._wait_change()
        assert [q.id for q in paused.interrupts] == ["c1#0"]
        await laptop.resume(run.run_id, {"c1#0": {"region": "us"}})
        with anyio.fail_after(20):
            while run.status != "complete":
                await phone._wait_change()
        assert final_text(phone, run.run_id) == "api deployed to us"
