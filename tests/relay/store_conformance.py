"""One conformance suite for every ``Store`` (the contract in ``relay/store/_base.py``).

A store's test module subclasses ``StoreConformance`` as ``Test...`` and
defines ``make_store()``, which returns a new, empty store that is not
started yet. Every test below then runs against that store.

Subscribers may be called before ``append`` returns (memory, SQLite) or a
little later (Redis), so tests wait for deliveries with ``Collector.until``,
and prove that nothing more arrives by appending a last entry and waiting for
exactly that one.
"""

from __future__ import annotations

import abc
import itertools
import string
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.store import Appended, Store, StoredEntry
from transport._codec import splice_serial
from transport._runs import RunRecord
from transport.errors import (
    CONFLICT,
    INTERNAL_ERROR,
    STORE_UNAVAILABLE,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import RunStatus


def body(entry_id: str, n: int = 0) -> bytes:
    """An encoded entry without its serial."""
    return b'{"type":"message","id":"%s","n":%d}' % (entry_id.encode(), n)


def run(
    session_id: str, run_id: str, status: RunStatus = "pending", agent: str = "default"
) -> RunRecord:
    """A Run record with ``error`` and ``checkpoint`` filled in, to show they round-trip."""
    return RunRecord(
        session_id=session_id,
        run_id=run_id,
        agent=agent,
        status=status,
        prompt_id=f"m-{run_id}",
        error={"code": "X"} if status == "error" else None,
        checkpoint={"k": [1, 2]},
    )


def model_read(
    entries: list[bytes], after: int | None, before: int | None, limit: int
) -> list[tuple[int, bytes]]:
    """What ``read`` returns by the contract for a channel of ``entries`` (serial 1 first)."""
    chosen = [
        (serial, data)
        for serial, data in enumerate(entries, start=1)
        if (after is None or serial > after) and (before is None or serial < before)
    ]
    return chosen[:limit] if after is not None else chosen[-limit:]


_writes = itertools.count()


async def write_runs(store: Store, runs: Sequence[RunRecord]) -> None:
    """Store Run records as the relay does: with an entry of their session (a Run status
    entry), one append per session, the channel opened first."""
    by_session: dict[str, list[RunRecord]] = {}
    for record in runs:
        by_session.setdefault(record.session_id, []).append(record)
    for session_id, records in by_session.items():
        await store.open_channel(session_id)
        entry_id = f"runs-{next(_writes)}"
        await store.append(session_id, entry_id, body(entry_id), records)


class Collector:
    """A subscriber that keeps what it is given and can wait for it."""

    def __init__(self) -> None:
        self.entries: list[StoredEntry] = []
        self._changed = anyio.Event()

    def __call__(self, entry: StoredEntry) -> None:
        self.entries.append(entry)
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def serials(self) -> list[int]:
        """The serials received, in the order received."""
        return [e.serial for e in self.entries]

    async def until(self, count: int, timeout: float = 10) -> list[StoredEntry]:
        """Wait until ``count`` entries arrived; returns them all."""
        with anyio.fail_after(timeout):
            while len(self.entries) < count:
                await self._changed.wait()
        return self.entries


_settles = itertools.count()


async def settled(store: Store, session_id: str, *collectors: Collector) -> StoredEntry:
    """Append one last entry and wait until every collector got it (and nothing after it)."""
    entry_id = f"settle-{next(_settles)}"
    last = await store.append(session_id, entry_id, body(entry_id))
    for collector in collectors:
        with anyio.fail_after(10):
            while not collector.entries or collector.entries[-1].serial < last.serial:
                await collector.until(len(collector.entries) + 1)
    return StoredEntry(last.serial, last.data)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from("ab"), st.integers(0, 9)),
        st.tuples(
            st.just("read"),
            st.sampled_from("ab"),
            st.none() | st.integers(-1, 12),
            st.none() | st.integers(-1, 12),
            st.integers(1, 5),
        ),
        st.tuples(st.just("open"), st.sampled_from("ab")),
    ),
    max_size=40,
)


@pytest.mark.anyio
class StoreConformance(abc.ABC):
    """The behaviour every store promises."""

    @abc.abstractmethod
    def make_store(self) -> Store:
        """A new, empty, not yet started store."""

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[Store]:
        """A started store, closed on exit."""
        store = self.make_store()
        await store.start()
        try:
            yield store
        finally:
            await store.aclose()

    @pytest.fixture
    async def store(self, anyio_backend: str) -> AsyncIterator[Store]:
        async with self.opened() as store:
            yield store

    # -- channels and serials ---------------------------------------------------

    async def test_new_channel_is_empty_with_a_hex_epoch(self, store: Store) -> None:
        info = await store.open_channel("s")
        assert (info.session_id, info.first, info.last) == ("s", 0, 0)
        assert info.epoch and set(info.epoch) <= set(string.hexdigits)
        assert await store.read("s") == []
        assert await store.read("s", after=0) == []

    async def test_epoch_is_stable_per_channel_and_differs_between_channels(
        self, store: Store
    ) -> None:
        first = await store.open_channel("s")
        await store.append("s", "e1", body("e1"))
        again = await store.open_channel("s")
        assert again.epoch == first.epoch
        assert (again.first, again.last) == (1, 1)
        assert (await store.open_channel("t")).epoch != first.epoch

    async def test_append_gives_serials_from_one_and_splices_them_in(self, store: Store) -> None:
        await store.open_channel("s")
        results = [await store.append("s", f"e{i}", body(f"e{i}")) for i in range(5)]
        assert [r.serial for r in results] == [1, 2, 3, 4, 5]
        assert all(not r.duplicate for r in results)
        assert [r.data for r in results] == [splice_serial(body(f"e{i}"), i + 1) for i in range(5)]
        stored = await store.read("s", after=0)
        assert [(e.serial, e.data) for e in stored] == [(r.serial, r.data) for r in results]
        info = await store.open_channel("s")
        assert (info.first, info.last) == (1, 5)

    async def test_concurrent_appends_get_gap_free_serials_in_call_order(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        calls: list[str] = []
        serials: dict[str, int] = {}

        async def append(entry_id: str) -> None:
            calls.append(entry_id)  # no await before append: this is the call order
            serials[entry_id] = (await store.append("s", entry_id, body(entry_id))).serial

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(300):
                    tg.start_soon(append, f"e{i}")
        assert [serials[entry_id] for entry_id in calls] == list(range(1, 301))
        stored = await store.read("s", after=0, limit=1000)
        assert [e.data for e in stored] == [
            splice_serial(body(entry_id), n) for n, entry_id in enumerate(calls, start=1)
        ]

    async def test_channels_are_sequenced_independently(self, store: Store) -> None:
        channels = ["a", "b", "c"]
        for session_id in channels:
            await store.open_channel(session_id)
        got: dict[str, list[int]] = {session_id: [] for session_id in channels}

        async def append(session_id: str, i: int) -> None:
            result = await store.append(session_id, f"e{i}", body(f"{session_id}{i}"))
            got[session_id].append(result.serial)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(60):
                    tg.start_soon(append, channels[i % 3], i)
        for session_id in channels:
            assert sorted(got[session_id]) == list(range(1, 21))
            stored = await store.read(session_id, after=0)
            assert [e.serial for e in stored] == list(range(1, 21))
            assert all(b'"id":"%s' % session_id.encode() in e.data for e in stored)

    async def test_append_before_open_channel_is_refused(self, store: Store) -> None:
        with pytest.raises(RunwireError) as caught:
            await store.append("never-opened", "e1", body("e1"))
        assert caught.value.code == INTERNAL_ERROR

    async def test_a_channel_put_down_and_opened_again_carries_on(self, store: Store) -> None:
        await store.open_channel("s")
        first = await store.append("s", "e1", body("e1"))
        await store.append("s", "e2", body("e2"))
        store.close_channel("s")
        store.close_channel("never-opened")  # nothing to forget: no error
        info = await store.open_channel("s")
        assert (info.last, info.first) == (2, 1)
        again = await store.append("s", "e1", body("e1", 9))  # dedup survives the reopen
        assert again.duplicate and (again.serial, again.data) == (first.serial, first.data)
        assert (await store.append("s", "e3", body("e3"), expect_last=2)).serial == 3

    # -- dedup ------------------------------------------------------------------

    async def test_repeated_entry_id_returns_the_original_and_writes_nothing(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        original = await store.append("s", "e1", body("e1", 1), [run("s", "r1")])
        await store.append("s", "e2", body("e2"))
        again = await store.append("s", "e1", body("e1", 2), [run("s", "r1", "active")])
        assert again.duplicate
        assert (again.serial, again.data) == (original.serial, original.data)
        assert [e.serial for e in await store.read("s")] == [1, 2]
        assert await store.runs("s") == [run("s", "r1")]
        assert (await store.append("s", "e3", body("e3"))).serial == 3

    async def test_same_entry_id_in_another_channel_is_not_a_duplicate(self, store: Store) -> None:
        await store.open_channel("s")
        await store.open_channel("t")
        await store.append("s", "e1", body("e1"))
        other = await store.append("t", "e1", body("e1"))
        assert (other.serial, other.duplicate) == (1, False)

    async def test_concurrent_repeats_of_one_id_store_it_once(self, store: Store) -> None:
        await store.open_channel("s")
        results = []

        async def append(n: int) -> None:
            results.append(await store.append("s", "same", body("same", n)))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for n in range(5):
                    tg.start_soon(append, n)
        assert sorted(r.duplicate for r in results) == [False, True, True, True, True]
        assert {(r.serial, r.data) for r in results} == {(1, splice_serial(body("same", 0), 1))}
        assert len(await store.read("s")) == 1

    async def test_find_returns_what_a_repeat_would_or_none(self, store: Store) -> None:
        await store.open_channel("s")
        await store.open_channel("t")
        assert await store.find("s", "e1") is None
        original = await store.append("s", "e1", body("e1"))
        await store.append("s", "e2", body("e2"))
        found = await store.find("s", "e1")
        assert found is not None
        assert (found.serial, found.data, found.duplicate) == (1, original.data, True)
        assert await store.find("t", "e1") is None
        assert await store.find("s", "e3") is None
        assert len(await store.read("s")) == 2

    async def test_find_sees_an_append_in_flight(self, store: Store) -> None:
        await store.open_channel("s")
        found: list[object] = []

        async def find() -> None:
            found.append(await store.find("s", "e1"))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(store.append, "s", "e1", body("e1"))
                tg.start_soon(find)  # starts after the append was called
        assert found == [Appended(1, splice_serial(body("e1"), 1), duplicate=True)]

    async def test_dedup_window_covers_ten_thousand_ids(self, store: Store) -> None:
        await store.open_channel("s")
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(10_001):
                    tg.start_soon(store.append, "s", f"e{i}", b"{}")
            oldest = await store.append("s", "e1", b'{"other":1}')
        assert (oldest.serial, oldest.data, oldest.duplicate) == (2, b'{"serial":2}', True)
        assert (await store.open_channel("s")).last == 10_001

    # -- expect_last ------------------------------------------------------------

    async def test_expect_last_appends_only_where_the_caller_saw_the_channel(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        assert (await store.append("s", "e1", body("e1"), expect_last=0)).serial == 1
        assert (await store.append("s", "e2", body("e2"), expect_last=1)).serial == 2
        with pytest.raises(RunwireError) as caught:
            await store.append("s", "e3", body("e3"), [run("s", "r3")], expect_last=1)
        assert caught.value.code == CONFLICT
        assert caught.value.details == {"last": 2}
        assert [e.serial for e in await store.read("s")] == [1, 2]
        assert await store.find("s", "e3") is None
        assert await store.runs("s") == []
        again = await store.append("s", "e3", body("e3"), [run("s", "r3")], expect_last=2)
        assert (again.serial, again.duplicate) == (3, False)
        assert await store.runs("s") == [run("s", "r3")]

    async def test_a_repeat_is_a_duplicate_whatever_expect_last_says(self, store: Store) -> None:
        await store.open_channel("s")
        original = await store.append("s", "e1", body("e1"))
        await store.append("s", "e2", body("e2"))
        for expect_last in (0, 1, 2, 99):
            again = await store.append("s", "e1", body("e1", 9), expect_last=expect_last)
            assert (again.serial, again.data, again.duplicate) == (1, original.data, True)
        assert [e.serial for e in await store.read("s")] == [1, 2]

    async def test_of_appends_expecting_one_serial_the_first_in_line_wins(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        await store.append("s", "e0", body("e0"))
        outcomes: dict[str, int | str] = {}

        async def append(entry_id: str) -> None:
            try:
                appended = await store.append("s", entry_id, body(entry_id), expect_last=1)
                outcomes[entry_id] = appended.serial
            except RunwireError as exc:
                assert exc.details == {"last": 2}
                outcomes[entry_id] = exc.code

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(append, f"c{i}")
        assert outcomes == {"c0": 2, **{f"c{i}": CONFLICT for i in range(1, 10)}}
        assert [e.serial for e in await store.read("s")] == [1, 2]

    # -- live fan-out -----------------------------------------------------------

    async def test_subscribers_get_exactly_the_new_entries_of_their_channel_in_order(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        await store.open_channel("t")
        await store.append("s", "before", body("before"))
        first, second, other = Collector(), Collector(), Collector()
        await store.subscribe("s", first)
        await store.subscribe("s", second)
        await store.subscribe("t", other)
        appended = [await store.append("s", f"e{i}", body(f"e{i}")) for i in range(5)]
        await store.append("s", "e1", body("e1", 9))  # a repeat: not delivered again
        with pytest.raises(RunwireError):
            await store.append("s", "late", body("late"), expect_last=1)  # a conflict: neither
        in_t = await store.append("t", "e0", body("e0"))
        expected = [StoredEntry(a.serial, a.data) for a in appended]
        last = await settled(store, "s", first, second)
        assert first.entries == second.entries == [*expected, last]
        assert [e.serial for e in first.entries] == [2, 3, 4, 5, 6, 7]
        assert await other.until(1) == [StoredEntry(in_t.serial, in_t.data)]
        assert await settled(store, "t", other) == other.entries[-1]
        assert len(other.entries) == 2

    async def test_concurrent_appends_reach_a_subscriber_in_serial_order(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        got = Collector()
        await store.subscribe("s", got)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(store.append, "s", f"e{i}", body(f"e{i}"))
        await got.until(200)
        stored = await store.read("s", after=0, limit=1000)
        assert got.entries[:200] == stored
        assert got.serials[:200] == list(range(1, 201))

    async def test_unsubscribe_stops_delivery_and_may_be_called_twice(self, store: Store) -> None:
        await store.open_channel("s")
        kept, dropped = Collector(), Collector()
        await store.subscribe("s", kept)
        unsubscribe = await store.subscribe("s", dropped)
        await store.append("s", "e1", body("e1"))
        await dropped.until(1)
        unsubscribe()
        unsubscribe()
        await store.append("s", "e2", body("e2"))
        await settled(store, "s", kept)
        assert kept.serials == [1, 2, 3]
        assert dropped.serials == [1]

    async def test_a_subscriber_that_raises_stops_neither_itself_nor_the_others(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        calls: list[int] = []

        def broken(entry: StoredEntry) -> None:
            calls.append(entry.serial)
            raise RuntimeError("subscriber bug")

        got = Collector()
        await store.subscribe("s", broken)
        await store.subscribe("s", got)
        for i in range(3):
            await store.append("s", f"e{i}", body(f"e{i}"))
        await got.until(3)
        await settled(store, "s", got)
        assert calls == got.serials == [1, 2, 3, 4]

    # -- read -------------------------------------------------------------------

    async def test_read_pages_by_after_before_and_limit(self, store: Store) -> None:
        await store.open_channel("s")
        for i in range(1, 11):
            await store.append("s", f"e{i}", body(f"e{i}"))

        async def serials(**kwargs: int) -> list[int]:
            return [e.serial for e in await store.read("s", **kwargs)]

        assert await serials(limit=3) == [8, 9, 10]
        assert await serials(after=0, limit=3) == [1, 2, 3]
        assert await serials(after=7, limit=5) == [8, 9, 10]
        assert await serials(after=10) == []
        assert await serials(after=99) == []
        assert await serials(before=4, limit=2) == [2, 3]
        assert await serials(before=1) == []
        assert await serials(before=99, limit=2) == [9, 10]
        assert await serials(after=2, before=9, limit=3) == [3, 4, 5]
        assert await serials(after=5, before=6) == []
        assert await serials() == list(range(1, 11))
        assert await store.read("unknown") == []

    async def test_since_reads_after_a_serial_with_the_epoch_of_the_entries(
        self, store: Store
    ) -> None:
        info = await store.open_channel("s")
        for i in range(1, 6):
            await store.append("s", f"e{i}", body(f"e{i}"))
        epoch, page = await store.since("s", 2, 2)
        assert epoch == info.epoch
        assert page == await store.read("s", after=2, limit=2)
        assert [e.serial for e in page] == [3, 4]
        assert await store.since("s", 5, 10) == (info.epoch, [])

    async def test_read_positions_beyond_any_serial_are_the_newest_and_nothing(
        self, store: Store
    ) -> None:
        # A client's ``before`` / ``after`` (history pages, event streams) can be any
        # integer: one no store can hold is still the newest entries, or none after it.
        await store.open_channel("s")
        for i in range(1, 4):
            await store.append("s", f"e{i}", body(f"e{i}"))
        for huge in (10**14, 2**63, 2**64, 10**30):
            assert [e.serial for e in await store.read("s", before=huge, limit=2)] == [2, 3]
            assert await store.read("s", after=huge) == []
            assert await store.read("s", after=1, before=huge, limit=5) != []

    async def test_read_refuses_a_limit_below_one(self, store: Store) -> None:
        await store.open_channel("s")
        with pytest.raises(RunwireError) as caught:
            await store.read("s", limit=0)
        assert caught.value.code == VALIDATION_ERROR

    # -- runs -------------------------------------------------------------------

    async def test_runs_are_written_with_their_entry_and_replaced_by_run_id(
        self, store: Store
    ) -> None:
        await store.open_channel("s")
        assert await store.runs("s") == []
        await store.append("s", "p1", body("p1"), [run("s", "r1")])
        await store.append("s", "p2", body("p2"), [run("s", "r2")])
        assert await store.runs("s") == [run("s", "r1"), run("s", "r2")]
        await store.append("s", "x", body("x"), [run("s", "r1", "active"), run("s", "r2", "error")])
        assert await store.runs("s") == [run("s", "r1", "active"), run("s", "r2", "error")]
        assert await store.runs("other") == []

    async def test_one_run_is_read_by_its_id(self, store: Store) -> None:
        await store.open_channel("s")
        assert await store.run("s", "r1") is None
        await store.append("s", "p1", body("p1"), [run("s", "r1")])
        await store.append("s", "p2", body("p2"), [run("s", "r2", "active")])
        assert await store.run("s", "r1") == run("s", "r1")
        assert await store.run("s", "r2") == run("s", "r2", "active")
        await write_runs(store, [run("s", "r1", "error")])
        assert await store.run("s", "r1") == run("s", "r1", "error")
        assert await store.run("s", "r3") is None
        assert await store.run("other", "r1") is None

    async def test_runs_with_status_across_sessions(self, store: Store) -> None:
        await write_runs(
            store,
            [
                run("s", "r1", "pending", "alpha"),
                run("s", "r2", "active", "alpha"),
                run("t", "r3", "pending", "beta"),
                run("t", "r4", "complete", "alpha"),
            ],
        )
        await write_runs(store, [run("s", "r2", "suspended", "alpha")])

        async def ids(statuses: list[str], agent: str | None = None) -> list[str]:
            found = await store.runs_with_status(statuses, agent=agent)
            return sorted(r.run_id for r in found)

        assert await ids(["pending"]) == ["r1", "r3"]
        assert await ids(["pending"], "alpha") == ["r1"]
        assert await ids(["active", "suspended", "pending"], "alpha") == ["r1", "r2"]
        assert await ids(["active"]) == []
        assert await ids(["complete"], "beta") == []
        assert await ids(["complete"]) == ["r4"]
        assert await ids(["complete", "cancelled", "pending"], "alpha") == ["r1", "r4"]
        assert await ids([]) == []
        assert await store.runs("s") == [
            run("s", "r1", "pending", "alpha"),
            run("s", "r2", "suspended", "alpha"),
        ]

    # -- lifecycle --------------------------------------------------------------

    async def test_a_closed_store_refuses_writes(self) -> None:
        async with self.opened() as store:
            await store.open_channel("s")
            assert await store.healthy()
        await store.aclose()  # idempotent
        assert not await store.healthy()
        with pytest.raises(RunwireError) as caught:
            await store.append("s", "e1", body("e1"))
        assert caught.value.code == STORE_UNAVAILABLE
        with pytest.raises(RunwireError) as caught:
            await store.subscribe("s", Collector())
        assert caught.value.code == STORE_UNAVAILABLE

    # -- a model ----------------------------------------------------------------

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(ops=_OPS)
    async def test_behaves_like_a_list_per_channel(
        self, anyio_backend: str, ops: list[tuple[object, ...]]
    ) -> None:
        """Random appends, repeats and reads agree with a list per channel."""
        model: dict[str, list[bytes]] = {}
        ids: dict[str, dict[str, int]] = {}
        epochs: dict[str, str] = {}
        async with self.opened() as store:
            with anyio.fail_after(20):
                for n, op in enumerate(ops):
                    session_id = str(op[1])
                    if session_id not in epochs:
                        epochs[session_id] = (await store.open_channel(session_id)).epoch
                        model[session_id], ids[session_id] = [], {}
                    entries, known = model[session_id], ids[session_id]
                    if op[0] == "open":
                        info = await store.open_channel(session_id)
                        assert info.epoch == epochs[session_id]
                        assert (info.first, info.last) == (min(len(entries), 1), len(entries))
                    elif op[0] == "append":
                        entry_id = f"e{op[2]}"
                        result = await store.append(session_id, entry_id, body(entry_id, n))
                        if entry_id in known:
                            serial = known[entry_id]
                            expected = (serial, entries[serial - 1], True)
                        else:
                            entries.append(splice_serial(body(entry_id, n), len(entries) + 1))
                            known[entry_id] = len(entries)
                            expected = (len(entries), entries[-1], False)
                        assert (result.serial, result.data, result.duplicate) == expected
                    else:
                        after, before, limit = op[2], op[3], op[4]
                        assert isinstance(limit, int)
                        assert after is None or isinstance(after, int)
                        assert before is None or isinstance(before, int)
                        got = await store.read(session_id, after=after, before=before, limit=limit)
                        assert [(e.serial, e.data) for e in got] == model_read(
                            entries, after, before, limit
                        )
