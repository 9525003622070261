"""The HTTP API across relay nodes on one Redis, and across a history Redis lost.

Two ``relay.serve`` nodes in this process share a Redis; sessions expire after
``history_ttl`` (0.5 s) where a test needs Redis to lose a history.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest

import relay
from relay import Server
from relay.store._redis import RedisStore

from ..relay.test_http_api import Event, call, events, post
from ..relay.wire import RawPeer, prompt
from .conftest import REDIS_URL
from .test_cross_node_live import close_code, expired, pubsub_lost, serials, watched_on_b

pytestmark = pytest.mark.anyio


async def test_a_node_that_opened_a_session_which_expired_empty_resets_when_another_recreates_it(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    """Node B opened the session (epoch E1) and it expired with no entry; node A makes
    it again (E2): B's clients are told to rebuild, never handed E2's entries as E1's."""
    a, b = expiring
    watcher = await RawPeer.open(b.url)
    first = await watcher.attach("s")
    assert first["head"] == 0
    await expired(f"{redis_prefix}{{s}}:meta")
    writer = await RawPeer.open(a.url)
    fresh = await writer.attach("s")
    assert fresh["epoch"] != first["epoch"]
    assert (await writer.publish("s", prompt()))["serial"] == 1
    assert await close_code(watcher) == 4009
    assert all(frame.get("type") != "deliver" for frame in watcher.inbox), watcher.inbox
    watcher = await RawPeer.open(b.url)
    again = await watcher.attach("s", from_serial=0, epoch=first["epoch"])
    assert again["epoch"] == fresh["epoch"] and serials(again["entries"]) == [1]


async def test_an_event_stream_resuming_past_a_lost_history_leaves_the_node_able_to_publish(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    """A stream that resumes beyond the head of a session Redis dropped is reset; the
    node's WebSocket clients of that session are then reset too and publish again (the
    stream's request used to open the session anew under the node's loaded channel,
    after which every publish there failed CONFLICT, 'too busy', for good)."""
    _, b = expiring
    client = await RawPeer.open(b.url)
    first = await client.attach("s")
    for n in (1, 2, 3):
        assert (await client.publish("s", prompt()))["serial"] == n
    await expired(f"{redis_prefix}{{s}}:meta")
    # A stream that read further than this node's channel got (through another node, or
    # in an earlier history) resumes here.
    _, found, _ = await events(b, "s", "wait=0", last_id="5")
    assert [e.event for e in found] == ["reset"]

    entry = prompt()
    await client.send({"type": "publish", "req": 7, "session_id": "s", "entry": entry})
    assert await close_code(client) == 4009, client.inbox
    client = await RawPeer.open(b.url)
    rebuilt = await client.attach("s", from_serial=3, epoch=first["epoch"])
    assert rebuilt["reset"] is True and rebuilt["epoch"] != first["epoch"]
    assert (await client.publish("s", entry))["serial"] == 1


def entry_serials(found: list[Any]) -> list[int]:
    return [json.loads(e.data)["serial"] for e in found if e.event == "entry"]


async def test_an_event_stream_resuming_after_redis_lost_the_history_is_reset_not_continued(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    """A stream that read serials 1-3 of a history Redis then dropped, resuming (on the other
    node) from 3 once the session's new history has more than 3 entries, is told to rebuild
    (``event: reset``) and gets the new history from its start: never 4 and 5 of the new
    history appended to 1-3 of the old one."""
    a, b = expiring
    for n in range(3):
        assert (await post(a, "s", {"message": f"old-{n}"})).status == 201
    _, found, left = await events(b, "s", "from=0&wait=0")
    assert entry_serials(found) == [1, 2, 3] and left is not None
    await expired(f"{redis_prefix}{{s}}:meta")
    for n in range(5):
        assert (await post(a, "s", {"message": f"new-{n}"})).json()["serial"] == n + 1
    _, found, again = await events(b, "s", "from=0&wait=0", last_id=left)
    assert [e.event for e in found] == ["reset"] + ["entry"] * 5, found
    texts = [json.loads(e.data)["message"]["parts"][0]["text"] for e in found[1:]]
    assert texts == [f"new-{n}" for n in range(5)]
    # From there it goes on in the new history, on either node.
    assert (await post(b, "s", {"message": "next"})).json()["serial"] == 6
    _, found, _ = await events(a, "s", "wait=0", last_id=again)
    assert entry_serials(found) == [6]


async def test_a_waiting_event_stream_answers_reset_as_soon_as_its_session_is_reset(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    """A stream waiting on node B for the next entry of a history Redis then dropped is
    answered ``event: reset`` (and the new history) as soon as B's channel resets, when
    node A makes the session anew: not only once its ``wait`` runs out."""
    a, b = expiring
    assert (await post(b, "s", {"message": "old"})).json()["serial"] == 1
    _, _, left = await events(b, "s", "from=0&wait=0")
    answer: list[tuple[list[Event], float]] = []

    async def wait_on_b() -> None:
        _, found, _ = await events(b, "s", "wait=12", last_id=left)
        answer.append((found, time.monotonic()))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_on_b)
            while "s" not in b.hub.channels or not b.hub.channels["s"].listeners:
                await anyio.sleep(0.01)
            channel = b.hub.channels["s"]
            await expired(f"{redis_prefix}{{s}}:meta")
            assert (await post(a, "s", {"message": "new"})).json()["serial"] == 1
            while not channel.reset:  # node B hears of the new epoch
                await anyio.sleep(0.01)
            reset_at = time.monotonic()
    found, answered_at = answer[0]
    took = answered_at - reset_at
    assert took < 3.0, f"the stream answered {took:.1f}s after its session reset, not at once"
    assert [e.event for e in found] == ["reset", "entry"], found
    assert json.loads(found[1].data)["message"]["parts"][0]["text"] == "new"


async def test_an_event_stream_resuming_from_entries_redis_trimmed_is_reset_not_skipped(
    redis_prefix: str,
) -> None:
    """A stream resuming (on a node that keeps the session loaded for a WebSocket client)
    from a serial whose successors Redis trimmed (``max_history``) is reset, rather than
    handed the entries after the gap as if they came next."""
    small: dict[str, Any] = {"prefix": redis_prefix, "max_history": 10, "dedup_window": 10}
    async with (
        relay.serve(port=0, store=RedisStore(REDIS_URL, **small)) as a,
        relay.serve(port=0, store=RedisStore(REDIS_URL, **small)) as b,
    ):
        watcher = await RawPeer.open(b.url)
        await watcher.attach("s")  # node B loads the session while it still starts at 1
        writer = await RawPeer.open(a.url)
        await writer.attach("s")
        for _ in range(300):
            await writer.publish("s", prompt())
        assert serials(await watcher.entries(300))[-1] == 300
        oldest = await b.store.read("s", after=0, limit=1)
        assert oldest[0].serial > 6  # Redis trimmed whole stream nodes (MAXLEN ~)
        _, found, _ = await events(b, "s", "wait=0&limit=1000", last_id="5")
        assert found[0].event == "reset", found[:2]
        assert json.loads(found[0].data)["first"] == oldest[0].serial
        assert entry_serials(found) == list(range(oldest[0].serial, 301))


async def test_an_http_publish_to_a_session_redis_dropped_under_a_watching_node_is_stored(
    expiring: tuple[Server, Server], redis_prefix: str
) -> None:
    """A back end posting to a session whose history Redis dropped, through a node where a
    WebSocket client keeps it loaded, has its message stored in the new history (it has no
    epoch to rebuild, unlike a WebSocket client); the watcher is reset."""
    a, b = expiring
    watcher = await RawPeer.open(b.url)
    first = await watcher.attach("s")
    assert (await post(a, "s", {"message": "old"})).json()["serial"] == 1
    assert serials(await watcher.entries(1)) == [1]
    await expired(f"{redis_prefix}{{s}}:meta")
    reply = await post(b, "s", {"message": "new", "message_id": "m-new"})
    assert reply.status == 201, reply.body
    assert reply.json()["serial"] == 1 and reply.json()["duplicate"] is False
    assert await close_code(watcher) == 4009
    watcher = await RawPeer.open(b.url)
    again = await watcher.attach("s", from_serial=1, epoch=first["epoch"])
    assert again["reset"] is True
    assert [e["message"]["parts"][0]["text"] for e in again["entries"]] == ["new"]


async def test_a_history_page_of_a_history_redis_lost_is_never_labelled_with_the_old_epoch(
    expiring: tuple[Server, Server], redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node B took in 1-3 and has not heard that Redis dropped the session and node A made
    it anew: a history page read through B holds the new history's entries, so B must
    answer with the new epoch (its channel resets), not the old one."""
    a, b = expiring
    watcher, first = await watched_on_b(a, b)
    with pubsub_lost(b, monkeypatch):
        await expired(f"{redis_prefix}{{s}}:meta")
        for n in range(2):
            assert (await post(a, "s", {"message": f"new-{n}"})).json()["serial"] == n + 1
        # A WebSocket client paging back through the stale channel is closed to rebuild,
        # and given no page of the new history as the old one's.
        await watcher.send({"type": "history", "req": 9, "session_id": "s", "before": 3})
        code = await close_code(watcher)
        page = await call(b, "GET", "/v1/sessions/s/history")
    assert code == 4009
    assert [f for f in watcher.inbox if f["type"] == "page"] == []
    assert page.status == 200, page.body
    texts = [e["message"]["parts"][0]["text"] for e in page.json()["entries"]]
    assert page.json()["epoch"] != first["epoch"], f"new entries under the old epoch: {texts}"
    assert texts == ["new-0", "new-1"] and page.json()["head"] == 2
