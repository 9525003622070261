"""A loopback TCP proxy between an SDK and a relay whose link a test cuts and heals.

``cut()`` drops every connection through it and stops listening, so the SDK's
reconnects are refused (a network partition: the process keeps running);
``heal()`` listens again on the same port. ``blackhole()`` keeps every connection
open but forwards nothing more, either way, and nothing of new ones (packets dropped,
no FIN or RST): only a keepalive notices; ``heal()`` forwards again.
"""

from __future__ import annotations

import asyncio


class LinkProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.holed = False

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Drop every connection and refuse new ones until ``heal()``."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def blackhole(self) -> None:
        """Drop whatever goes through from now on, closing nothing."""
        self.holed = True

    async def heal(self) -> None:
        self.holed = False
        if self._server is None:
            await self.start()

    async def aclose(self) -> None:
        await self.cut()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    if self.holed:
                        continue
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                sink.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
