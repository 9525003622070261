"""Agent presence per session on several nodes: an agent whose fresh token drops one of
its sessions keeps its Runs in the others; its Runs in the dropped one end AGENT_LOST."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

from relay.auth import mint_token
from transport.messages import new_id

from ..relay.wire import RawPeer, prompt, run_status
from .conftest import Cluster

pytestmark = pytest.mark.anyio

SECRET = "cluster-presence-secret-" + "0123456789abcdef" * 3


async def dial(
    url: str, sessions: dict[str, list[str]], *, role: str = "client", client_id: str = "w1"
) -> RawPeer:
    token = mint_token(user="svc", sessions=sessions, secret=SECRET)
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"})
    peer = RawPeer(ws)
    await peer.send({"type": "hello", "v": 1, "role": role, "client_id": client_id})
    welcome = await peer.recv()
    assert welcome["type"] == "welcome", welcome
    return peer


async def next_status(client: RawPeer, run_id: str, timeout: float) -> dict[str, object]:
    """The next ``run`` entry of ``run_id`` the client is delivered."""
    with anyio.fail_after(timeout):
        while True:
            [entry] = await client.entries(1, timeout=timeout)
            if entry["kind"] == "run" and entry["run_id"] == run_id:
                return entry


@pytest.mark.parametrize("durable", [False, True])
async def test_an_agent_whose_fresh_token_drops_a_session_loses_its_runs_there_only(
    cluster: Cluster, tmp_path: Path, durable: bool
) -> None:
    # Its first connection (node b) may act in both sessions and starts a Run in each; it
    # comes back through node a with a token for "keep-*" only, and the first goes. The
    # agent is present (on a), but not in "drop-1": that Run ends AGENT_LOST after the
    # grace (a durable one is handed on: pending again, for another worker), as on one
    # relay, and the Run in "keep-1" goes on and ends as its agent says.
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    a = await cluster.start_node(0.6, "--secret-file", str(secret))
    b = await cluster.start_node(0.6, "--secret-file", str(secret))
    client = await dial(a.url, {"*": ["subscribe", "publish"]}, client_id="phone")
    runs = {"keep-1": new_id(), "drop-1": new_id()}
    for session_id, run_id in runs.items():
        await client.attach(session_id)
        assert (await client.publish(session_id, prompt(run_id)))["type"] == "ack"
    first = await dial(b.url, {"keep-*": ["agent"], "drop-*": ["agent"]}, role="agent")
    for session_id, run_id in runs.items():
        await first.attach(session_id)
        started = {**run_status(run_id, "active"), "durable": durable}
        assert (await first.publish(session_id, started))["type"] == "ack"
        assert (await next_status(client, run_id, 10))["status"] == "active"
    fresh = await dial(a.url, {"keep-*": ["agent"]}, role="agent")
    await fresh.attach("keep-1")
    first.ws.transport.abort()

    lost = await next_status(client, runs["drop-1"], 15)
    if durable:
        assert lost["status"] == "pending" and lost.get("owner") is None, lost
    else:
        assert lost["status"] == "error", lost
        assert lost["error"]["code"] == "AGENT_LOST", lost  # type: ignore[index]
    await anyio.sleep(1.5)  # sweeps past the grace several times over: the kept Run stays
    assert not [
        f for f in client.inbox if f["type"] == "deliver" and f["entries"][0]["kind"] == "run"
    ]
    ended = run_status(runs["keep-1"], "complete")
    assert (await fresh.publish("keep-1", ended))["type"] == "ack"
    assert (await next_status(client, runs["keep-1"], 10))["status"] == "complete"
    for peer in (fresh, client):
        await peer.close()


async def test_an_empty_pattern_in_a_fresh_token_does_not_make_its_agent_present_everywhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    # A token may name the pattern "" (it matches no session id: on one relay the agent may
    # act nowhere by it). The fresh token grants 'agent' in "keep-*" and in "" only, so
    # the agent's Run in "drop-1" still ends AGENT_LOST: "" is not "every session".
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    a = await cluster.start_node(0.6, "--secret-file", str(secret))
    b = await cluster.start_node(0.6, "--secret-file", str(secret))
    client = await dial(a.url, {"*": ["subscribe", "publish"]}, client_id="phone")
    run_id = new_id()
    await client.attach("drop-1")
    assert (await client.publish("drop-1", prompt(run_id)))["type"] == "ack"
    first = await dial(b.url, {"keep-*": ["agent"], "drop-*": ["agent"]}, role="agent")
    await first.attach("drop-1")
    assert (await first.publish("drop-1", run_status(run_id, "active")))["type"] == "ack"
    assert (await next_status(client, run_id, 10))["status"] == "active"
    fresh = await dial(a.url, {"keep-*": ["agent"], "": ["agent"]}, role="agent")
    first.ws.transport.abort()

    lost = await next_status(client, run_id, 15)
    assert lost["status"] == "error", lost
    assert lost["error"]["code"] == "AGENT_LOST", lost  # type: ignore[index]
    for peer in (fresh, client):
        await peer.close()


async def test_an_agent_on_two_nodes_with_overlapping_scopes_keeps_what_the_one_left_covers(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The agent is connected through node a for "s.*:x" (a star in the middle, '.' and '-'
    # in the session ids) and through node b for "s.-1:x" alone. Its connection to a goes:
    # its Run in "s.-2:x" ends AGENT_LOST, the one in "s.-1:x" (node b may act there) goes on.
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    a = await cluster.start_node(0.6, "--secret-file", str(secret))
    b = await cluster.start_node(0.6, "--secret-file", str(secret))
    client = await dial(a.url, {"*": ["subscribe", "publish"]}, client_id="phone")
    kept, dropped = "s.-1:x", "s.-2:x"
    runs = {kept: new_id(), dropped: new_id()}
    for session_id, run_id in runs.items():
        await client.attach(session_id)
        assert (await client.publish(session_id, prompt(run_id)))["type"] == "ack"
    wide = await dial(a.url, {"s.*:x": ["agent"]}, role="agent")
    narrow = await dial(b.url, {kept: ["agent"], "zz*": ["agent"]}, role="agent")
    for session_id, run_id in runs.items():
        await wide.attach(session_id)
        assert (await wide.publish(session_id, run_status(run_id, "active")))["type"] == "ack"
        assert (await next_status(client, run_id, 10))["status"] == "active"
    await narrow.attach(kept)
    wide.ws.transport.abort()

    lost = await next_status(client, runs[dropped], 15)
    assert lost["status"] == "error", lost
    await anyio.sleep(1.5)  # sweeps past the grace several times over: the kept Run stays
    assert not [
        f for f in client.inbox if f["type"] == "deliver" and f["entries"][0]["kind"] == "run"
    ]
    ended = run_status(runs[kept], "complete")
    assert (await narrow.publish(kept, ended))["type"] == "ack"
    assert (await next_status(client, runs[kept], 10))["status"] == "complete"
    for peer in (narrow, client):
        await peer.close()


async def test_an_agent_back_through_another_node_with_another_token_keeps_its_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Its connection to node a (for "k-*") goes; within the grace it is back through node b
    # with a token for "*-1" (another pattern, that covers the Run's session too): the Run
    # does not end, however long after the grace, and ends as its agent says.
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    a = await cluster.start_node(1.5, "--secret-file", str(secret))
    b = await cluster.start_node(1.5, "--secret-file", str(secret))
    client = await dial(a.url, {"*": ["subscribe", "publish"]}, client_id="phone")
    session_id, run_id = "k-1", new_id()
    await client.attach(session_id)
    assert (await client.publish(session_id, prompt(run_id)))["type"] == "ack"
    first = await dial(a.url, {"k-*": ["agent"]}, role="agent")
    await first.attach(session_id)
    assert (await first.publish(session_id, run_status(run_id, "active")))["type"] == "ack"
    assert (await next_status(client, run_id, 10))["status"] == "active"
    first.ws.transport.abort()
    await anyio.sleep(0.3)
    again = await dial(b.url, {"*-1": ["agent"]}, role="agent")
    await anyio.sleep(4.0)  # past the first connection's deadline and the grace, and sweeps
    assert not [
        f for f in client.inbox if f["type"] == "deliver" and f["entries"][0]["kind"] == "run"
    ]
    await again.attach(session_id)
    assert (await again.publish(session_id, run_status(run_id, "complete")))["type"] == "ack"
    assert (await next_status(client, run_id, 10))["status"] == "complete"
    for peer in (again, client):
        await peer.close()
