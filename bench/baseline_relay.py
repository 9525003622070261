"""A bare websockets + orjson relay: the benchmark's baseline.

``python bench/baseline_relay.py --port N`` (0 picks a free port; the real one
is printed as ``baseline relay listening on ws://HOST:PORT``) speaks just
enough of runwire protocol v1 for the benchmark's load generator to drive it
exactly as it drives the real relay:

* ``hello`` -> ``welcome``;
* ``attach`` -> ``attached`` (no history: ``entries`` is always empty);
* ``publish`` -> the entry, with a per-session serial and nothing else added,
  is sent as a ``deliver`` frame to every connection attached to the session
  (the publisher too, if attached), then an ``ack`` goes to the publisher;
* ``detach`` -> ``ack``; anything else with a ``req`` -> ``error``.

No storage, no validation beyond ``orjson.loads``, no coalescing: one frame in,
one frame out per subscriber. Runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import signal
from collections.abc import Sequence
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

__all__ = ["BaselineRelay", "main"]


class BaselineRelay:
    """Sessions to attached connections, and a serial per session."""

    def __init__(self) -> None:
        self.subscribers: dict[str, set[ServerConnection]] = {}
        self.serials: dict[str, int] = {}
        self._ids = itertools.count(1)

    async def handler(self, ws: ServerConnection) -> None:
        """Serve one connection until it closes."""
        attached: set[str] = set()
        try:
            async for raw in ws:
                try:
                    frame = orjson.loads(raw)
                    kind = frame["type"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue
                req = frame.get("req")
                if kind == "publish":
                    await self._publish(ws, frame, req)
                elif kind == "attach":
                    session_id = frame["session_id"]
                    self.subscribers.setdefault(session_id, set()).add(ws)
                    attached.add(session_id)
                    await ws.send(_attached(req, session_id, self.serials.get(session_id, 0)))
                elif kind == "hello":
                    n = next(self._ids)
                    client_id = frame.get("client_id") or f"c{n}"
                    await ws.send(_welcome(req, client_id, f"conn{n}"))
                elif kind == "detach":
                    session_id = frame["session_id"]
                    self.subscribers.get(session_id, set()).discard(ws)
                    attached.discard(session_id)
                    await ws.send(orjson.dumps({"type": "ack", "req": req}))
                elif req is not None:
                    await ws.send(_error(req, kind))
        except ConnectionClosed:
            pass
        finally:
            for session_id in attached:
                subs = self.subscribers.get(session_id)
                if subs is not None:
                    subs.discard(ws)
                    if not subs:
                        del self.subscribers[session_id]

    async def _publish(self, ws: ServerConnection, frame: dict[str, Any], req: Any) -> None:
        session_id = frame["session_id"]
        serial = self.serials.get(session_id, 0) + 1
        self.serials[session_id] = serial
        entry = frame["entry"]
        entry["serial"] = serial
        data = orjson.dumps({"type": "deliver", "session_id": session_id, "entries": [entry]})
        for sub in tuple(self.subscribers.get(session_id, ())):
            try:
                await sub.send(data, text=True)
            except ConnectionClosed:
                pass
        await ws.send(orjson.dumps({"type": "ack", "req": req, "serial": serial}), text=True)


def _welcome(req: Any, client_id: str, connection_id: str) -> str:
    return orjson.dumps(
        {
            "type": "welcome",
            "v": 1,
            "req": req,
            "client_id": client_id,
            "connection_id": connection_id,
            "max_frame_bytes": 1024 * 1024,
        }
    ).decode()


def _attached(req: Any, session_id: str, head: int) -> str:
    return orjson.dumps(
        {
            "type": "attached",
            "req": req,
            "session_id": session_id,
            "epoch": "baseline",
            "head": head,
            "entries": [],
            "has_older": False,
        }
    ).decode()


def _error(req: Any, kind: Any) -> str:
    return orjson.dumps(
        {
            "type": "error",
            "req": req,
            "error": {"code": "UNKNOWN_FRAME", "message": f"unknown frame type {kind!r}"},
        }
    ).decode()


async def run(host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM; print the URL once listening."""
    relay = BaselineRelay()
    async with serve(
        relay.handler,
        host,
        port,
        compression=None,
        max_size=4 * 1024 * 1024,
        max_queue=64,
        ping_interval=20,
        ping_timeout=20,
    ) as server:
        real_port = next(iter(server.sockets)).getsockname()[1]
        print(f"baseline relay listening on ws://{host}:{real_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: ``python bench/baseline_relay.py --port N``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8788, help="0 picks a free port")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(run(args.host, args.port))


if __name__ == "__main__":
    main()
