"""Cancel rights hold across relay nodes: the node a cancel arrives at checks it by the token."""

from __future__ import annotations

from pathlib import Path

import pytest

import agent_side
import client_side
from agent_side import Run
from tests.integration.conductor import CLIENT_CAPS, SECRET, token
from transport import RunwireError

from .conftest import Cluster
from .test_cluster import model_for, wait_until

pytestmark = pytest.mark.anyio


async def test_a_cancel_through_another_node_needs_the_right(
    cluster: Cluster, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    a, b, c = [await cluster.start_node(1.0, "--secret-file", str(secret)) for _ in range(3)]
    worker = agent_side.Agent(c.url, token=token("svc", ["agent"]))

    @worker.on_run
    async def handle(run: Run) -> None:
        await agent_side.steering_loop(run, model_for(100_000, delay=0.01))

    async with (
        worker,
        client_side.connect(a.url, "trip", token=token("alice")) as alice,
        client_side.connect(b.url, "trip", token=token("bob")) as bob,
        client_side.connect(b.url, "trip", token=token("dan", [*CLIENT_CAPS, "cancel-any"])) as dan,
    ):
        run = await alice.send("long answer")
        await wait_until(lambda: (bob.view.run(run.run_id) or run).status == "active")
        with pytest.raises(RunwireError) as info:  # bob may cancel his own Runs only
            await bob.cancel(run.run_id)
        assert info.value.code == "UNAUTHORIZED"
        assert not alice.view.tree.cancel_requested(run.run_id)
        await dan.cancel(run.run_id, wait=True)  # cancel-any: anyone's, from any node
        assert (await run.result()).status == "cancelled"
