"""A Run streamed while the relay's store refuses writes (``STORE_UNAVAILABLE``).

The relay is real (loopback, memory store); its store's ``append`` is wrapped to refuse
writes for a while, as a Redis that is away or out of memory does (the relay answers
``STORE_UNAVAILABLE``, as ``tests/cluster/test_redis_outage.py`` shows with a real Redis).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import orjson
import pytest

import agent_side
import relay
import transport._holds
from transport.errors import STORE_UNAVAILABLE, RunwireError

from .helpers import client_end

pytestmark = pytest.mark.anyio


class Outage:
    """Wraps a relay's ``store.append``: while ``down(entry)`` says so, writes are refused.

    ``stored`` lists the ids the store took for the first time, in the order it took them.
    """

    def __init__(self, server: relay.Server, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stored: list[str] = []
        self.refused: list[str] = []
        self.kinds: dict[str, str] = {}
        self.down: Callable[[str, dict[str, Any]], bool] = lambda _id, _entry: False
        store = server.store
        append = store.append

        async def flaky(
            session_id: str, entry_id: str, data: bytes, runs: Any = (), **kw: Any
        ) -> Any:
            entry = orjson.loads(data)
            self.kinds[entry_id] = entry["kind"]
            if self.down(entry_id, entry):
                self.refused.append(entry_id)
                await anyio.sleep(0.05)  # as a Redis write times out: more publishes come
                raise RunwireError(STORE_UNAVAILABLE, "the store is away")
            appended = await append(session_id, entry_id, data, runs, **kw)
            if not appended.duplicate:
                self.stored.append(entry_id)
            return appended

        monkeypatch.setattr(store, "append", flaky)
        self._server = server

    def refusals(self) -> int:
        """``STORE_UNAVAILABLE`` errors the relay sent: the store's and those of publishes it
        held behind one the store refused (``details.held``)."""
        registry = self._server.hub.metrics.registry
        sent = registry.get_sample_value("runwire_errors_total", {"code": STORE_UNAVAILABLE})
        return int(sent or 0)


def produced_order(ids: list[str]) -> list[str]:
    """The agent's entry ids (``prefix.nonce.seq``) in the order the Run made them."""
    return sorted(ids, key=lambda i: int(i.rsplit(".", 1)[1]))


async def tokens(n: int) -> AsyncIterator[str]:
    for i in range(n):
        yield f"t{i} "
        await anyio.sleep(0.01)  # paced: appends go out one by one, several at once in flight


@pytest.mark.parametrize("max_in_flight", [1, 4])
async def test_a_run_streamed_through_a_store_outage_is_stored_once_in_order(
    monkeypatch: pytest.MonkeyPatch, max_in_flight: int
) -> None:
    """The outage starts at the Run's second append and lasts until that append was
    refused three times; several appends are refused meanwhile (in flight at once with
    ``max_in_flight=4``). Once the store is back the Run's entries are stored each once,
    in the order the agent made them, the close after every append and the end last (a
    refused publish used to go again on its own timer, behind the ones sent meanwhile)."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        first: list[str] = []  # the append the outage waits on

        def down(entry_id: str, entry: dict[str, Any]) -> bool:
            if not first and entry["kind"] == "response_append":
                if any(outage.kinds[i] == "response_append" for i in outage.stored):
                    first.append(entry_id)  # the second append: the store goes away
            return bool(first) and outage.refused.count(first[0]) < 3

        outage.down = down
        async with client_end(server.url, "outage") as client:
            run_id = await client.prompt("go")
            async with agent_side.connect(
                server.url, "outage", max_in_flight=max_in_flight
            ) as session:
                run = session.create_run(run_id)
                with anyio.fail_after(20):
                    result = await run.pipe(tokens(30))
                    await run.end()
                assert result.reason == "complete", result.error
            await client.wait_status(run_id, "complete")
            assert outage.refused.count(first[0]) == 3
            if max_in_flight > 1:
                assert outage.refusals() > 3  # the outage caught appends in flight
            ours = [e["id"] for e in client.entries if e["run_id"] == run_id and "." in e["id"]]
            assert ours == produced_order(ours)
            assert len(ours) == len(set(ours))
            assert [e["kind"] for e in client.entries if e["id"] in ours][-2:] == [
                "response_close",
                "run",
            ]
            assert client.response_texts(run_id) == ["".join(f"t{i} " for i in range(30))]
            assert produced_order(outage.stored[-len(ours) :]) == outage.stored[-len(ours) :]


async def test_a_run_whose_store_does_not_come_back_gets_store_unavailable_after_store_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store refuses the Run's writes for good: ``pipe()`` gives up after the
    connection's ``store_wait`` (``reason="error"``, ``STORE_UNAVAILABLE``) instead of
    repeating the append forever, and ``end()`` raises the same at the store's first
    refusal (the store already stayed away a whole ``store_wait``; before that the relay
    holds it behind the append given up, at most 2 s). Once the store is back the Run ends,
    its error saying why, and nothing the agent gave up on was stored."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        away = False
        outage.down = lambda entry_id, entry: away and "." in entry_id  # the agent's entries
        async with client_end(server.url, "gone") as client:
            run_id = await client.prompt("go")
            async with agent_side.connect(server.url, "gone", store_wait=0.5) as session:
                assert session._link.conn.store_wait == 0.5
                run = session.create_run(run_id)
                await run.start()
                away = True
                with anyio.fail_after(10):
                    result = await run.pipe(tokens(3))
                    assert result.reason == "error"
                    assert isinstance(result.error, RunwireError)
                    assert result.error.code == STORE_UNAVAILABLE
                    with pytest.raises(RunwireError) as caught:
                        await run.end("error", error=result.error)
                    assert caught.value.code == STORE_UNAVAILABLE
                    assert not run.ended
                away = False
                with anyio.fail_after(10):
                    await run.end("error", error=result.error)
            await client.wait_status(run_id, "error")
            (end,) = [e for e in client.of(run_id, "run") if e["status"] == "error"]
            assert end["error"]["code"] == STORE_UNAVAILABLE
            given_up = set(outage.refused)
            assert given_up and not given_up & {e["id"] for e in client.entries}


async def test_appends_in_flight_behind_a_refused_one_do_not_overtake_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store refuses one append, once, slowly, and is back right after: the appends
    sent meanwhile (``max_in_flight=4``: on their way before the refusal came back, waiting
    on the channel behind it) must not be stored before it. The relay refuses them too
    (``STORE_UNAVAILABLE``, ``details.held``) until the refused one comes again, and the
    SDK sends them again behind it (they used to be stored first, the refused one last)."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        first: list[str] = []

        def down(entry_id: str, entry: dict[str, Any]) -> bool:
            if not first and entry["kind"] == "response_append":
                if any(outage.kinds[i] == "response_append" for i in outage.stored):
                    first.append(entry_id)
            return bool(first) and entry_id == first[0] and first[0] not in outage.refused

        outage.down = down
        async with client_end(server.url, "blip") as client:
            run_id = await client.prompt("go")
            async with agent_side.connect(server.url, "blip", max_in_flight=4) as session:
                run = session.create_run(run_id)
                with anyio.fail_after(20):
                    result = await run.pipe(tokens(30))
                    await run.end()
                assert result.reason == "complete", result.error
            await client.wait_status(run_id, "complete")
            assert outage.refused == first
            ours = [e["id"] for e in client.entries if e["run_id"] == run_id and "." in e["id"]]
            assert ours == produced_order(ours)
            assert client.response_texts(run_id) == ["".join(f"t{i} " for i in range(30))]


async def test_a_worker_ends_a_run_whose_end_the_store_refused_once_it_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Implicit mode: the handler's reply gives up on the store (``store_wait``), the Run's
    end is refused too; the worker keeps the Run and ends it (``error``,
    ``STORE_UNAVAILABLE``) once the store takes writes again, rather than leaving it active
    on the relay for as long as the worker stays connected."""
    monkeypatch.setattr(
        transport._holds, "STORE_HOLD", 0.1
    )  # each end is refused by the store soon
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        away = False
        outage.down = lambda entry_id, entry: away and "." in entry_id
        gave_up = anyio.Event()
        results: list[agent_side.PipeResult] = []
        worker = agent_side.Agent(server.url, store_wait=0.3)

        @worker.on_run
        async def handle(run: agent_side.Run) -> None:
            nonlocal away
            await run.start()
            away = True
            result = await run.pipe(tokens(3))
            results.append(result)
            gave_up.set()
            if result.error is not None:
                await run.end("error", error=result.error)

        async with worker, client_end(server.url, "ends") as client:
            run_id = await client.prompt("go")
            with anyio.fail_after(10):
                await gave_up.wait()
            assert results[0].reason == "error"
            await anyio.sleep(1.5)  # its end is refused meanwhile (the handler's, the worker's)
            away = False
            await client.wait_status(run_id, "error", timeout=15)
        (end,) = [e for e in client.of(run_id, "run") if e["status"] == "error"]
        assert end["error"]["code"] == STORE_UNAVAILABLE


async def test_explicit_mode_ends_a_run_whose_end_the_store_refused_once_it_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Explicit mode: ``end()`` raises ``STORE_UNAVAILABLE`` after ``store_wait`` (the caller
    hears it), and the session tries that same end again in the background while it is
    open, so the Run does not stay active on the relay until the caller's code ends it
    again: once the store is back it is stored, with the reason the caller gave."""
    monkeypatch.setattr(transport._holds, "STORE_HOLD", 0.1)
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        away = False
        outage.down = lambda entry_id, entry: away and "." in entry_id  # the agent's entries
        async with client_end(server.url, "end-again") as client:
            run_id = await client.prompt("go")
            async with agent_side.connect(server.url, "end-again", store_wait=0.3) as session:
                run = session.create_run(run_id)
                await run.start()
                away = True
                with anyio.fail_after(10), pytest.raises(RunwireError) as caught:
                    await run.end()
                assert caught.value.code == STORE_UNAVAILABLE
                assert not run.ended
                away = False
                await client.wait_status(run_id, "complete", timeout=10)
                with anyio.fail_after(5):
                    while not run.ended:
                        await anyio.sleep(0.05)
                assert run.status == "complete"
                await run.end()  # ended: nothing more to do
        ends = [e for e in client.of(run_id, "run") if e["status"] in ("complete", "error")]
        assert [e["status"] for e in ends] == ["complete"]


async def test_the_sessions_end_ends_such_a_run_as_its_code_asked_not_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``session.end()`` ends the active Runs ``cancelled``; one whose ``end("complete")``
    the store refused (and whose end is still to be tried again) ends ``complete``."""
    monkeypatch.setattr(transport._holds, "STORE_HOLD", 0.1)
    monkeypatch.setattr(agent_side._run, "END_RETRY_FIRST", 30.0)  # the session's end comes first
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        away = False
        outage.down = lambda entry_id, entry: away and "." in entry_id
        async with client_end(server.url, "end-asked") as client:
            run_id = await client.prompt("go")
            async with agent_side.connect(server.url, "end-asked", store_wait=0.3) as session:
                run = session.create_run(run_id)
                await run.start()
                away = True
                with anyio.fail_after(10), pytest.raises(RunwireError):
                    await run.end()
                away = False
                await session.end()  # (it closes the connection: not under a cancel scope)
            await client.wait_status(run_id, "complete", "cancelled")
            assert client.tree.run(run_id).status == "complete"  # type: ignore[union-attr]
