"""A rolling restart: each of two relay nodes on Redis gets SIGTERM in turn under load.

Twenty sessions stream through a load-balancer stand-in while the nodes restart one
after the other. A stopping relay closes its connections 1012 (service restart), so
the clients and the worker reconnect at once to the node the balancer points at.
Afterwards every device holds exactly what the store holds (serials 1..n, no gap, no
duplicate, no reset), every reply's words run on without a gap, every steer has an
outcome, and every Run ended ``complete`` (none ``AGENT_LOST``).
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

import agent_side
import client_side
from agent_side import AbortSignal, Run
from client_side import ClientSession
from relay.store._redis import RedisStore
from transport import UIMessage, message_text

from ..chaos.checker import tap_view
from .conftest import REDIS_URL, Balancer, Cluster, Node

pytestmark = pytest.mark.anyio

SESSIONS = 20
GRACE = 20.0  # the nodes' agent_grace: far longer than a reconnect takes


class Stream:
    """A model that streams numbered words until ``finish`` is set."""

    def __init__(self) -> None:
        self.finish = anyio.Event()

    def __call__(self, messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
        return self.words(message_text(messages[-1]).split()[0], signal)

    async def words(self, tag: str, signal: AbortSignal) -> AsyncIterator[str]:
        i = 0
        while not self.finish.is_set() and not signal.aborted:
            yield f"{tag}-{i} "
            i += 1
            with anyio.move_on_after(0.05):
                await signal.wait()


def record(session: ClientSession, folded: list[tuple[int, str]], resets: list[int]) -> None:
    """Keep the (serial, id) of every entry the session's view folds, in order."""

    def took(serial: int, entry: dict[str, Any]) -> None:
        if serial > (folded[-1][0] if folded else 0):
            folded.append((serial, entry["id"]))

    tap_view(session.view, took, lambda attachment: resets.append(attachment.head))


async def stored(store: RedisStore, session_id: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    after = 0
    while page := await store.read(session_id, after=after, limit=500):
        entries.extend(json.loads(e.data) for e in page)
        after = page[-1].serial
    return entries


async def stop(node: Node) -> int:
    """SIGTERM, then the exit status (the relay closes its connections 1012 first)."""
    node.proc.send_signal(signal.SIGTERM)
    with anyio.fail_after(30):
        code = await anyio.to_thread.run_sync(node.proc.wait)
    if node.proc.stdout is not None:
        node.proc.stdout.close()
    return code


def words_run_on(text: str) -> bool:
    """``tag-0 tag-1 ... tag-n``: every number once, in order."""
    numbers = [int(w.rsplit("-", 1)[1]) for w in text.split()]
    return numbers == list(range(len(numbers)))


async def test_a_rolling_restart_loses_nothing(cluster: Cluster, redis_prefix: str) -> None:
    a = await cluster.start_node(GRACE)
    b = await cluster.start_node(GRACE)
    lb = Balancer(a.url)
    model = Stream()
    store = RedisStore(REDIS_URL, prefix=redis_prefix)
    await store.start()
    async with anyio.create_task_group() as tg:
        await tg.start(lb.serve)
        async with AsyncExitStack() as stack:
            worker = agent_side.Agent(lb.url)

            @worker.on_run
            async def handle(run: Run) -> None:
                await agent_side.steering_loop(run, model)

            await stack.enter_async_context(worker)
            sessions: list[ClientSession] = []
            folded: list[list[tuple[int, str]]] = [[] for _ in range(SESSIONS)]
            resets: list[list[int]] = [[] for _ in range(SESSIONS)]
            for i in range(SESSIONS):
                session = client_side.connect(lb.url, f"roll-{i}")
                record(session, folded[i], resets[i])
                sessions.append(await stack.enter_async_context(session))
            runs = [await s.send(f"story{i} go") for i, s in enumerate(sessions)]

            async def streaming(after: int) -> None:
                """Every reply shows words numbered ``after`` or more."""

                def shows(s: ClientSession, i: int) -> bool:
                    return any(
                        f"story{i}-{after} " in message_text(vm.message) for vm in s.view.messages()
                    )

                with anyio.fail_after(60):
                    while not all(shows(s, i) for i, s in enumerate(sessions)):
                        await anyio.sleep(0.02)

            await streaming(3)
            # Node a restarts: the balancer sends new connections to b first.
            lb.point_at(b.url)
            assert await stop(a) == 0
            await streaming(10)
            steers = [run.steer(f"story{i} steer") for i, run in enumerate(runs)]
            for delivery in steers:
                with anyio.fail_after(60):
                    await delivery.published
            a2 = await cluster.start_node(GRACE)
            # Then node b restarts, and everyone moves to the new a.
            lb.point_at(a2.url)
            assert await stop(b) == 0
            await streaming(25)
            model.finish.set()
            with anyio.fail_after(60):
                results = [await run.result() for run in runs]
            assert [r.status for r in results] == ["complete"] * SESSIONS, [
                r.error for r in results
            ]
            for delivery in steers:
                with anyio.fail_after(30):
                    assert (await delivery.outcome).consumed

            # Every device holds what the store holds: nothing lost, duplicated or gapped.
            for i, session in enumerate(sessions):
                entries = await stored(store, f"roll-{i}")
                assert [e["serial"] for e in entries] == list(range(1, len(entries) + 1))
                assert max(Counter(e["id"] for e in entries).values()) == 1
                want = [(e["serial"], e["id"]) for e in entries]
                with anyio.fail_after(30):
                    while folded[i] != want:
                        await anyio.sleep(0.02)
                assert resets[i] == []
                replies = [
                    message_text(vm.message)
                    for vm in session.view.messages()
                    if vm.message.role == "assistant"
                ]
                assert replies and all(words_run_on(text) for text in replies), replies
                assert not any(e.get("error", {}) and e["error"].get("code") for e in entries)
        tg.cancel_scope.cancel()
    await store.aclose()
