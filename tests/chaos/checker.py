"""``Ledger``: what each client acknowledged and saw, and the four counts of the chaos suite.

A chaos scenario records every publish the relay acknowledged (``acked``: the
entry's id and the serial the ack named) and every entry each observer folded, in
order (``saw``; ``reset`` when an observer's view was rebuilt). At the end it asks
for ``count(stored, runs)`` with what the store holds and how each Run stands:

* **lost**: an acknowledged publish the store does not hold at its acknowledged
  serial, or that an observer of its session never saw; and a word missing from
  a reply an observer shows (``reply``: the workers stream numbered words, so
  this counts appends of a worker whose acknowledgements the test cannot see);
* **duplicated**: an entry id stored, or seen by one observer, more than once;
  and a word a reply shows twice;
* **gapped**: an observer's serials that do not follow one another (a jump, or a
  step back), a first serial that is not 1, an end short of the store's head,
  and every reset; and gaps among the stored serials;
* **hung**: a watched Run (one a prompt started) or a stored Run whose status is
  not terminal.

The ledger is plain data: ``watch_view`` and ``watch_connection`` feed it from a
client's view and from an SDK connection.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client_side._view import View
from transport._mirror import Attachment, Folded
from transport._runs import TERMINAL
from transport.asyncio._connection import Connection
from transport.frames import Ack, Attached, Publish

__all__ = ["Counts", "Ledger", "watch_connection", "watch_view"]


@dataclass(frozen=True)
class Counts:
    """The four counts a chaos scenario asserts are zero."""

    lost: int = 0
    duplicated: int = 0
    gapped: int = 0
    hung: int = 0

    @property
    def zero(self) -> bool:
        return not (self.lost or self.duplicated or self.gapped or self.hung)


class Ledger:
    """Acknowledged publishes, what each observer saw, and the Runs to watch."""

    def __init__(self) -> None:
        self.acks: dict[str, dict[str, int]] = defaultdict(dict)
        """session -> entry id -> the serial its ack named."""
        self.seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
        """observer -> the (serial, id) of each entry it folded, in order."""
        self.sessions: dict[str, str] = {}
        """observer -> its session."""
        self.resets: Counter[str] = Counter()
        self.runs: dict[str, str] = {}
        """run id -> its session, for every Run a prompt started."""
        self.replies: dict[str, list[str]] = defaultdict(list)
        """observer -> the text of each reply it shows, at the end."""
        self.problems: list[str] = []
        """What each count counted, one line each (filled by ``count``)."""

    # ------------------------------------------------------------ recording --

    def acked(self, session_id: str, entry_id: str, serial: int) -> None:
        """The relay acknowledged ``entry_id`` at ``serial``; a repeat naming another serial
        is kept as a second serial (so it counts as lost)."""
        known = self.acks[session_id].get(entry_id)
        if known is not None and known != serial:
            self.acks[session_id][f"{entry_id}@{serial}"] = serial
            return
        self.acks[session_id][entry_id] = serial

    def watch_run(self, session_id: str, run_id: str) -> None:
        self.runs[run_id] = session_id

    def observer(self, name: str, session_id: str) -> None:
        """Declare an observer of ``session_id`` that attached before its first entry."""
        self.sessions[name] = session_id
        self.seen.setdefault(name, [])

    def saw(self, name: str, serial: int, entry_id: str) -> None:
        self.seen[name].append((serial, entry_id))

    def reply(self, name: str, text: str) -> None:
        """A reply the observer shows: numbered words ``<tag>-0 <tag>-1 ...`` of one model call."""
        self.replies[name].append(text)

    def reset(self, name: str) -> None:
        """The observer's view was rebuilt from a page: what it saw starts again."""
        self.resets[name] += 1
        self.seen[name] = []

    # ------------------------------------------------------------- counting --

    def count(
        self, stored: Mapping[str, Sequence[tuple[int, str]]], runs: Mapping[str, str]
    ) -> Counts:
        """The four counts, given the (serial, id) of each session's stored entries in
        order and the status of every stored Run (run id -> status)."""
        self.problems = []
        skipped, repeated = self._words()
        lost = self._lost(stored) + skipped
        duplicated = self._duplicated(stored) + repeated
        gapped = self._gapped(stored)
        hung = self._hung(runs)
        return Counts(lost=lost, duplicated=duplicated, gapped=gapped, hung=hung)

    def _lost(self, stored: Mapping[str, Sequence[tuple[int, str]]]) -> int:
        lost = 0
        for session_id, acks in self.acks.items():
            held = set(stored.get(session_id, ()))
            for entry_id, serial in acks.items():
                if (serial, entry_id) not in held:
                    lost += 1
                    self.problems.append(f"lost: {session_id} {entry_id}@{serial} not stored")
            for name, seen in self._observers(session_id):
                ids = {i for _, i in seen}
                for entry_id in acks:
                    if entry_id not in ids:
                        lost += 1
                        self.problems.append(f"lost: {name} never saw {entry_id}")
        return lost

    def _words(self) -> tuple[int, int]:
        """Words missing from a reply (an index skipped), and words it shows twice."""
        skipped = repeated = 0
        for name, texts in self.replies.items():
            for text in texts:
                want = 0
                tag = None
                for word in text.split():
                    head, _, index = word.rpartition("-")
                    if tag is None:
                        tag = head
                    n = int(index) if index.isdigit() and head == tag else -1
                    if n == want:
                        want += 1
                    elif 0 <= n < want:
                        repeated += 1
                        self.problems.append(f"duplicated: {name} shows {word} twice in {text!r}")
                    else:
                        skipped += 1
                        self.problems.append(f"lost: {name} skips to {word} in {text!r}")
                        want = n + 1 if n >= 0 else want
        return skipped, repeated

    def _duplicated(self, stored: Mapping[str, Sequence[tuple[int, str]]]) -> int:
        duplicated = 0
        sources: list[tuple[str, Iterable[tuple[int, str]]]] = list(stored.items())
        sources += [(name, seen) for name, seen in self.seen.items()]
        for where, pairs in sources:
            counts = Counter(i for _, i in pairs)
            for entry_id, n in counts.items():
                if n > 1:
                    duplicated += n - 1
                    self.problems.append(f"duplicated: {where} holds {entry_id} {n} times")
        return duplicated

    def _gapped(self, stored: Mapping[str, Sequence[tuple[int, str]]]) -> int:
        gapped = 0
        sources: list[tuple[str, Sequence[tuple[int, str]]]] = list(stored.items())
        sources += [(name, seen) for name, seen in self.seen.items() if not self.resets[name]]
        for where, pairs in sources:
            last = 0
            for serial, _ in pairs:
                if serial != last + 1:
                    gapped += 1
                    self.problems.append(f"gapped: {where} went from serial {last} to {serial}")
                last = serial
        for name, seen in self.seen.items():
            head = max((s for s, _ in stored.get(self.sessions.get(name, ""), ())), default=0)
            last = seen[-1][0] if seen else 0
            if last < head:
                gapped += 1
                self.problems.append(f"gapped: {name} stopped at serial {last} of {head}")
        for name, n in self.resets.items():
            if n:
                gapped += n
                self.problems.append(f"gapped: {name} was reset {n} times")
        return gapped

    def _hung(self, runs: Mapping[str, str]) -> int:
        hung = 0
        for run_id in sorted(set(runs) | set(self.runs)):
            status = runs.get(run_id)
            if status not in TERMINAL:
                hung += 1
                self.problems.append(f"hung: run {run_id} is {status or 'not stored'}")
        return hung

    def _observers(self, session_id: str) -> list[tuple[str, list[tuple[int, str]]]]:
        return [(n, self.seen[n]) for n, s in self.sessions.items() if s == session_id]

    def report(self, counts: Counts) -> str:
        """A failure message: the counts, then up to 30 lines of what they counted."""
        lines = [str(counts), *self.problems[:30]]
        if len(self.problems) > 30:
            lines.append(f"... and {len(self.problems) - 30} more")
        return "\n".join(lines)


def tap_view(
    view: View,
    on_entry: Callable[[int, dict[str, Any]], None],
    on_reset: Callable[[Attachment], None],
) -> None:
    """Call ``on_entry(serial, entry)`` for every entry with a serial that ``view`` takes
    in (its mirror folds it, delivered or attached), and ``on_reset`` for an attachment
    that starts the view over."""
    mirror = view.mirror
    deliver, attached = mirror.deliver, mirror.attached

    def taking(folded: Iterator[Folded]) -> Iterator[Folded]:
        for item in folded:
            serial = item.entry.get("serial")
            if isinstance(serial, int):
                on_entry(serial, item.entry)
            yield item

    def delivering(entries: Iterable[dict[str, Any]]) -> Iterator[Folded]:
        return taking(deliver(entries))

    def attaching(reply: Attached) -> Attachment:
        attachment = attached(reply)
        if attachment.reset:
            on_reset(attachment)
        attachment.folded = taking(attachment.folded)
        attachment.held = taking(attachment.held)
        return attachment

    mirror.deliver = delivering  # type: ignore[method-assign]
    mirror.attached = attaching  # type: ignore[method-assign]


def watch_view(ledger: Ledger, name: str, view: View) -> None:
    """Record every entry ``view`` takes in (its mirror folds it) and its resets."""
    ledger.observer(name, view.session_id)
    tap_view(
        view,
        lambda serial, entry: ledger.saw(name, serial, str(entry.get("id"))),
        lambda _: ledger.reset(name),
    )


def watch_connection(ledger: Ledger, conn: Connection) -> None:
    """Record every publish of ``conn`` the relay acknowledged with a serial."""
    request = conn.request

    async def requesting(frame: Any, **kw: Any) -> Any:
        reply = await request(frame, **kw)
        if isinstance(frame, Publish) and isinstance(reply, Ack) and reply.serial is not None:
            ledger.acked(frame.session_id, frame.entry.id, reply.serial)
        return reply

    conn.request = requesting  # type: ignore[method-assign]
