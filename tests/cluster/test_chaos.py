"""A seeded chaos test: three relay nodes on one Redis under churn, then the invariants.

Three relay processes, three agent workers (one durable) and two client devices on
each of three sessions, every one on some node. A random schedule (from a fixed
seed) sends prompts with the multitask strategies, steers, follows up, cancels from
another device, kills a node (SIGKILL) and restarts it on its port, moves a client or
a worker to another node, and restarts a worker. Then everything quiesces (every Run
ends; nothing else happens) and the test checks what users rely on:

* every device of a session folded the same entries as the store holds, in order,
  serials 1..n with no gap and no duplicate, and sees the same Run statuses;
* every Run ended; a Run nobody made durable was started (``active``) once; a
  durable one was handed on (a relay ``pending`` after ``active``) only after the
  worker that held it lost its connection;
* every publish a device got an ack for is stored exactly once;
* every steer or follow-up the relay acknowledged has an outcome on every device.

``RUNWIRE_CHAOS_SEED`` (default 1) and ``RUNWIRE_CHAOS_SECONDS`` (default 6) run
other schedules by hand, and ``RUNWIRE_CHAOS_NODE_ARGS`` gives every node more
options (``--max-concurrent-runs 1 --multitask enqueue``), for example::

    RUNWIRE_CHAOS_SEED=7 RUNWIRE_CHAOS_SECONDS=40 .venv/bin/python -m pytest \
        tests/cluster/test_chaos.py -q
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pytest

import agent_side
import client_side
from agent_side import AbortSignal, Run
from client_side import ClientSession
from relay.store._redis import RedisStore
from transport import UIMessage, message_text, user_message
from transport._events import RunInfo
from transport._mirror import Attachment
from transport._runs import TERMINAL
from transport._tree import ConversationTree
from transport.errors import RunwireError
from transport.frames import CancelEntry
from transport.messages import new_id

from ..chaos.checker import tap_view
from .conftest import REDIS_URL, Cluster, Node

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("RUNWIRE_CHAOS_SEED", "1"))
SECONDS = float(os.environ.get("RUNWIRE_CHAOS_SECONDS", "6"))
NODE_ARGS = tuple(os.environ.get("RUNWIRE_CHAOS_NODE_ARGS", "").split())
"""More options of every node, e.g. ``--max-concurrent-runs 2``."""
GRACE = 1.0
SESSIONS = ("chaos-a", "chaos-b", "chaos-c")
STRATEGIES: tuple[str | None, ...] = (
    None,
    "alongside",
    "enqueue",
    "interrupt",
    "reject",
    "rollback",
)
QUIET = (
    "THREAD_BUSY",
    "RUN_NOT_ACTIVE",
    "RUN_NOT_FOUND",
    "CONNECTION_CLOSED",
)


async def words(n: int, tag: str, signal: AbortSignal) -> AsyncIterator[str]:
    """``n`` words, one every 20 ms, until the signal fires."""
    for i in range(n):
        if signal.aborted:
            return
        yield f"{tag}-{i} "
        with anyio.move_on_after(0.02):
            await signal.wait()


def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    """Reads the word count from the last message (``<tag> <n>``)."""
    parts = message_text(messages[-1]).split() if messages else []
    n = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 5
    return words(n, parts[0] if parts else "x", signal)


@dataclass
class Log:
    """What the test process saw happen, for the invariants."""

    acked: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    steers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    handled: list[tuple[str, str, bool, float]] = field(default_factory=list)
    """(worker client id, run id, adopted, when) for every handler call."""
    drops: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


@dataclass
class Device:
    name: str
    session_id: str
    node: int
    session: ClientSession
    folded: list[tuple[int, str]] = field(default_factory=list)
    resets: int = 0


@dataclass
class Worker:
    name: str
    durable: bool
    node: int
    agent: agent_side.Agent | None = None
    stop: anyio.Event = field(default_factory=anyio.Event)
    stopped: anyio.Event = field(default_factory=anyio.Event)


class Chaos:
    """The cluster, the devices and workers, and the schedule's actions."""

    quiet: tuple[str, ...] = QUIET
    """Error codes an action may end with that are no failure."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.log = Log()
        self.nodes: list[Node] = []
        self.ports: list[int] = []
        self.up: list[bool] = []
        self.devices: list[Device] = []
        self.workers: list[Worker] = []
        self.prompts = 0
        self.tg: anyio.abc.TaskGroup | None = None
        self.workers_tg: anyio.abc.TaskGroup | None = None
        self.stack = AsyncExitStack()

    def url(self, node: int) -> str:
        return f"ws://127.0.0.1:{self.ports[node]}"

    # ------------------------------------------------------------ setup --

    async def start(self) -> None:
        for _ in range(3):
            node = await self.cluster.start_node(GRACE, *NODE_ARGS)
            self.nodes.append(node)
            match = re.search(r":(\d+)$", node.url)
            assert match
            self.ports.append(int(match.group(1)))
            self.up.append(True)
        for i, durable in enumerate((False, True, False)):
            worker = Worker(f"w{i}", durable, i)
            self.workers.append(worker)
            await self.start_worker(worker)
        for s, session_id in enumerate(SESSIONS):
            for d in range(2):
                node = (s + d) % 3
                session = client_side.connect(self.url(node), session_id)
                device = Device(f"{session_id}/{d}", session_id, node, session)
                self.record(device)
                await self.stack.enter_async_context(session)
                session.link.conn.backoff_max = 0.3
                self.devices.append(device)

    def record(self, device: Device) -> None:
        """Keep the (serial, id) of every entry the device's view folds, in order."""

        def took(serial: int, entry: dict[str, Any]) -> None:
            if serial > (device.folded[-1][0] if device.folded else 0):
                device.folded.append((serial, entry["id"]))

        def reset(_: Attachment) -> None:
            device.resets += 1
            device.folded.clear()

        tap_view(device.session.view, took, reset)

    async def start_worker(self, worker: Worker) -> None:
        """Start the worker's Agent on a node that is up, in a task of its own (its task
        group nests there); if the node dies before it connects, try again."""
        with anyio.fail_after(20):
            while not await self.try_worker(worker):
                await anyio.sleep(0.1)

    async def try_worker(self, worker: Worker) -> bool:
        """One attempt of ``start_worker``: True once the Agent serves."""
        if not self.up[worker.node]:
            worker.node = self.rng.choice([n for n in range(3) if self.up[n]])
        agent = agent_side.Agent(self.url(worker.node), durable=worker.durable)
        log = self.log
        agent.on_run(self.handler(agent))
        agent.connection.backoff_max = 0.3

        def on_state(state: str) -> None:
            if state != "connected":
                log.drops[agent.client_id or "?"].append(time.time())

        agent.connection.on_state(on_state)
        stop, started, stopped = anyio.Event(), anyio.Event(), anyio.Event()

        async def serve() -> None:
            try:
                async with agent:
                    started.set()
                    await stop.wait()
                    log.drops[agent.client_id or "?"].append(time.time())
            except RunwireError:
                pass  # it could not connect: the node died meanwhile
            finally:
                log.drops[agent.client_id or "?"].append(time.time())
                stopped.set()

        assert self.workers_tg is not None
        self.workers_tg.start_soon(serve)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:

                async def either(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(either, started)
                tg.start_soon(either, stopped)
        if not started.is_set():
            return False
        worker.agent, worker.stop, worker.stopped = agent, stop, stopped
        return True

    def handler(self, agent: agent_side.Agent) -> Callable[[Run], Awaitable[None]]:
        """The worker's Run handler: logs the call, then streams words until the Run ends."""
        log = self.log

        async def handle(run: Run) -> None:
            log.handled.append((agent.client_id or "?", run.run_id, run.adopted, time.time()))
            await agent_side.steering_loop(run, model)

        return handle

    async def stop_worker(self, worker: Worker) -> None:
        if worker.agent is None:
            return
        worker.agent = None
        worker.stop.set()
        with anyio.fail_after(20):
            await worker.stopped.wait()

    async def aclose(self) -> None:
        for worker in self.workers:
            with suppress(Exception):
                await self.stop_worker(worker)
        await self.stack.aclose()

    # ---------------------------------------------------------- actions --

    def spawn(self, what: str, fn: Callable[[], Awaitable[None]]) -> None:
        """Run an action in the background (a publish may wait for a node's return)."""
        self.log.actions.append(what)

        async def guarded() -> None:
            try:
                with anyio.fail_after(30):
                    await fn()
            except RunwireError as exc:
                if exc.code not in self.quiet:
                    self.log.errors.append(f"{what}: {exc.code} {exc}")
            except TimeoutError:
                self.log.errors.append(f"{what}: timed out")

        assert self.tg is not None
        self.tg.start_soon(guarded)

    def live_runs(self, device: Device) -> list[RunInfo]:
        return [r for r in device.session.view.runs() if r.status not in TERMINAL]

    async def step(self) -> None:
        rng = self.rng
        kind = rng.choices(
            ["send", "steer", "cancel", "kill", "move_client", "move_agent", "restart_worker"],
            weights=[8, 6, 3, 2, 2, 2, 2],
        )[0]
        device = rng.choice(self.devices)
        if kind == "send":
            self.prompts += 1
            strategy = rng.choice(STRATEGIES)
            msg = user_message(f"p{self.prompts} {rng.randint(3, 40)}")

            async def send() -> None:
                await device.session.send(msg, multitask=strategy)  # type: ignore[arg-type]
                self.log.acked[device.session_id].append(msg.id)

            self.spawn(f"{device.name} send {strategy} {msg.id}", send)
        elif kind == "steer":
            live = self.live_runs(device)
            if not live:
                return
            info = rng.choice(live)
            handle = device.session.run(info.run_id)
            text = f"s{self.prompts} {rng.randint(3, 20)}"
            follow = rng.random() < 0.4
            delivery = handle.follow_up(text) if follow else handle.steer(text)

            async def steered() -> None:
                await delivery.published
                self.log.acked[device.session_id].append(delivery.message.id)
                self.log.steers[device.session_id].append(delivery.message.id)

            what = "follow_up" if follow else "steer"
            self.spawn(f"{device.name} {what} {info.run_id} {delivery.message.id}", steered)
        elif kind == "cancel":
            others = [d for d in self.devices if d.session_id == device.session_id]
            live = self.live_runs(rng.choice(others))
            if not live:
                return
            info = rng.choice(live)
            cancel = CancelEntry(id=new_id(), run_id=info.run_id)

            async def cancelled() -> None:
                await device.session.link.publish(cancel)
                self.log.acked[device.session_id].append(cancel.id)

            self.spawn(f"{device.name} cancel {info.run_id}", cancelled)
        elif kind == "kill":
            if not all(self.up) and rng.random() < 0.7:
                return
            if sum(self.up) == 1:
                return
            n = rng.choice([i for i in range(3) if self.up[i]])
            delay = rng.uniform(0.2, 3.0)
            self.up[n] = False
            self.nodes[n].kill()
            self.log.actions.append(f"kill node {n} for {delay:.2f}s")
            assert self.tg is not None
            self.tg.start_soon(self.restart_node, n, delay)
        elif kind == "move_client":
            node = rng.choice([n for n in range(3) if n != device.node])
            device.node = node
            device.session.link.conn.url = self.url(node)
            self.log.actions.append(f"{device.name} moves to node {node}")
            await device.session.link.conn.kill_socket()
        elif kind == "move_agent":
            worker = rng.choice(self.workers)
            if worker.agent is None:
                return
            node = rng.choice([n for n in range(3) if n != worker.node])
            worker.node = node
            worker.agent.connection.url = self.url(node)
            self.log.actions.append(f"{worker.name} moves to node {node}")
            await worker.agent.connection.kill_socket()
        elif kind == "restart_worker":
            worker = rng.choice(self.workers)
            if worker.agent is None:
                return
            worker.node = rng.choice([n for n in range(3) if self.up[n]])
            self.log.actions.append(f"{worker.name} restarts on node {worker.node}")
            await self.stop_worker(worker)
            await self.start_worker(worker)

    async def restart_node(self, n: int, delay: float) -> None:
        await anyio.sleep(delay)
        self.nodes[n] = await self.cluster.start_node(
            GRACE, *NODE_ARGS, "--port", str(self.ports[n])
        )
        self.up[n] = True
        self.log.actions.append(f"node {n} back")


async def stored(store: RedisStore, session_id: str) -> list[dict[str, Any]]:
    """Every entry the store holds for the session, in order."""
    entries: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await store.read(session_id, after=after, limit=500)
        if not page:
            return entries
        entries.extend(json.loads(e.data) for e in page)
        after = page[-1].serial


def statuses(runs: list[RunInfo]) -> dict[str, str]:
    return {r.run_id: r.status for r in runs}


async def settled(chaos: Chaos, store: RedisStore) -> dict[str, list[dict[str, Any]]]:
    """Wait until every Run in the store ended and every device holds what the store holds."""
    history: dict[str, list[dict[str, Any]]] = {}
    with anyio.move_on_after(45):  # what is still off then is reported by check()
        while True:
            done = True
            for session_id in SESSIONS:
                entries = await stored(store, session_id)
                history[session_id] = entries
                records = await store.runs(session_id)
                if any(r.status not in TERMINAL for r in records):
                    done = False
                want = [(e["serial"], e["id"]) for e in entries]
                for device in chaos.devices:
                    if device.session_id == session_id and device.folded != want:
                        done = False
            if done:
                return history
            await anyio.sleep(0.1)
    return history


def first_difference(a: list[tuple[int, str]], b: list[tuple[int, str]]) -> int:
    """The index of the first element where two lists differ."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def check(chaos: Chaos, history: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The invariants; returns what broke."""
    problems: list[str] = []
    for session_id, entries in history.items():
        serials = [e["serial"] for e in entries]
        if serials != list(range(1, len(entries) + 1)):
            problems.append(f"{session_id}: stored serials {serials} have a gap")
        tree = ConversationTree()
        for entry in entries:
            tree.fold(entry)
        want = statuses(tree.runs())
        for device in chaos.devices:
            if device.session_id != session_id:
                continue
            folded = [(e["serial"], e["id"]) for e in entries]
            if device.folded != folded:
                problems.append(
                    f"{device.name}: folded {len(device.folded)} entries, the store holds "
                    f"{len(folded)}; first difference at {first_difference(device.folded, folded)}"
                )
            if device.resets:
                problems.append(f"{device.name}: reset {device.resets} times")
            got = statuses(device.session.view.runs())
            if got != want:
                problems.append(f"{device.name}: runs {got} != stored {want}")
            for message_id in chaos.log.steers[session_id]:
                if device.session.view.tree.outcome(message_id) is None:
                    problems.append(f"{device.name}: steer {message_id} has no outcome")
        for run_id, status in want.items():
            if status not in TERMINAL:
                problems.append(f"{session_id}: run {run_id} is still {status}")
        counts = Counter(e["id"] for e in entries)
        for entry_id in chaos.log.acked[session_id]:
            if counts[entry_id] != 1:
                problems.append(f"{session_id}: acked {entry_id} stored {counts[entry_id]} times")
        problems.extend(check_starts(chaos, session_id, entries))
    problems.extend(check_dispatches(chaos))
    return problems


def check_dispatches(chaos: Chaos) -> list[str]:
    """A Run is handed to a second worker only once the one before lost its connection."""
    problems: list[str] = []
    calls: dict[str, list[tuple[str, bool, float]]] = defaultdict(list)
    for client, run_id, adopted, when in chaos.log.handled:
        calls[run_id].append((client, adopted, when))
    for run_id, handled in calls.items():
        for (client, _, when), (other, adopted, _) in itertools.pairwise(handled):
            if not any(t >= when for t in chaos.log.drops.get(client, [])):
                problems.append(
                    f"run {run_id} handed to {client}, then to {other} (adopted={adopted}) "
                    f"though {client} never lost its connection"
                )
    return problems


def trail(entries: list[dict[str, Any]], run_id: str) -> str:
    """What the store holds of a Run, one short line per entry (for a failure)."""
    return "; ".join(
        f"{e['serial']} {e['kind']} {e.get('status') or e.get('intent') or ''} "
        f"by {e.get('client_id')}{' durable' if e.get('durable') else ''}"
        for e in entries
        if e.get("run_id") == run_id and e["kind"] not in ("response_append",)
    )


def check_starts(chaos: Chaos, session_id: str, entries: list[dict[str, Any]]) -> list[str]:
    """A Run starts once, unless durable and handed on after its worker lost its connection."""
    problems: list[str] = []
    owner: dict[str, tuple[str, int, bool]] = {}  # run -> client, ts of active, durable
    for entry in entries:
        if entry["kind"] != "run":
            continue
        run_id = entry["run_id"]
        if entry["status"] == "active":
            held = owner.get(run_id)
            if held is not None and held[0] != "handed-on":
                problems.append(
                    f"{session_id}: run {run_id} started again by {entry.get('client_id')} "
                    f"(first by {held[0]}, durable={held[2]}) without being handed on"
                )
            # Durable once started so: a worker that adopts it keeps it durable.
            owner[run_id] = (
                entry.get("client_id") or "?",
                entry.get("ts") or 0,
                bool(entry.get("durable")) or (held is not None and held[2]),
            )
        elif entry["status"] == "suspended" and run_id in owner:
            # Paused on a question: the relay's next ``pending`` resumes it, no hand-on.
            owner[run_id] = ("handed-on", 0, owner[run_id][2])
        elif entry["status"] == "pending" and owner.get(run_id, ("handed-on",))[0] != "handed-on":
            client, since, durable = owner[run_id]
            if not durable:
                problems.append(
                    f"{session_id}: run {run_id} (not durable) was handed on: "
                    + trail(entries, run_id)
                )
            drops = chaos.log.drops.get(client, [])
            if not any(since / 1000 - 0.5 <= t <= entry.get("ts", 0) / 1000 for t in drops):
                problems.append(
                    f"{session_id}: run {run_id} handed on from {client}, which never dropped"
                )
            owner[run_id] = ("handed-on", 0, durable)
    return problems


async def test_chaos(cluster: Cluster, redis_prefix: str) -> None:
    rng = random.Random(SEED)
    chaos = Chaos(cluster, rng)
    store = RedisStore(REDIS_URL, prefix=redis_prefix)
    await store.start()
    async with anyio.create_task_group() as workers:
        chaos.workers_tg = workers
        try:
            await run_chaos(chaos, store, rng)
        finally:
            await chaos.aclose()
            await store.aclose()


async def run_chaos(chaos: Chaos, store: RedisStore, rng: random.Random) -> None:
    """Start everything, run the schedule, quiesce and check."""
    await chaos.start()
    async with anyio.create_task_group() as tg:
        chaos.tg = tg
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            with anyio.fail_after(30):
                await chaos.step()
            await anyio.sleep(rng.uniform(0.01, 0.2))
    # Quiesce: every node up (the restarts above have run), every action done.
    assert all(chaos.up)
    history = await settled(chaos, store)
    problems = check(chaos, history) + chaos.log.errors
    kinds = Counter(a.split()[1] if a.split()[0] != "kill" else "kill" for a in chaos.log.actions)
    ended = Counter(r["status"] for h in history.values() for r in h if r["kind"] == "run")
    print(f"seed {SEED}: {dict(kinds)}; run entries {dict(ended)}")
    assert not problems, (
        f"seed {SEED}: " + "\n".join(problems) + "\nactions:\n" + "\n".join(chaos.log.actions)
    )
