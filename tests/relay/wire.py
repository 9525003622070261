"""A raw protocol peer for relay tests: frames as dicts over a real WebSocket."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
from websockets.asyncio.client import ClientConnection, connect

from relay.auth import mint_token
from transport.messages import new_id, user_message


class RawPeer:
    """Speaks protocol v1 frame by frame; keeps deliveries it was not asked about."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.req = 0
        self.inbox: list[dict[str, Any]] = []
        self.client_id = ""

    @classmethod
    async def open(cls, url: str, *, role: str = "client", client_id: str | None = None) -> RawPeer:
        ws = await connect(url, max_size=None)
        peer = cls(ws)
        hello: dict[str, Any] = {"type": "hello", "v": 1, "role": role}
        if client_id:
            hello["client_id"] = client_id
        await peer.send(hello)
        welcome = await peer.recv()
        assert welcome["type"] == "welcome", welcome
        peer.client_id = welcome["client_id"]
        return peer

    async def close(self) -> None:
        await self.ws.close()

    async def send(self, frame: dict[str, Any] | bytes | str) -> None:
        if isinstance(frame, dict):
            await self.ws.send(orjson.dumps(frame).decode())
        else:
            await self.ws.send(frame)

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            data = orjson.loads(await self.ws.recv())
        assert isinstance(data, dict)
        return data

    async def request(self, frame: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """Send with a fresh req id and return the reply, queueing other frames."""
        self.req += 1
        frame = {**frame, "req": self.req}
        await self.send(frame)
        with anyio.fail_after(timeout):
            while True:
                reply = await self.recv(timeout)
                if reply.get("req") == self.req:
                    return reply
                self.inbox.append(reply)

    async def next(self, type_: str, timeout: float = 5.0) -> dict[str, Any]:
        """The next frame of ``type_`` (from the inbox first)."""
        for i, frame in enumerate(self.inbox):
            if frame["type"] == type_:
                return self.inbox.pop(i)
        with anyio.fail_after(timeout):
            while True:
                frame = await self.recv(timeout)
                if frame["type"] == type_:
                    return frame
                self.inbox.append(frame)

    async def entries(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The next ``count`` delivered entries."""
        out: list[dict[str, Any]] = []
        with anyio.fail_after(timeout):
            while len(out) < count:
                frame = await self.next("deliver", timeout)
                out.extend(frame["entries"])
        return out

    async def attach(self, session_id: str, **kw: Any) -> dict[str, Any]:
        reply = await self.request({"type": "attach", "session_id": session_id, **kw})
        assert reply["type"] == "attached", reply
        return reply

    async def publish(
        self, session_id: str, entry: dict[str, Any], timeout: float = 5.0
    ) -> dict[str, Any]:
        frame = {"type": "publish", "session_id": session_id, "entry": entry}
        return await self.request(frame, timeout=timeout)


def prompt(
    run_id: str | None = None, text: str = "hello", agent: str = "default"
) -> dict[str, Any]:
    message = user_message(text).model_dump(mode="json")
    return {
        "kind": "message",
        "intent": "prompt",
        "id": message["id"],
        "run_id": run_id or new_id(),
        "agent": agent,
        "message": message,
    }


def steer(run_id: str, text: str) -> dict[str, Any]:
    message = user_message(text).model_dump(mode="json")
    return {
        "kind": "message",
        "intent": "steer",
        "id": message["id"],
        "run_id": run_id,
        "message": message,
    }


def run_status(run_id: str, status: str) -> dict[str, Any]:
    return {"kind": "run", "id": new_id(), "run_id": run_id, "status": status}


def append(run_id: str, message_id: str, text: str) -> dict[str, Any]:
    return {
        "kind": "response_append",
        "id": new_id(),
        "run_id": run_id,
        "message_id": message_id,
        "chunks": [{"type": "text-delta", "id": "t", "delta": text}],
    }


def sized_token(length: int, *, secret: str, sessions: dict[str, list[str]]) -> str:
    """An HS256 token for ``alice`` with ``sessions`` (and a padding pattern) of ``length``
    bytes, or up to 2 fewer: a JWT grows by 1 or 2 characters per byte of claims."""
    pad = 0
    while True:
        tok = mint_token(user="alice", sessions={**sessions, "pad-" + "x" * pad: []}, secret=secret)
        if len(tok) > length:
            break
        best = tok
        pad += max(1, (length - len(tok)) * 3 // 4 - 2)
    assert length - 2 <= len(best) <= length, (len(best), length)
    return best
