"""``FrontConnection``: a websockets connection that the HTTP front reads first.

websockets' ``serve(create_connection=...)`` builds every connection of the
relay's port with the class ``connection_class`` returns. Until a WebSocket
handshake arrives, the connection's bytes go to its ``Front``
(``relay._http_front``), which answers HTTP requests itself; websockets is told
about the connection (``connection_made``) only when the front passes it a
handshake. The connection caps are checked as the connection opens
(``relay._admission``).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, cast

from websockets.server import ServerProtocol

from transport.errors import RunwireError

from ._admission import refuse_raw
from ._http_front import Front, FrontConfig
from ._http_message import HttpRequest
from ._wsconn import RelayConnection

__all__ = ["FrontConnection", "connection_class"]


class FrontConnection(RelayConnection):
    """A connection read by the HTTP front until a WebSocket handshake passes it to
    websockets (``connection_class`` sets ``config``)."""

    config: ClassVar[FrontConfig]

    def __init__(self, protocol: ServerProtocol, *args: Any, **kwargs: Any) -> None:
        super().__init__(protocol, *args, **kwargs)
        self.front: Front | None = None
        self.websocket = False
        self.admitted: str | None = None
        self.opening: HttpRequest | None = None
        """The handshake's request as the client sent it (its token may not fit websockets')."""
        self.head_refusal: RunwireError | None = None
        """Why the handshake's token is refused before it was read (too large), or None."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        peer = raw.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        refusal = self.config.admission.admit(ip)
        if refusal is not None:
            refuse_raw(raw, *refusal)
            return
        self.admitted = ip
        self.front = Front(self.config, raw, self._hand_over)

    def _hand_over(self, data: bytes, request: HttpRequest, refusal: RunwireError | None) -> None:
        front, self.front = self.front, None  # websockets has the connection from now on
        assert front is not None
        self.websocket = True
        self.opening, self.head_refusal = request, refusal
        super().connection_made(front.transport)
        super().data_received(data)

    def data_received(self, data: bytes) -> None:
        if self.websocket:
            super().data_received(data)
        elif self.front is not None:
            self.front.data_received(data)

    # asyncio's contract: a true value keeps the transport open to write the answer.
    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self.websocket:
            super().eof_received()
            return None
        return self.front is not None and self.front.eof_received()

    def pause_writing(self) -> None:
        if self.websocket:
            super().pause_writing()

    def resume_writing(self) -> None:
        if self.websocket:
            super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted is not None:
            self.config.admission.release(self.admitted)
            self.admitted = None
        if self.front is not None:
            self.front.connection_lost()
            self.front = None  # no cycle left for the collector: the memory goes back at once
        if self.websocket:
            super().connection_lost(exc)


def connection_class(config: FrontConfig) -> type[FrontConnection]:
    """The connection class for websockets' ``serve(create_connection=...)``."""
    return type("HttpFrontConnection", (FrontConnection,), {"config": config})
