"""Raw protocol v1 peers for the load generator, and the token source.

``RawConn`` speaks frames over one WebSocket with no SDK (the subscribers that
count tokens, and the agents of the baseline and of runwire without the
SDK). ``Tally`` is what the subscribers count. ``tokens()`` is the "model":
tokens whose text is ``<microseconds>`` stamped when offered, so a subscriber
knows each token's age. ``publish_coalesced()`` is ``run.pipe()``'s rule over
raw frames: at most one append in flight, tokens arriving meanwhile merge into
the next append.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import resource
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

__all__ = [
    "BenchError",
    "Prompter",
    "RawConn",
    "RawPrompter",
    "SdkPrompter",
    "Tally",
    "entry",
    "now_us",
    "publish_coalesced",
    "raise_nofile",
    "tokens",
]

_BASE_NS = time.perf_counter_ns()
_TOKEN = re.compile(r"<(\d+)>")


def now_us() -> int:
    """Microseconds on this process's monotonic clock."""
    return (time.perf_counter_ns() - _BASE_NS) // 1000


def raise_nofile() -> None:
    """Raise this process's open-file limit to its hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def entry(kind: str, entry_id: str, run_id: str, **fields: Any) -> dict[str, Any]:
    """An entry body as a publisher sends it."""
    return {"kind": kind, "id": entry_id, "run_id": run_id, **fields}


@dataclass
class Tally:
    """What the subscribers and the agents saw inside the measuring window."""

    measuring: bool = False
    tokens: int = 0
    frames: int = 0
    latencies_us: list[int] | None = None
    steer_us: list[int] = field(default_factory=list)
    steer_missed: int = 0
    errors: int = 0
    error_codes: dict[str, int] = field(default_factory=dict)
    node_tokens: dict[int, int] = field(default_factory=dict)
    """Tokens counted by the subscribers on each relay node (several nodes)."""
    far_latencies_us: list[int] | None = None
    """Latencies of the tokens a subscriber got on another node than the agent's."""

    def on_deliver(self, frame: dict[str, Any], node: int = 0, far: bool = False) -> None:
        """Count the tokens of one ``deliver`` frame a subscriber (on relay ``node``) got.

        ``far``: the subscriber is on another relay node than the session's agent.
        """
        if not self.measuring:
            return
        n = 0
        lat = self.latencies_us
        now = now_us() if lat is not None else 0
        for entry in frame["entries"]:
            if entry.get("kind") != "response_append":
                continue
            for chunk in entry["chunks"]:
                delta = chunk.get("delta")
                if not delta:
                    continue
                if lat is None:
                    n += delta.count("<")
                else:
                    stamps = _TOKEN.findall(delta)
                    n += len(stamps)
                    lat.extend(now - int(s) for s in stamps)
                    if far and self.far_latencies_us is not None:
                        self.far_latencies_us.extend(now - int(s) for s in stamps)
        if n:
            self.tokens += n
            self.frames += 1
            self.node_tokens[node] = self.node_tokens.get(node, 0) + n

    def error(self, code: str) -> None:
        """Note an error frame the relay sent."""
        self.errors += 1
        self.error_codes[code] = self.error_codes.get(code, 0) + 1


class BenchError(Exception):
    """The relay answered a request with an error frame."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = str(error.get("code"))


class RawConn:
    """Protocol v1 over one WebSocket, frame by frame (no SDK)."""

    def __init__(
        self,
        ws: ClientConnection,
        tally: Tally,
        on_deliver: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        self.ws = ws
        self.tally = tally
        self.on_deliver = on_deliver
        self._reqs = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(
        cls,
        url: str,
        tally: Tally,
        *,
        role: str = "client",
        on_deliver: Callable[[dict[str, Any]], None] | None = None,
    ) -> RawConn:
        """Connect and say ``hello``."""
        ws = await connect(
            url, compression=None, max_size=None, ping_interval=None, open_timeout=30
        )
        conn = cls(ws, tally, on_deliver)
        await conn.request({"type": "hello", "v": 1, "role": role})
        return conn

    async def attach(self, session_id: str) -> None:
        """Attach to a session (newest page, which is empty for a fresh session)."""
        await self.request({"type": "attach", "session_id": session_id, "limit": 1})

    async def send(self, frame: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Send a request; the future resolves to its reply frame."""
        req = next(self._reqs)
        frame["req"] = req
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[req] = future
        await self.ws.send(orjson.dumps(frame), text=True)
        return future

    async def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send a request and return its reply; raises ``BenchError`` for an error reply."""
        reply = await (await self.send(frame))
        if reply["type"] == "error":
            raise BenchError(reply["error"])
        return reply

    async def publish(self, session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Publish an entry and return the ack."""
        return await self.request({"type": "publish", "session_id": session_id, "entry": entry})

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                frame = orjson.loads(raw)
                kind = frame["type"]
                if kind == "deliver":
                    if self.on_deliver is not None:
                        self.on_deliver(frame)
                    continue
                if kind == "error":
                    self.tally.error(str(frame["error"].get("code")))
                future = self._waiting.pop(frame.get("req"), None)
                if future is not None and not future.done():
                    future.set_result(frame)
        except ConnectionClosed:
            pass
        finally:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("connection closed"))
                    future.exception()  # retrieved: fire-and-forget sends never await it
            self._waiting.clear()

    async def close(self) -> None:
        """Close the WebSocket and wait for the reader to end."""
        await self.ws.close()
        await self._reader


# ------------------------------------------------------------------ tokens --


async def tokens(limit: int, rate: float | None, stop: asyncio.Event) -> AsyncIterator[str]:
    """A model's output: ``<now_us>`` tokens, at ``rate`` per second or as fast as taken."""
    if rate is None:
        for _ in range(limit):
            if stop.is_set():
                return
            yield f"<{now_us()}>"
            await asyncio.sleep(0)  # a model awaits between tokens; let the loop run
        return
    loop = asyncio.get_running_loop()
    period = 1.0 / rate
    at = loop.time() + random.random() * period
    for _ in range(limit):
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if stop.is_set():
            return
        yield f"<{now_us()}>"
        at += period


async def publish_coalesced(
    conn: RawConn,
    session_id: str,
    run_id: str,
    message_id: str,
    stream: AsyncIterable[str],
    next_id: Callable[[], str],
    window: float = 0.0,
) -> str:
    """Publish ``stream`` as appends, one in flight; returns the whole text.

    A reader task takes tokens as fast as the stream yields them; each append
    carries everything that arrived while the previous one was in flight,
    merged into one ``text-delta``. With a ``window`` (seconds), an append also
    waits until its oldest token has waited that long, or the stream ends: the
    rule of the agent SDK's ``rollup_window``.
    """
    pending: list[str] = []
    sent: list[str] = []
    wake = asyncio.Event()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    oldest = 0.0  # when the oldest pending token arrived

    async def read() -> None:
        nonlocal oldest
        try:
            async for token in stream:
                if not pending:
                    oldest = loop.time()
                pending.append(token)
                wake.set()
        finally:
            done.set()
            wake.set()

    reader = loop.create_task(read())
    chunks: list[dict[str, Any]] = [{"type": "text-start", "id": "text-1"}]
    try:
        while pending or not done.is_set():
            if not pending:
                await wake.wait()
                wake.clear()
                continue
            hold = oldest + window - loop.time()
            if window and hold > 0 and not done.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(hold):
                        await done.wait()
            text = "".join(pending)
            pending.clear()
            sent.append(text)
            chunks.append({"type": "text-delta", "id": "text-1", "delta": text})
            append = entry(
                "response_append", next_id(), run_id, message_id=message_id, chunks=chunks
            )
            await conn.publish(session_id, append)
            chunks = []
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return "".join(sent)


def _user(text: str, message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


class Prompter(Protocol):
    """Subscriber 1's publishing side: it starts Runs and steers them."""

    async def prompt(self) -> str:
        """Start a Run; returns its run id once the relay acknowledged the prompt."""
        ...

    async def steer(self, run_id: str) -> None:
        """Send a steering message to ``run_id`` (not waiting for the relay)."""
        ...


class RawPrompter:
    """Prompts and steers as raw ``publish`` frames."""

    def __init__(self, conn: RawConn, session_id: str) -> None:
        self.conn = conn
        self.session_id = session_id
        self._ids = itertools.count(1)

    async def prompt(self) -> str:
        """Start a Run; returns its run id once the relay acknowledged the prompt."""
        n = next(self._ids)
        run_id = f"run-{n}"
        entry = {
            "kind": "message",
            "intent": "prompt",
            "id": f"p{n}",
            "run_id": run_id,
            "agent": "bench",
            "message": _user("go", f"p{n}"),
        }
        await self.conn.publish(self.session_id, entry)
        return run_id

    async def steer(self, run_id: str) -> None:
        """Publish a steering message to ``run_id`` (not waiting for the ack)."""
        n = next(self._ids)
        entry = {
            "kind": "message",
            "intent": "steer",
            "id": f"s{n}",
            "run_id": run_id,
            "message": _user("steer", f"s{n}"),
        }
        await self.conn.send({"type": "publish", "session_id": self.session_id, "entry": entry})


class SdkPrompter:
    """Subscriber 1 as a ``client_side`` session: ``send()`` and ``run.steer()``."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.runs: dict[str, Any] = {}

    async def prompt(self) -> str:
        """``session.send()``: returns once the relay sequenced the prompt."""
        run = await self.session.send("go")
        self.runs = {run.run_id: run}
        return str(run.run_id)

    async def steer(self, run_id: str) -> None:
        """``run.steer()``: returns at once; the SDK publishes in the background."""
        self.runs[run_id].steer("steer")
