"""The node that publishes an entry runs the Run rules on it once: the entry it stored comes
back through the store's subscription and is applied as planned, not planned again. A second
node, which did not publish it, applies the stored entry without planning it, and both end
with the same Run records."""

from __future__ import annotations

from typing import Any

import pytest

from relay._channel import Channel
from relay.store._memory import MemoryStore
from transport._policy import CAPABILITIES, Sender
from transport._runs import RunRecord, RunRegistry
from transport.frames import EntryBody, MessageEntry, RunEntry
from transport.messages import user_message

pytestmark = pytest.mark.anyio

CLIENT = Sender(client_id="alice/phone", user_id="alice", caps=CAPABILITIES - {"agent"})
WORKER = Sender(client_id="agent-1", user_id="svc", role="agent", caps=frozenset({"agent"}))


class Counting(RunRegistry):
    """A registry that counts the entries it runs the rules on."""

    def __init__(self, session_id: str, records: list[RunRecord]) -> None:
        super().__init__(session_id, records)
        self.planned: list[str] = []

    def plan(self, entry: EntryBody, sender: Sender, now_ms: int) -> list[RunRecord]:
        self.planned.append(entry.id)
        return super().plan(entry, sender, now_ms)


def registry(channel: Channel) -> Counting:
    assert isinstance(channel.registry, Counting)
    return channel.registry


async def test_the_publishing_node_plans_each_entry_once_and_agrees_with_another() -> None:
    store = MemoryStore()
    await store.start()
    committed: list[tuple[Any, ...]] = []
    here = Channel(store, "s", lambda *args: committed.append(args), Counting)
    there = Channel(store, "s", lambda *args: None, Counting)
    await here.load()
    await there.load()
    prompt = MessageEntry(
        id="m1", run_id="r1", intent="prompt", agent="a", message=user_message("hi")
    )
    _, duplicate, changes = await here.publish(prompt, CLIENT, 1_000)
    assert not duplicate and [r.status for r in changes] == ["pending"]
    start = RunEntry(id="r1.start", run_id="r1", status="active")
    _, _, started = await here.publish(start, WORKER, 2_000)
    assert registry(here).planned == ["m1", "r1.start"]  # once each
    assert [c[2] for c in committed] == [changes, started]  # the hub hears the plan
    # The other node replays both from what was stored: no entry is planned there again.
    assert registry(there).planned == []
    mine, theirs = here.registry.get("r1"), there.registry.get("r1")
    assert mine is not None and mine.status == "active" and mine.owner == WORKER.client_id
    assert mine == theirs
    assert await store.runs("s") == [mine]
    here.close()
    there.close()
    await store.aclose()


async def test_a_repeat_is_not_applied_twice() -> None:
    store = MemoryStore()
    await store.start()
    here = Channel(store, "s", lambda *args: None, Counting)
    await here.load()
    prompt = MessageEntry(
        id="m1", run_id="r1", intent="prompt", agent="a", message=user_message("hi")
    )
    first = await here.publish(prompt, CLIENT, 1_000)
    again = await here.publish(prompt, CLIENT, 1_500)
    assert again == (first[0], True, [])
    assert here.last == first[0]
    record = here.registry.get("r1")
    assert record is not None and record.status == "pending" and record.updated_ts == 1_000
    here.close()
    await store.aclose()
