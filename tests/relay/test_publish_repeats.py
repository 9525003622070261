"""Repeated publishes (a client retrying after a reconnect), on every store.

A repeat is acknowledged with the original serial even when the Run rules
would now refuse the entry, and a new entry costs the store one call (the
append answers repeats itself; ``find`` is asked only when the rules refuse).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import RedisError

import relay
from relay import Server
from relay.store import Appended, Store, open_store
from transport import checks
from transport.messages import new_id

from .wire import RawPeer, append, prompt, run_status, steer

pytestmark = pytest.mark.anyio

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CARD = "my card is 4111 1111 1111 1111"


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'relay.db'}"
    else:
        if os.environ.get("RUNWIRE_SKIP_REDIS") == "1":
            pytest.skip("RUNWIRE_SKIP_REDIS=1")
        prefix = f"rwtest:{secrets.token_hex(6)}:"
        client = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        try:
            client.ping()
        except RedisError as exc:  # never skip silently: CI starts a Redis
            pytest.fail(f"no Redis at {REDIS_URL} ({exc}); set RUNWIRE_SKIP_REDIS=1")
        sep = "&" if "?" in REDIS_URL else "?"
        yield f"{REDIS_URL}{sep}prefix={prefix}"
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


class Counted:
    """Counts a store's ``find`` calls (wrapping the instance's method)."""

    def __init__(self, store: Store) -> None:
        self.finds = 0
        inner = store.find

        async def find(session_id: str, entry_id: str) -> Appended | None:
            self.finds += 1
            return await inner(session_id, entry_id)

        store.find = find  # type: ignore[method-assign]


@pytest.fixture
async def store(store_url: str) -> Store:
    return open_store(store_url)


@pytest.fixture
async def server(store: Store) -> AsyncIterator[Server]:
    async with relay.serve(port=0, store=store, agent_grace=5) as s:
        yield s


async def started_run(server: Server, session_id: str) -> tuple[RawPeer, RawPeer, str]:
    """A client and an agent attached to ``session_id``, and a Run the agent has started."""
    client = await RawPeer.open(server.url)
    agent = await RawPeer.open(server.url, role="agent")
    await client.attach(session_id)
    await agent.attach(session_id)
    run_id = new_id()
    assert (await client.publish(session_id, prompt(run_id)))["type"] == "ack"
    assert (await agent.publish(session_id, run_status(run_id, "active")))["type"] == "ack"
    return client, agent, run_id


def acked(reply: dict[str, Any]) -> tuple[int, bool]:
    assert reply["type"] == "ack", reply
    return reply["serial"], bool(reply.get("duplicate"))


async def test_a_repeat_the_run_rules_would_now_refuse_gets_its_original_serial(
    server: Server,
) -> None:
    client, agent, run_id = await started_run(server, "s")
    first_prompt = prompt(new_id())
    the_steer = steer(run_id, "shorter, please")
    the_append = append(run_id, "m1", "tok")
    steer_serial, _ = acked(await client.publish("s", the_steer))
    append_serial, _ = acked(await agent.publish("s", the_append))
    queued_serial, _ = acked(await client.publish("s", first_prompt))
    acked(await agent.publish("s", run_status(run_id, "complete")))
    head = server.hub.channels["s"].last
    # The Run has ended: a new steer or append is refused, but each repeat gets its ack.
    refused = await client.publish("s", steer(run_id, "too late"))
    assert refused["error"]["code"] == "RUN_NOT_ACTIVE"
    refused = await agent.publish("s", append(run_id, "m1", "late"))
    assert refused["error"]["code"] == "RUN_NOT_ACTIVE"
    assert acked(await client.publish("s", the_steer)) == (steer_serial, True)
    assert acked(await agent.publish("s", the_append)) == (append_serial, True)
    # A repeated prompt is not a second Run.
    assert acked(await client.publish("s", first_prompt)) == (queued_serial, True)
    assert server.hub.channels["s"].last == head
    page = await server.store.read("s", after=0, limit=100)
    assert [e.serial for e in page] == list(range(1, head + 1))


async def test_a_new_entry_or_a_repeat_the_rules_allow_costs_no_lookup(
    server: Server, store: Store
) -> None:
    client, agent, run_id = await started_run(server, "s")
    counted = Counted(store)
    tokens = [append(run_id, "m1", f"t{i}") for i in range(5)]
    serials = [acked(await agent.publish("s", token))[0] for token in tokens]
    assert acked(await agent.publish("s", tokens[2])) == (serials[2], True)
    the_steer = steer(run_id, "go on")
    serial, _ = acked(await client.publish("s", the_steer))
    assert acked(await client.publish("s", the_steer)) == (serial, True)
    assert counted.finds == 0  # the appends answered the repeats
    acked(await agent.publish("s", run_status(run_id, "complete")))
    assert acked(await client.publish("s", the_steer)) == (serial, True)
    assert counted.finds == 1  # the rules refused it, so the store was asked


async def test_with_input_checks_a_repeat_is_looked_up_before_the_checks(
    store: Store,
) -> None:
    seen: list[str] = []

    def check(message: Any) -> None:
        seen.append(message.id)

    async with relay.serve(
        port=0, store=store, agent_grace=5, input_checks=[check, checks.pii()]
    ) as server:
        client, agent, run_id = await started_run(server, "s")
        the_steer = steer(run_id, "hello")
        the_refused = steer(run_id, CARD)
        serial, _ = acked(await client.publish("s", the_steer))
        assert (await client.publish("s", the_refused))["error"]["code"] == "PII_DETECTED"
        acked(await agent.publish("s", run_status(run_id, "complete")))
        head = server.hub.channels["s"].last
        checked = len(seen)
        assert acked(await client.publish("s", the_steer)) == (serial, True)
        assert len(seen) == checked  # the checks never saw the repeat
        # A refused steer retried after its Run ended: refused as before, nothing stored.
        again = await client.publish("s", the_refused)
        assert again["error"]["code"] == "PII_DETECTED"
        assert server.hub.channels["s"].last == head
