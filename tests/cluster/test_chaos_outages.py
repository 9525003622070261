"""The chaos test (``test_chaos``) with Redis outages, the HTTP API and paused Runs.

The schedule of ``test_chaos`` (three node processes, three workers, two devices
per session; prompts, steers, cancels, node kills, moves, worker restarts) runs on a
throwaway Redis, and adds:

* Redis stopped (``SAVE``, then SIGKILL) and started again with its data, and Redis
  out of memory for a moment (``CONFIG SET maxmemory 1``);
* HTTP publishers (``POST /v1/sessions/{id}/messages``) that retry a publish with the
  same message id, on another node, until they get an answer that is no outage;
* one SSE reader per session (``GET .../events`` resumed with ``Last-Event-ID``, on a
  random node each time);
* Runs that pause on a question (prompts ``ask <n>``), answered from a device;
* prompts with the ``reject`` strategy sent from both devices of a session at once.

Then, beyond ``test_chaos``'s invariants: every SSE reader holds exactly the store's
entries, in order, with no gap, no duplicate and no reset; each acknowledged HTTP
publish is stored once and each refused one never; a ``reject`` prompt is stored only
while no other Run was going on; every acknowledged answer resumed its Run (a Run that
completed after one gave its handler the answer).

It runs only with ``RUNWIRE_CHAOS_OUTAGES=1``: a hunting tool, not part of CI. It
found three bugs, each with a deterministic regression test CI runs: two in
``test_redis_outage``; and a Run that a fork left off the active branch read the
new branch when it resumed, so it no longer found its own prompt and completed
without asking (2 failures in 78 runs of 5 s: an ``ask`` prompt sent alongside
while a ``rollback`` prompt waited its turn, which came while the ``ask`` Run
waited on its question and started a branch above it;
``test_a_run_a_fork_left_off_the_active_branch_keeps_its_own_conversation`` and a
shared tree vector). With that fixed it passed 63 runs of 5 s and 21 of 20 s.
``RUNWIRE_CHAOS_SEED`` and ``RUNWIRE_CHAOS_SECONDS`` (default 5 here) choose the
schedule, as for ``test_chaos``::

    RUNWIRE_CHAOS_OUTAGES=1 RUNWIRE_CHAOS_SEED=7 RUNWIRE_CHAOS_SECONDS=30 \
        .venv/bin/python -m pytest tests/cluster/test_chaos_outages.py -q
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

import agent_side
from agent_side import Run
from relay.store._redis import RedisStore
from transport import message_text, user_message
from transport._runs import TERMINAL
from transport.errors import RunwireError
from transport.frames import InterruptEntry
from transport.messages import new_id

from ..relay.test_http_api import Reply, _request, sse
from . import test_chaos
from .conftest import Cluster
from .test_chaos import SESSIONS, Chaos, check, stored
from .test_redis_outage import ThrowawayRedis

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        os.environ.get("RUNWIRE_CHAOS_OUTAGES") != "1",
        reason="a hunting tool: run with RUNWIRE_CHAOS_OUTAGES=1 (see the module docstring)",
    ),
]

SEED = test_chaos.SEED
SECONDS = float(os.environ.get("RUNWIRE_CHAOS_SECONDS", "5"))
OUTAGE_QUIET = (*test_chaos.QUIET, "STORE_UNAVAILABLE", "VALIDATION_ERROR", "INTERRUPT_EXPIRED")
"""What an action may end with besides: an outage, an answer to a question already answered."""


class OutageChaos(Chaos):
    """``Chaos`` on a throwaway Redis, with outages, HTTP clients and paused Runs."""

    quiet = OUTAGE_QUIET

    def __init__(self, cluster: Cluster, rng: random.Random, redis_server: ThrowawayRedis) -> None:
        super().__init__(cluster, rng)
        self.redis = redis_server
        self.raw = redis.Redis(port=redis_server.port)
        self.redis_lock = anyio.Lock()
        """Held by an outage, and by a node starting (which needs Redis)."""
        self.answered: dict[str, list[Any]] = defaultdict(list)
        """run id -> the answers its handler got."""
        self.answers: dict[str, list[tuple[str, str]]] = defaultdict(list)
        """session -> (answer entry id, run id) of every acknowledged answer."""
        self.refused: dict[str, list[str]] = defaultdict(list)
        """session -> ids of publishes refused for good (never stored)."""
        self.sse: dict[str, list[tuple[int, str]]] = {s: [] for s in SESSIONS}
        self.sse_resets: Counter[str] = Counter()
        self.sse_errors: list[str] = []
        self.stopping = anyio.Event()

    # ---------------------------------------------------------- workers --

    def handler(self, agent: agent_side.Agent) -> Callable[[Run], Awaitable[None]]:
        """As ``Chaos.handler``; a Run whose prompt is ``ask <n>`` first asks a question."""
        base = super().handler(agent)

        async def handle(run: Run) -> None:
            prompt = next((m for m in run.messages if m.role == "user"), None)
            if prompt is not None and message_text(prompt).startswith("ask"):
                try:
                    answer = await run.interrupt(message="Go on?", reason="chaos")
                except RunwireError as exc:
                    if exc.code != "INTERRUPTED":  # a prompt moved on without answering
                        raise
                else:
                    self.answered[run.run_id].append(answer)
            await base(run)

        return handle

    # ------------------------------------------------------------ nodes --

    async def restart_node(self, n: int, delay: float) -> None:
        """As ``Chaos.restart_node``, but never while Redis is away (a node needs it to start)."""
        await anyio.sleep(delay)
        async with self.redis_lock:
            self.nodes[n] = await self.cluster.start_node(
                test_chaos.GRACE, *test_chaos.NODE_ARGS, "--port", str(self.ports[n])
            )
        self.up[n] = True
        self.log.actions.append(f"node {n} back")

    # ---------------------------------------------------------- actions --

    async def step(self) -> None:
        rng = self.rng
        kind = rng.choices(
            ["base", "redis_restart", "oom", "http", "ask", "answer", "race_reject"],
            weights=[14, 1, 1, 4, 2, 3, 1],
        )[0]
        if kind == "base":
            await super().step()
        elif kind in ("redis_restart", "oom"):
            if self.redis_lock.locked():
                return
            assert self.tg is not None
            self.tg.start_soon(self.outage, kind, rng.uniform(0.2, 1.5))
        elif kind == "http":
            session_id = rng.choice(SESSIONS)
            strategy = rng.choice(test_chaos.STRATEGIES)
            message_id = new_id()
            self.spawn(
                f"http {session_id} send {strategy} {message_id}",
                lambda: self.http_publish(session_id, message_id, strategy),
            )
        elif kind == "ask":
            device = rng.choice(self.devices)
            self.prompts += 1
            msg = user_message(f"ask {rng.randint(3, 15)}")

            async def ask() -> None:
                await device.session.send(msg, multitask="alongside")
                self.log.acked[device.session_id].append(msg.id)

            self.spawn(f"{device.name} ask {msg.id}", ask)
        elif kind == "answer":
            device = rng.choice(self.devices)
            self.answer_all(device)
        elif kind == "race_reject":
            session_id = rng.choice(SESSIONS)
            for device in [d for d in self.devices if d.session_id == session_id]:
                self.prompts += 1
                self.spawn(
                    f"{device.name} send reject (race)",
                    self.rejecting(device, user_message(f"r{self.prompts} {rng.randint(3, 9)}")),
                )

    def rejecting(self, device: test_chaos.Device, msg: Any) -> Callable[[], Awaitable[None]]:
        """A send with ``reject`` whose acknowledgement or refusal is logged."""

        async def send() -> None:
            try:
                await device.session.send(msg, multitask="reject")
            except RunwireError as exc:
                if exc.code == "THREAD_BUSY":
                    self.refused[device.session_id].append(msg.id)
                raise
            self.log.acked[device.session_id].append(msg.id)

        return send

    def answer_all(self, device: test_chaos.Device) -> None:
        """Answer, from ``device``, every question its view shows a Run waiting on."""
        tree = device.session.view.tree
        for info in device.session.view.runs():
            questions = tree.interrupts(info.run_id)
            if not questions:
                continue
            entry = InterruptEntry(
                id=new_id(),
                run_id=info.run_id,
                status="resumed",
                responses={q.id: "yes" for q in questions},
            )

            async def answer(entry: InterruptEntry = entry) -> None:
                await device.session.link.publish(entry)
                self.log.acked[device.session_id].append(entry.id)
                self.answers[device.session_id].append((entry.id, entry.run_id))

            self.spawn(f"{device.name} answers {info.run_id} {entry.id}", answer)

    async def outage(self, kind: str, seconds: float) -> None:
        """Stop Redis (with its data) or fill it, for ``seconds``."""
        async with self.redis_lock:
            self.log.actions.append(f"redis {kind} for {seconds:.2f}s")
            if kind == "oom":
                await anyio.to_thread.run_sync(self.raw.config_set, "maxmemory", 1)
                await anyio.sleep(seconds)
                await anyio.to_thread.run_sync(self.raw.config_set, "maxmemory", 0)
            else:
                await anyio.to_thread.run_sync(self.shutdown_redis)
                await anyio.sleep(seconds)
                await anyio.to_thread.run_sync(self.redis.start)
            self.log.actions.append(f"redis back from {kind}")

    def shutdown_redis(self) -> None:
        """Stop Redis with all its data saved (``SHUTDOWN SAVE``: ``save_and_kill`` loses
        what is written between its ``SAVE`` and the kill, which rewinds serials)."""
        subprocess.run(["redis-cli", "-p", str(self.redis.port), "shutdown", "save"], check=False)
        assert self.redis.proc is not None
        self.redis.proc.wait()

    # ------------------------------------------------------------- HTTP --

    async def http(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Reply | None:
        """One request to a random node that is up; None when the connection failed."""
        node = self.rng.choice([n for n in range(3) if self.up[n]])
        data = None if body is None else json.dumps(body).encode()
        sent = dict(headers or {})
        if data is not None:
            sent["Content-Type"] = "application/json"
        try:
            return await anyio.to_thread.run_sync(
                _request, self.ports[node], method, path, data, sent, False
            )
        except (OSError, http.client.HTTPException):
            return None

    async def http_publish(self, session_id: str, message_id: str, strategy: str | None) -> None:
        """POST a prompt until an answer that is no outage; log its ack or refusal."""
        body: dict[str, Any] = {"message": f"h{message_id[:4]} {self.rng.randint(3, 20)}"}
        body["message_id"] = message_id
        if strategy is not None:
            body["multitask"] = strategy
        while True:
            reply = await self.http("POST", f"/v1/sessions/{session_id}/messages", body)
            if reply is None or reply.status == 503:
                await anyio.sleep(0.1)
                continue
            if reply.status == 201:
                self.log.acked[session_id].append(message_id)
            elif reply.status == 409:
                self.refused[session_id].append(message_id)
            else:
                self.log.errors.append(f"http publish {message_id}: {reply.status} {reply.body!r}")
            return

    async def read_events(self, session_id: str) -> None:
        """An SSE reader: keeps every entry event in ``self.sse`` until told to stop."""
        last: str | None = None
        while not self.stopping.is_set():
            query = "wait=1&limit=50" + ("" if last is not None else "&from=0")
            headers = {"Last-Event-ID": last} if last is not None else {}
            reply = await self.http(
                "GET", f"/v1/sessions/{session_id}/events?{query}", None, headers
            )
            if reply is None or reply.status != 200:
                if reply is not None and reply.status != 503:
                    self.sse_errors.append(f"{session_id} events: {reply.status} {reply.body!r}")
                await anyio.sleep(0.1)
                continue
            found, _, left = sse(reply.body)
            for event in found:
                if event.event == "reset":
                    self.sse_resets[session_id] += 1
                    self.sse[session_id].clear()
                elif event.event == "entry":
                    entry = json.loads(event.data)
                    self.sse[session_id].append((entry["serial"], entry["id"]))
            last = left if left is not None else last
            await anyio.sleep(0.025)


async def quiesced(chaos: OutageChaos, store: RedisStore) -> dict[str, list[dict[str, Any]]]:
    """Answer what waits, until every Run ended and every device and reader is caught up."""
    history: dict[str, list[dict[str, Any]]] = {}
    with anyio.move_on_after(30):
        while True:
            for device in chaos.devices:
                chaos.answer_all(device)
            history = {s: await stored(store, s) for s in SESSIONS}
            runs_done = True
            for session_id in SESSIONS:
                records = await store.runs(session_id)
                runs_done &= all(r.status in TERMINAL for r in records)
            readers_done = all(
                chaos.sse[s] == [(e["serial"], e["id"]) for e in history.get(s, [])]
                for s in SESSIONS
            )
            devices_done = not check(chaos, history)
            if runs_done and readers_done and devices_done:
                return history
            print(f"quiescing: runs {runs_done}, readers {readers_done}, devices {devices_done}")
            await anyio.sleep(0.3)
    return history


def check_outages(chaos: OutageChaos, history: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The invariants this module adds to ``test_chaos.check``."""
    problems: list[str] = list(chaos.sse_errors)
    for session_id, entries in history.items():
        want = [(e["serial"], e["id"]) for e in entries]
        got = chaos.sse[session_id]
        if got != want:
            problems.append(
                f"{session_id}: the SSE reader holds {len(got)} entries, the store {len(want)}; "
                f"first difference at {test_chaos.first_difference(got, want)}"
            )
        if chaos.sse_resets[session_id]:
            problems.append(f"{session_id}: the SSE reader was reset")
        ids = Counter(e["id"] for e in entries)
        for entry_id in chaos.refused[session_id]:
            if ids[entry_id]:
                problems.append(f"{session_id}: refused {entry_id} stored {ids[entry_id]} times")
        problems.extend(check_rejects(session_id, entries))
        problems.extend(check_answers(chaos, session_id, entries))
    return problems


def check_rejects(session_id: str, entries: list[dict[str, Any]]) -> list[str]:
    """A ``reject`` prompt is stored only while no other Run is pending or active."""
    problems: list[str] = []
    status: dict[str, str] = {}
    for entry in entries:
        if entry["kind"] == "message" and entry.get("intent", "prompt") == "prompt":
            going = sorted(r for r, s in status.items() if s in ("pending", "active"))
            if entry.get("multitask") == "reject" and going:
                problems.append(
                    f"{session_id}: reject prompt {entry['id']} (serial {entry['serial']}) "
                    f"stored while {going} went on"
                )
            status[entry["run_id"]] = "queued" if entry.get("queued") else "pending"
        elif entry["kind"] == "run":
            status[entry["run_id"]] = entry["status"]
    return problems


def check_answers(chaos: OutageChaos, session_id: str, entries: list[dict[str, Any]]) -> list[str]:
    """Every acknowledged answer resumed its Run: it went ``pending`` after the answer and,
    if it completed, its handler got the answer."""
    problems: list[str] = []
    for answer_id, run_id in chaos.answers[session_id]:
        serial = next((e["serial"] for e in entries if e["id"] == answer_id), None)
        if serial is None:
            continue  # reported as an acked publish not stored
        after = [e for e in entries if e["serial"] > serial and e.get("run_id") == run_id]
        ends = [e["status"] for e in after if e["kind"] == "run" and e["status"] in TERMINAL]
        resumed = any(e["kind"] == "run" and e["status"] == "pending" for e in after)
        cancelled = any(e["kind"] == "cancel" for e in after)
        if not resumed and not cancelled:
            problems.append(
                f"{session_id}: answer {answer_id} did not resume {run_id}: "
                + test_chaos.trail(entries, run_id)
            )
        if ends == ["complete"] and not chaos.answered.get(run_id):
            problems.append(
                f"{session_id}: {run_id} completed without its handler's answer "
                f"(answer {answer_id}): " + test_chaos.trail(entries, run_id)
            )
    return problems


async def test_chaos_with_outages(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is needed (CI installs Debian's redis-server)")
    redis_server = ThrowawayRedis(tmp_path)
    redis_server.start()
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    cluster = Cluster(store=url)
    rng = random.Random(SEED)
    chaos = OutageChaos(cluster, rng, redis_server)
    store = RedisStore(url)
    await store.start()
    try:
        async with anyio.create_task_group() as workers:
            chaos.workers_tg = workers
            try:
                await run_outage_chaos(chaos, store, rng)
            finally:
                await chaos.aclose()
    finally:
        await store.aclose()
        chaos.raw.close()
        for node in cluster.nodes:
            node.kill()
        if redis_server.proc is not None:
            redis_server.proc.kill()
            redis_server.proc.wait()


async def run_outage_chaos(chaos: OutageChaos, store: RedisStore, rng: random.Random) -> None:
    """Start everything, run the schedule with the readers on, quiesce and check."""
    await chaos.start()
    async with anyio.create_task_group() as readers:
        for session_id in SESSIONS:
            readers.start_soon(chaos.read_events, session_id)
        async with anyio.create_task_group() as tg:
            chaos.tg = tg
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                with anyio.fail_after(30):
                    await chaos.step()
                await anyio.sleep(rng.uniform(0.01, 0.2))
        assert all(chaos.up)
        async with anyio.create_task_group() as tg:
            chaos.tg = tg  # for the answers quiescing gives
            history = await quiesced(chaos, store)
        chaos.stopping.set()
    problems = check(chaos, history) + check_outages(chaos, history) + chaos.log.errors
    kinds = Counter(a.split()[1] for a in chaos.log.actions if len(a.split()) > 1)
    ended = Counter(r["status"] for h in history.values() for r in h if r["kind"] == "run")
    print(f"seed {SEED}: {dict(kinds)}; run entries {dict(ended)}")
    assert not problems, (
        f"seed {SEED}: " + "\n".join(problems) + "\nactions:\n" + "\n".join(chaos.log.actions)
    )
