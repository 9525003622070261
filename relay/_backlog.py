"""What a reader gets of a session's stored entries: the ``attached`` reply and pages.

``attach`` subscribes a connection to a channel and queues its ``attached`` frame with
no await in between, so the connection misses nothing and gets nothing twice. A
client that resumes gets what it missed; one that missed too much, or whose history
was trimmed, gets the newest page and ``reset``, so it rebuilds rather than keep a gap.

An ``attached`` or ``page`` frame carries at most half a connection's send queue of
entries (``max_bytes``), so a reply never by itself closes its reader
``SLOW_CONSUMER``. ``newest_within`` keeps the newest entries that fit.
See docs/explanation/relay-internals.md ("Attaching").
"""

from __future__ import annotations

from collections.abc import Sequence

from transport import _codec as codec
from transport.errors import EPOCH_MISMATCH, RunwireError

from ._channel import Channel
from ._peer import Peer
from .store._base import StoredEntry

__all__ = ["attach", "entries_size", "newest_within"]


async def attach(
    channel: Channel,
    peer: Peer,
    req: int | str,
    *,
    from_serial: int | None,
    epoch: str | None,
    limit: int,
    backlog_max: int,
    max_bytes: int | None = None,
) -> None:
    """Subscribe ``peer`` and queue its ``attached`` frame, atomically.

    With ``from_serial`` of this epoch, the frame carries everything after it. Otherwise
    it carries the newest page, and ``reset`` tells a resuming client to rebuild rather
    than keep a silent gap. That is also the answer when more than ``backlog_max`` were
    missed, or the history it needs was trimmed.

    ``max_bytes`` bounds the entries the frame carries, so the frame never by itself
    overflows the peer's send queue. A backlog bigger than that is answered as one too
    long (``reset``). The newest page keeps only its newest entries that fit, and
    ``has_older`` then says there are more.

    A ``from_serial`` beyond what this node has taken in is caught up from the store
    first, so the client resumes rather than resets. It saw those entries through
    another node.

    Raises ``RunwireError(EPOCH_MISMATCH)``, subscribing nobody, when the channel
    reset meanwhile: the store lost its history, which its reads (``Channel.read_after``)
    or its subscription found out. Attach to the session loaded again then.
    """
    if (
        from_serial is not None
        and (epoch is None or epoch == channel.epoch)
        and from_serial > channel.last
    ):
        # The client saw entries this node has not taken in yet (stored through
        # another node, pub/sub still on its way): take them in from the store first.
        await channel.catch_up(from_serial)
    head = channel.last
    resume = from_serial is not None and (epoch is None or epoch == channel.epoch)
    if resume and from_serial is not None:
        if from_serial > head or head - from_serial > backlog_max:
            resume = False
        elif channel.first and from_serial < channel.first - 1:
            resume = False
    entries: list[StoredEntry] = []
    if resume and from_serial is not None:
        entries, fits = await _read_to_last(channel, [], from_serial, max_bytes)
        resume = fits
    if not resume:
        page, covered = await _newest_page(channel, limit)
        entries, _ = await _read_to_last(channel, page, covered, None)
        entries = newest_within(entries, max_bytes)
    reset = from_serial is not None and not resume
    if channel.reset:
        raise RunwireError(EPOCH_MISMATCH, f"the store lost the history of {channel.session_id!r}")
    if resume:
        has_older = bool(from_serial and from_serial >= channel.first > 0)
    else:
        oldest = entries[0].serial if entries else channel.last + 1
        has_older = channel.last > 0 and oldest > channel.first
    peer.send_frame(
        codec.attached_frame(
            req,
            channel.session_id,
            channel.epoch,
            channel.last,
            has_older=has_older,
            reset=reset,
            entries=[e.data for e in entries],
        )
    )
    channel.subscribe(peer)


async def _newest_page(channel: Channel, limit: int) -> tuple[list[StoredEntry], int]:
    """The newest ``limit`` entries up to ``last`` and the serial they cover up to."""
    head = channel.last
    if not head:
        return [], 0
    # Serials are dense from the oldest stored on.
    page = await channel.read_after(max(head - limit, 0), limit)
    entries = [e for e in page if e.serial <= head]
    return entries, entries[-1].serial if entries else head


async def _read_to_last(
    channel: Channel, entries: list[StoredEntry], covered: int, max_bytes: int | None
) -> tuple[list[StoredEntry], bool]:
    """``entries`` and then every entry after ``covered`` up to ``last``, reading until
    nothing new arrived during the last read (so the caller can join with no await).

    Returns the entries and True, or, as soon as they would pass ``max_bytes`` (when
    given), what was read so far and False.
    """
    size = entries_size(entries)
    while covered < channel.last:
        page = await channel.read_after(covered, 1000)
        page = [e for e in page if e.serial <= channel.last]
        if not page:
            break
        entries.extend(page)
        covered = page[-1].serial
        size += entries_size(page)
        if max_bytes is not None and size > max_bytes:
            return entries, False
    return entries, True


def entries_size(entries: Sequence[StoredEntry]) -> int:
    """The bytes ``entries`` take in a frame (each with its separating comma)."""
    return sum(len(e.data) + 1 for e in entries)


def newest_within(entries: list[StoredEntry], max_bytes: int | None) -> list[StoredEntry]:
    """The newest of ``entries`` (oldest first) that together take at most ``max_bytes``."""
    if max_bytes is None or entries_size(entries) <= max_bytes:
        return entries
    size = 0
    start = len(entries)
    while start and size + len(entries[start - 1].data) + 1 <= max_bytes:
        start -= 1
        size += len(entries[start].data) + 1
    return entries[start:]
