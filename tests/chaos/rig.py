"""What every chaos scenario runs: relay processes, agent workers, clients and their traffic.

``Fleet`` is the clients: one device per session, each sending prompts that ask
the workers for a few words (``"<tag> <n>"``), steering the Run while it
streams, and waiting (at most ``RUN_BOUND`` seconds) for it to end. Every
device and in-process worker feeds the scenario's ``Ledger``: acknowledged
publishes and what each device folded. ``settle`` then waits until the relay's
history and every device agree, and ``counts`` reads the history back over a
fresh connection and asks the ledger for the four counts.

``RUNWIRE_CHAOS_SOAK=1`` makes the scenarios longer: more sessions, more
rounds, the default 30 s grace and the issue's cut lengths
(docs/howto/chaos-suite.md).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

import agent_side
import client_side
from agent_side import AbortSignal, Run
from client_side import ClientRun, ClientSession, Delivery
from tests.cluster.conftest import Node
from tests.relay.wire import RawPeer
from transport import UIMessage, message_text
from transport.errors import RunwireError
from transport.runs import TERMINAL
from transport.tree import ConversationTree

from .checker import Counts, Ledger, watch_connection, watch_view

ROOT = Path(__file__).resolve().parents[2]
SOAK = os.environ.get("RUNWIRE_CHAOS_SOAK") == "1"
"""The long run: ``RUNWIRE_CHAOS_SOAK=1``."""
SESSIONS = 60 if SOAK else 20
"""Sessions streaming and steering at once (one device each)."""
ROUNDS = 8 if SOAK else 2
"""Prompts each device sends, one after the other."""
GRACE = 30.0 if SOAK else 2.0
"""The relay's ``agent_grace``: CI scales it down, and the cut lengths with it."""
BACKOFF = 5.0 if SOAK else 0.25
"""The SDKs' longest reconnect backoff (the connection's ``backoff_max``)."""
CUTS = (
    {"blip": 0.5, "under-grace": 5.0, "past-grace": 40.0}
    if SOAK
    else {"blip": 0.5, "under-grace": GRACE / 2, "past-grace": GRACE * 4 / 3}
)
"""Network cuts by what they exercise (see ``test_cuts``): the issue's 0.5, 5 and 40 s
against the default 30 s grace in the soak; in CI the same three kinds against a 2 s
grace: a blip, half the grace, and four thirds of it."""
WORD_SECONDS = 0.03
"""Between two words a worker streams."""
RUN_BOUND = 4 * GRACE + 30.0
"""Seconds a Run may take to end, through any fault, before it counts as hung."""
QUIET = frozenset({"RUN_NOT_ACTIVE", "RUN_NOT_FOUND"})
"""What a steer may end with that is no failure (the Run ended first)."""


def port_of(node: Node) -> int:
    match = re.search(r":(\d+)$", node.url)
    assert match, node.url
    return int(match.group(1))


async def wait_acks(ledger: Ledger, n: int) -> None:
    """Wait until the ledger holds ``n`` more acknowledged publishes than now."""
    want = sum(len(a) for a in ledger.acks.values()) + n
    with anyio.fail_after(60):
        while sum(len(a) for a in ledger.acks.values()) < want:
            await anyio.sleep(0.02)


async def words(n: int, tag: str, signal: AbortSignal) -> AsyncIterator[str]:
    """``n`` numbered words, one every ``WORD_SECONDS``, until the signal fires."""
    for i in range(n):
        if signal.aborted:
            return
        yield f"{tag}-{i} "
        with anyio.move_on_after(WORD_SECONDS):
            await signal.wait()


def model(messages: list[UIMessage], signal: AbortSignal) -> AsyncIterator[str]:
    """The worker's model: the last message says how many words (``<tag> <n>``)."""
    parts = message_text(messages[-1]).split() if messages else []
    n = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 5
    return words(n, parts[0] if parts else "x", signal)


async def handle(run: Run) -> None:
    await agent_side.steering_loop(run, model)


@asynccontextmanager
async def workers(
    url: str, ledger: Ledger, n: int = 2, *, durable: bool = False
) -> AsyncIterator[list[agent_side.Agent]]:
    """``n`` in-process workers of ``model`` on ``url``, their publishes in the ledger."""
    async with AsyncExitStack() as stack:
        agents = []
        for _ in range(n):
            agent = agent_side.Agent(url, durable=durable)
            agent.on_run(handle)
            agent.connection.backoff_max = BACKOFF
            watch_connection(ledger, agent.connection)
            await stack.enter_async_context(agent)
            agents.append(agent)
        yield agents


@dataclass
class Device:
    name: str
    session: ClientSession
    run: ClientRun | None = None
    """The Run it waits on now."""
    errors: list[str] = field(default_factory=list)


class Fleet:
    """One device per session, streaming and steering (see the module docstring)."""

    def __init__(self, url: str, ledger: Ledger, prefix: str, sessions: int = SESSIONS) -> None:
        self.url = url
        self.ledger = ledger
        self.session_ids = [f"{prefix}-{i}" for i in range(sessions)]
        self.devices: list[Device] = []
        self.rng = random.Random(prefix)
        self.stack = AsyncExitStack()
        self.prompts = 0
        self.summary = ""
        self.runs: dict[str, str] = {}
        """Run id -> status, as ``counts`` read them."""

    async def __aenter__(self) -> Fleet:
        for session_id in self.session_ids:
            session = client_side.connect(self.url, session_id)
            await self.stack.enter_async_context(session)
            session.link.conn.backoff_max = BACKOFF
            watch_view(self.ledger, session_id, session.view)
            watch_connection(self.ledger, session.link.conn)
            self.devices.append(Device(session_id, session))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()

    @property
    def errors(self) -> list[str]:
        return [e for d in self.devices for e in d.errors]

    async def traffic(
        self, rounds: int = ROUNDS, words_per_run: tuple[int, int] = (15, 40)
    ) -> None:
        """Every device sends ``rounds`` prompts, one after the other, steering each."""
        async with anyio.create_task_group() as tg:
            for device in self.devices:
                tg.start_soon(self.talk, device, rounds, words_per_run)

    async def talk(self, device: Device, rounds: int, words_per_run: tuple[int, int]) -> None:
        for _ in range(rounds):
            self.prompts += 1
            n = self.rng.randint(*words_per_run)
            try:
                with anyio.fail_after(RUN_BOUND):
                    run = await device.session.send(f"p{self.prompts} {n}")
            except (RunwireError, TimeoutError) as exc:
                device.errors.append(f"{device.name}: send: {exc!r}")
                continue
            self.ledger.watch_run(device.name, run.run_id)
            device.run = run
            await anyio.sleep(self.rng.uniform(0.05, 0.3))
            delivery = run.steer(f"s{self.prompts} {self.rng.randint(*words_per_run)}")
            try:
                with anyio.fail_after(RUN_BOUND):
                    await run.result()
                    await delivery.published
            except RunwireError as exc:
                if exc.code not in QUIET:
                    device.errors.append(f"{device.name}: {exc.code} {exc}")
            except TimeoutError:
                device.errors.append(f"{device.name}: run {run.run_id} did not end")

    async def connected(self, timeout: float = 60.0) -> None:
        """Wait until every device is connected (back from the last fault)."""
        with anyio.fail_after(timeout):
            while not all(d.session.connected for d in self.devices):
                await anyio.sleep(0.02)

    def streamed(self, device: Device) -> int:
        """How many words the device sees in the replies of its current Run."""
        run = device.run
        if run is None:
            return 0
        return sum(
            len(message_text(vm.message).split())
            for vm in device.session.view.messages()
            if vm.run_id == run.run_id and vm.message.role == "assistant"
        )

    async def streaming(self, words: int = 3, timeout: float = 30.0) -> None:
        """Wait until every device sees at least ``words`` words of its current Run."""
        with anyio.fail_after(timeout):
            while not all(self.streamed(d) >= words for d in self.devices):
                await anyio.sleep(0.02)

    def steer_all(self, text: str) -> list[tuple[Device, Delivery]]:
        """Steer every device's current Run that its view shows going on."""
        out = []
        for device in self.devices:
            run = device.run
            if run is not None and run.status not in TERMINAL:
                out.append((device, run.steer(f"{text} {self.rng.randint(15, 40)}")))
        return out

    async def published(self, deliveries: list[tuple[Device, Delivery]]) -> None:
        """Wait for the steers ``steer_all`` made: acknowledged, or refused as too late."""
        with anyio.fail_after(RUN_BOUND):
            for device, delivery in deliveries:
                try:
                    await delivery.published
                except RunwireError as exc:
                    if exc.code not in QUIET:
                        device.errors.append(f"{device.name}: steer {exc.code} {exc}")

    async def settle(self, url: str | None = None, timeout: float = RUN_BOUND) -> None:
        """Wait until every Run the relay holds ended and every device holds its history."""
        with anyio.move_on_after(timeout):  # what is still off then, the counts tell
            while True:
                history = await read_all(url or self.url, self.session_ids)
                if all(self._caught_up(d, history[d.name]) for d in self.devices):
                    return
                await anyio.sleep(0.2)

    def _caught_up(self, device: Device, entries: list[dict[str, Any]]) -> bool:
        runs = statuses(entries)
        head = entries[-1]["serial"] if entries else 0
        return device.session.view.newest_serial == head and all(
            s in TERMINAL for s in runs.values()
        )

    async def counts(self, url: str | None = None) -> Counts:
        """The four counts, from the history the relay serves a fresh connection."""
        history = await read_all(url or self.url, self.session_ids)
        stored = {s: [(e["serial"], e["id"]) for e in h] for s, h in history.items()}
        runs: dict[str, str] = {}
        for entries in history.values():
            runs.update(statuses(entries))
        for device in self.devices:
            for vm in device.session.view.messages():
                if vm.message.role == "assistant":
                    self.ledger.reply(device.name, message_text(vm.message))
        self.runs = runs
        self.summary = (
            f"{sum(len(a) for a in self.ledger.acks.values())} acknowledged publishes, "
            f"{sum(len(h) for h in history.values())} entries, "
            f"runs {dict(Counter(runs.values()))}"
        )
        print(self.summary)
        return self.ledger.count(stored, runs)


def statuses(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Run id -> status, folded from a session's entries."""
    tree = ConversationTree()
    for entry in entries:
        tree.fold(entry)
    return {r.run_id: r.status for r in tree.runs()}


async def read_all(url: str, session_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every entry of each session, oldest first, over one fresh raw connection."""
    peer = await RawPeer.open(url)
    try:
        return {s: await read_history(peer, s) for s in session_ids}
    finally:
        await peer.close()


async def read_history(peer: RawPeer, session_id: str) -> list[dict[str, Any]]:
    attached = await peer.attach(session_id, limit=1)
    entries = {e["serial"]: e for e in attached["entries"]}
    before = attached["head"] + 1
    while before > 1:
        page = await peer.request(
            {"type": "history", "session_id": session_id, "before": before, "limit": 1000},
            timeout=20,
        )
        if not page["entries"]:
            break
        entries.update({e["serial"]: e for e in page["entries"]})
        before = min(e["serial"] for e in page["entries"])
    await peer.request({"type": "detach", "session_id": session_id})
    return [entries[s] for s in sorted(entries)]


class WorkerProcess:
    """``tests/chaos/worker.py`` in a process of its own, which a scenario SIGKILLs."""

    def __init__(self, url: str, *, durable: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.worker", url, *(["--durable"] if durable else [])],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.runs: list[str] = []
        """The Runs it started, as it printed them."""

    async def ready(self) -> None:
        with anyio.fail_after(30):
            while (line := await self._line()) != "READY":
                if not line:
                    raise AssertionError("the worker exited before it was ready")

    async def read(self) -> None:
        """Keep its ``RUN`` lines (run this in a task; it returns when the process ends)."""
        while line := await self._line():
            if line.startswith("RUN "):
                self.runs.append(line.split()[1])

    async def _line(self) -> str:
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        line = await anyio.to_thread.run_sync(stdout.readline, abandon_on_cancel=True)
        return line.strip() if line else ""

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """Kill it if it still runs, and close its pipe (once ``read`` returned)."""
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
