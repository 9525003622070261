"""``RelayConnection``: a ``ServerConnection`` that writes frames queued together at once.

websockets passes each outgoing frame to the transport on its own. asyncio's transport then
makes one ``send`` system call per write while its buffer is empty. A peer often has several
frames ready at one moment, such as a publisher's ``ack`` and the ``deliver`` of its own entry.
``send_frames()`` serialises them all in one send context, and ``send_data()`` joins what the
protocol produced into one write. So they cost one system call instead of one each.
"""

from __future__ import annotations

from collections.abc import Sequence

from websockets.asyncio.server import ServerConnection

__all__ = ["RelayConnection", "send_frames"]


class RelayConnection(ServerConnection):
    """Writes everything the protocol has queued with one ``transport.write``."""

    def send_data(self) -> None:
        chunks = self.protocol.data_to_send()
        if len(chunks) > 1 and all(chunks):
            self.transport.write(b"".join(chunks))
            return
        for data in chunks:  # as websockets does: b"" asks to half-close
            if data:
                self.transport.write(data)
            elif self.transport.can_write_eof():
                try:
                    self.transport.write_eof()
                except Exception:  # as websockets: write_eof's errors are not documented
                    pass
            else:
                self.transport.close()


async def send_frames(ws: ServerConnection, frames: Sequence[bytes]) -> None:
    """Send text ``frames`` in order, in one send context (one write on a ``RelayConnection``).

    Raises ``ConnectionClosed`` as ``ws.send`` does.
    """
    if len(frames) == 1:
        await ws.send(frames[0], text=True)
        return
    async with ws.send_context():
        for frame in frames:
            ws.protocol.send_text(frame)
