"""``redis_wire.Wire``: the store's connections read without redis-py, against a real Redis.

What the store relies on: a pipeline's replies come back whole and in order
(errors as values, ``NOSCRIPT`` recognisable), however the bytes are split
across reads and however many pipelines wait; pub/sub replies reach the
callback in order; a connection that ends fails whatever waits on it; a
stream out of step (a reply nothing asked for) is closed, not guessed at.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import hiredis
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from relay.store import _redis_live as redis_live
from relay.store._redis import RedisStore
from relay.store._redis_wire import Wire, pack

from .test_store_redis import REDIS_URL, _redis_is_there  # noqa: F401  (the Redis check)


@asynccontextmanager
async def wire_to_redis(
    on_reply: Callable[[Wire, Any], None] | None = None,
) -> AsyncIterator[Wire]:
    conn = RedisStore(REDIS_URL).new_connection()
    await redis_live.connect(conn)
    wire = Wire(on_reply).adopt(conn)
    try:
        yield wire
    finally:
        await conn.disconnect(nowait=True)


@pytest.fixture
def key() -> Iterator[str]:
    name = f"rwtest:wire:{secrets.token_hex(6)}"
    yield name
    with Redis.from_url(REDIS_URL) as raw:
        raw.delete(name)


@pytest.mark.anyio
async def test_a_pipeline_gets_every_reply_in_order_with_errors_as_values(key: str) -> None:
    async with wire_to_redis() as wire:
        replies = await wire.request(
            [
                ("SET", key, "41"),
                ("INCR", key),
                ("HGET", key, "field"),  # wrong type: an error in the middle
                ("EVALSHA", "0" * 40, 0),
                ("GET", f"{key}:missing"),
                ("GET", key),
            ]
        )
    assert replies[:2] == [b"OK", 42]
    assert isinstance(replies[2], ResponseError) and "WRONGTYPE" in str(replies[2])
    assert isinstance(replies[3], NoScriptError)
    assert replies[4:] == [None, b"42"]


@pytest.mark.anyio
async def test_replies_split_over_many_reads_and_pipelines_that_wait_together(key: str) -> None:
    big = secrets.token_bytes(3 << 20)  # several socket reads
    async with wire_to_redis() as wire:
        results: dict[int, list[Any]] = {}

        async def ask(i: int, commands: list[tuple[Any, ...]]) -> None:
            results[i] = await wire.request(commands)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 0, [("SET", key, big)])
            tg.start_soon(ask, 1, [("STRLEN", key), ("GET", key)])
            tg.start_soon(ask, 2, [("PING",)] * 100)
    assert results[0] == [b"OK"]
    assert results[1] == [len(big), big]
    assert results[2] == [b"PONG"] * 100


@pytest.mark.anyio
async def test_pubsub_replies_reach_the_callback_in_order(key: str) -> None:
    got: list[Any] = []
    async with wire_to_redis(lambda wire, reply: got.append(reply)) as wire:
        wire.write(pack([("SUBSCRIBE", key)]))
        with anyio.fail_after(5):
            while not got:
                await anyio.sleep(0.01)
        assert got[0] == [b"subscribe", key.encode(), 1]
        with Redis.from_url(REDIS_URL) as raw:
            for i in range(500):
                raw.publish(key, f"m{i}")
        with anyio.fail_after(5):
            while len(got) < 501:
                await anyio.sleep(0.01)
    assert got[1:] == [[b"message", key.encode(), f"m{i}".encode()] for i in range(500)]


@pytest.mark.anyio
async def test_when_redis_drops_the_connection_waiting_pipelines_fail(key: str) -> None:
    async with wire_to_redis() as wire:
        (client_id,) = await wire.request([("CLIENT", "ID")])
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def kill_it() -> None:
                    await anyio.sleep(0.1)
                    with Redis.from_url(REDIS_URL) as raw:
                        raw.client_kill_filter(_id=client_id)

                tg.start_soon(kill_it)
                with pytest.raises(RedisConnectionError):
                    await wire.request([("BLPOP", key, 0)])  # waits until the kill
            await wire.lost
        with pytest.raises(RedisConnectionError):
            await wire.request([("PING",)])
        wire.write(b"*1\r\n$4\r\nPING\r\n")  # a no-op once lost


@pytest.mark.anyio
async def test_a_reply_nothing_asked_for_closes_the_connection() -> None:
    async with wire_to_redis() as wire:
        assert await wire.request([("PING",)]) == [b"PONG"]
        wire.data_received(b"+OK\r\n")
        with anyio.fail_after(5):
            await wire.lost
        with pytest.raises(RedisConnectionError):
            await wire.request([("PING",)])


_ARGS = st.lists(st.one_of(st.text(), st.binary(), st.integers()), min_size=1, max_size=6)


@given(st.lists(_ARGS, min_size=1, max_size=5))
def test_pack_encodes_what_a_resp_parser_reads_back(commands: list[list[Any]]) -> None:
    reader = hiredis.Reader()
    reader.feed(pack([tuple(command) for command in commands]))
    decoded = []
    while (reply := reader.gets()) is not False:
        decoded.append(reply)
    expected = [
        [a.encode() if isinstance(a, str) else b"%d" % a if isinstance(a, int) else a for a in c]
        for c in commands
    ]
    assert decoded == expected


@pytest.mark.anyio
async def test_redis_py_still_closes_an_adopted_connection_and_waits_for_it() -> None:
    conn = RedisStore(REDIS_URL).new_connection()
    await redis_live.connect(conn)
    wire = Wire().adopt(conn)
    assert await wire.request([("PING",)]) == [b"PONG"]
    with anyio.fail_after(2):
        await conn.disconnect()  # waits until the transport closed, as without the Wire
    assert wire.lost.done()
    assert not conn.is_connected
