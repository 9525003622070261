"""``RelayConnection``: a ``ServerConnection`` that writes frames queued together at once.

websockets hands each outgoing frame to the transport on its own, and asyncio's
transport makes a ``send`` system call per write while its buffer is empty. A
peer often has several frames ready at one moment (a publisher's ``ack`` and
the ``deliver`` of its own entry, a burst of entries of several sessions):
``send_frames()`` serialises them all in one send context and ``send_data()``
joins what the protocol produced into one write, so they cost one system
call instead of one each. ``write_texts()``, what a peer's queue goes out
by, also frames them itself: the relay negotiates no extension, so a text
frame is a short header and the payload.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from websockets.asyncio.server import ServerConnection
from websockets.protocol import OPEN

__all__ = ["RelayConnection", "send_frames", "write_texts"]

_TEXT = 0x81
"""FIN and the text opcode: the first byte of every unfragmented text frame."""
_HEADS = [bytes((_TEXT, size)) for size in range(126)]
"""The whole header of a text frame of each payload size under 126 bytes (unmasked)."""
_pack_16 = struct.Struct("!BBH").pack
_pack_64 = struct.Struct("!BBQ").pack


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


def write_texts(ws: ServerConnection, frames: Sequence[bytes]) -> None:
    """Write text ``frames`` (UTF-8 payloads) in order, at once (one ``transport.write``).

    The relay negotiates no extension (``compression=None``), so a frame is a
    two-to-ten byte header and the payload: framed here, that costs a tenth of
    websockets' way (about 1.6 us less per frame). With an extension, a
    fragmented message under way or a connection not open, websockets frames
    them (and raises as ``send_text`` does).
    """
    protocol = ws.protocol
    pending = protocol.data_to_send() if protocol.writes else []  # a pong, say: first
    if (
        protocol.extensions
        or protocol.expect_continuation_frame
        or protocol.state is not OPEN
        or not all(pending)  # b"" asks to half-close: websockets' way
    ):
        protocol.writes[:0] = pending
        for frame in frames:
            protocol.send_text(frame)
        ws.send_data()  # one write on a RelayConnection
        return
    parts = pending
    for frame in frames:
        size = len(frame)
        if size < 126:
            parts.append(_HEADS[size])
        elif size < 65536:
            parts.append(_pack_16(_TEXT, 126, size))
        else:
            parts.append(_pack_64(_TEXT, 127, size))
        parts.append(frame)
    ws.transport.write(b"".join(parts))


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
