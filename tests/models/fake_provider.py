"""A local HTTP server that replays recorded SSE files as a model provider would stream them.

Each request takes the next ``Reply`` of the script: an SSE file from
``tests/models/sse/`` sent event by event (``interval`` seconds apart), then
either the end of the body or, with ``hold``, an open connection that sends
nothing more until the client closes it; or an HTTP error with a JSON body.
The server records each request's JSON body and, per connection, the moment
(``time.monotonic()``) it saw the client close. No network: it listens on
127.0.0.1, port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SSE_DIR = Path(__file__).parent / "sse"


@dataclass
class Reply:
    """What one request gets."""

    sse: str | None = None
    interval: float = 0.0
    hold: bool = False
    status: int = 200
    body: dict[str, Any] | None = None


@dataclass
class Exchange:
    """One request and what became of its connection."""

    path: str
    body: Any
    closed_at: float | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    sent_first: asyncio.Event = field(default_factory=asyncio.Event)


def sse_events(name: str) -> list[bytes]:
    """The events of an SSE file, each with its blank line."""
    text = (SSE_DIR / name).read_text()
    return [block.strip("\n").encode() + b"\n\n" for block in text.split("\n\n") if block.strip()]


class FakeProvider:
    """Serves ``script`` replies in order; ``exchanges`` records what happened."""

    def __init__(self, *replies: Reply, interval: float = 0.0) -> None:
        self.script = list(replies)
        self.default_interval = interval
        self.exchanges: list[Exchange] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeProvider:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # a kept-alive connection may carry several requests
                request = await _read_request(reader)
                if request is None:
                    return
                path, body = request
                exchange = Exchange(path=path, body=body)
                self.exchanges.append(exchange)
                reply = self.script.pop(0) if self.script else Reply(status=500, body=_err("none"))
                if not await self._respond(reply, exchange, reader, writer):
                    return
        finally:
            writer.close()

    async def _respond(
        self,
        reply: Reply,
        exchange: Exchange,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Send ``reply``; True if the connection can take another request."""
        if reply.sse is None:
            data = json.dumps(reply.body or {}).encode()
            head = (
                f"HTTP/1.1 {reply.status} Error\r\ncontent-type: application/json\r\n"
                f"content-length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"connection: close\r\n\r\n"
        )
        watcher = asyncio.ensure_future(self._watch_close(reader, exchange))
        try:
            interval = reply.interval or self.default_interval
            for event in sse_events(reply.sse):
                if exchange.closed.is_set():
                    return False
                writer.write(event)
                await writer.drain()
                exchange.sent_first.set()
                if interval:
                    await asyncio.sleep(interval)
            if reply.hold:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(exchange.closed.wait(), 30)
        except (ConnectionError, OSError):
            self._saw_close(exchange)
        finally:
            watcher.cancel()
        return False

    async def _watch_close(self, reader: asyncio.StreamReader, exchange: Exchange) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while await reader.read(4096):
                pass
        self._saw_close(exchange)

    @staticmethod
    def _saw_close(exchange: Exchange) -> None:
        if exchange.closed_at is None:
            exchange.closed_at = time.monotonic()
            exchange.closed.set()


def _err(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error"}}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, Any] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length") or 0)
    raw = await reader.readexactly(length) if length else b""
    return path, json.loads(raw) if raw else None
