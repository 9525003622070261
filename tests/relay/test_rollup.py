"""The relay's rollup window (``rollup_window``, ``--rollup-window``): a subscriber's
streamed appends wait up to the window so that several leave in one ``deliver`` frame."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import relay
from relay import Server
from transport.messages import new_id

from .wire import RawPeer, append, prompt, run_status

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[0.0, 1.0], ids=["no window", "1 s window"])
def window(request: pytest.FixtureRequest) -> float:
    value: float = request.param
    return value


@pytest.fixture
async def server(window: float) -> AsyncIterator[Server]:
    async with relay.serve(port=0, store="memory://", rollup_window=window) as s:
        yield s


async def streaming(server: Server) -> tuple[RawPeer, RawPeer, str]:
    """A watcher attached to session ``s`` and an agent with an active Run there."""
    watcher = await RawPeer.open(server.url)
    await watcher.attach("s")
    run_id = new_id()
    await watcher.publish("s", prompt(run_id))
    agent = await RawPeer.open(server.url, role="agent")
    await agent.attach("s")
    assert (await agent.publish("s", run_status(run_id, "active")))["type"] == "ack"
    await watcher.entries(2)  # the prompt and the Run going active
    return watcher, agent, run_id


async def test_appends_share_a_frame_within_the_window_and_other_entries_send_them_at_once(
    server: Server, window: float
) -> None:
    watcher, agent, run_id = await streaming(server)
    for text in ("a", "b", "c"):
        assert (await agent.publish("s", append(run_id, "m1", text)))["type"] == "ack"
    await agent.publish("s", run_status(run_id, "complete"))  # not an append: no hold
    frames = []
    while sum(len(f["entries"]) for f in frames) < 4:
        frames.append(await watcher.next("deliver"))
    kinds = [[e["kind"] for e in f["entries"]] for f in frames]
    if window:
        assert kinds == [["response_append"] * 3 + ["run"]]
    else:
        assert kinds == [["response_append"]] * 3 + [["run"]]


async def test_held_appends_leave_when_the_window_is_over(server: Server, window: float) -> None:
    watcher, agent, run_id = await streaming(server)
    for text in ("a", "b", "c"):
        assert (await agent.publish("s", append(run_id, "m1", text)))["type"] == "ack"
    frames = []
    while sum(len(f["entries"]) for f in frames) < 3:
        frames.append(await watcher.next("deliver"))
    texts = [[e["chunks"][0]["delta"] for e in f["entries"]] for f in frames]
    assert texts == ([["a", "b", "c"]] if window else [["a"], ["b"], ["c"]])


async def test_a_window_out_of_range_is_refused() -> None:
    for bad in (-0.01, 1.5):
        with pytest.raises(ValueError, match="rollup_window"):
            async with relay.serve(port=0, store="memory://", rollup_window=bad):
                pass
