"""Redis replies straight off the socket, for the store's two hot connections.

Design
------
redis-py connects a connection (the URL's host or socket, TLS, AUTH, SELECT
and its handshake). ``Wire(on_reply).adopt(conn)`` then takes its transport over:
the transport's protocol becomes a ``Wire``. Its ``data_received`` feeds a
hiredis reader and passes each complete reply on at once, inside the event
loop's read callback:

* to ``on_reply(wire, reply)`` when it was given. That is the pub/sub
  connection, whose messages and confirmations come as they come.
* otherwise to the oldest ``request`` still waiting for replies. That is the
  command connection, whose replies come in the order the commands went out.

redis-py's own read path costs a task wake-up and a chain of coroutines per
read (``Connection.read_response`` -> parser -> ``StreamReader.read``), more
than the rest of handling a pub/sub message. Writes go straight to the
transport, encoded by ``pack``.

When the connection ends (Redis closed it, ``close()``, or redis-py's
``disconnect`` closed the transport) ``lost`` is done, every waiting
``request`` fails with ``redis.exceptions.ConnectionError`` and redis-py's
protocol is told, so its ``disconnect`` finishes as it would have. A reply that
nothing waits for is a broken stream: the connection is closed.

Taking the transport over reads two attributes redis-py keeps private on its
asyncio ``Connection`` (``_writer``, ``_reader``), there from redis-py 5 to 8
at least; ``unsupported`` says so before any connection is made, should a
later redis-py lack them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, RedisError

__all__ = ["Wire", "pack", "unsupported"]


def unsupported(conn: AbstractConnection) -> str | None:
    """Why ``Wire.adopt`` could not take ``conn``'s transport over, or None if it can."""
    missing = [name for name in ("_writer", "_reader") if not hasattr(conn, name)]
    if not missing:
        return None
    import redis

    version = getattr(redis, "__version__", "?")
    return (
        f"redis-py {version} is not supported: its asyncio connection has no "
        f"{' or '.join(missing)}, which the store takes over (redis-py 5 to 8 have them)"
    )


def pack(commands: list[tuple[Any, ...]]) -> bytes:
    """RESP-encode ``commands`` (str, bytes and int arguments); faster than redis-py's."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, str):
                arg = arg.encode()
            elif isinstance(arg, int):
                arg = b"%d" % arg
            out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class _Request:
    __slots__ = ("count", "future", "replies")

    def __init__(self, count: int, future: asyncio.Future[list[Any]]) -> None:
        self.count = count
        self.future = future
        self.replies: list[Any] = []


class Wire(asyncio.Protocol):
    """A connected Redis connection's transport, read without redis-py (module docstring)."""

    def __init__(self, on_reply: Callable[[Wire, Any], None] | None = None) -> None:
        self._on_reply = on_reply
        self._reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error
        )
        self._transport: asyncio.Transport | None = None
        self._previous: asyncio.BaseProtocol | None = None  # redis-py's, told when it ends
        self._waiting: deque[_Request] = deque()
        self._writable: asyncio.Future[None] | None = None  # while the transport is paused
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done once the connection ended."""

    def adopt(self, conn: AbstractConnection) -> Wire:
        """Take over the transport of ``conn``, which redis-py has just connected; returns self."""
        # redis-py has no public accessor for the stream it connected: read its own.
        writer = cast(Any, conn)._writer  # noqa: SLF001, RUF100
        if writer is None:
            raise RedisConnectionError("the connection is not connected")
        transport = cast(asyncio.Transport, writer.transport)
        if transport.is_closing():
            raise RedisConnectionError("the connection is closing")
        self._transport = transport
        self._previous = transport.get_protocol()
        # Bytes redis-py's stream read but did not consume (none after a handshake, normally).
        left = getattr(cast(Any, conn)._reader, "_buffer", b"")  # noqa: SLF001, RUF100
        transport.set_protocol(self)
        if left:
            self.data_received(bytes(left))
        return self

    # -- use ---------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Send ``data`` (already RESP-encoded); a no-op once the connection is lost."""
        if self._transport is not None and not self.lost.done():
            self._transport.write(data)

    async def request(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` as one pipeline and return their replies, errors as values."""
        if self.lost.done() or self._transport is None:
            raise RedisConnectionError("the connection to Redis is closed")
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Request(len(commands), future))
        self._transport.write(pack(commands))
        if self._writable is not None:
            await asyncio.shield(self._writable)
        return await future

    def close(self) -> None:
        """Close the connection (``lost`` is done once the transport has let go)."""
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol --------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        try:
            while (reply := reader.gets()) is not False:
                if self._on_reply is not None:
                    self._on_reply(self, reply)
                    continue
                if not self._waiting:
                    raise InvalidResponse("a reply nothing asked for")
                head = self._waiting[0]
                head.replies.append(reply)
                if len(head.replies) == head.count:
                    self._waiting.popleft()
                    if not head.future.done():
                        head.future.set_result(head.replies)
        except RedisError as exc:
            self._end(exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc)
        if self._previous is not None:
            # redis-py's stream sees the end too (its ``disconnect`` waits for that).
            self._previous.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            if not self._writable.done():
                self._writable.set_result(None)
            self._writable = None

    def _end(self, exc: BaseException | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        error = RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}")
        while self._waiting:
            future = self._waiting.popleft().future
            if not future.done():
                future.set_exception(error)
        self.resume_writing()
