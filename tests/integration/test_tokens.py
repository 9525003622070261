"""Tokens with the SDKs: refusals at connect, and a token that expires mid-connection is
replaced through ``token_provider`` and the session resumes with no gap."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

import agent_side
import client_side
import relay
from agent_side import Run
from relay.auth import mint_token
from transport import RunwireError

from .conductor import SECRET, Conductor, stack, status, texts, token, until

pytestmark = pytest.mark.anyio


class States:
    """Connection states a session went through, awaitable."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._changed = anyio.Event()

    def __call__(self, state: str) -> None:
        self.seen.append(state)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, predicate: Callable[[list[str]], bool]) -> None:
        with anyio.fail_after(10):
            while not predicate(self.seen):
                await self._changed.wait()


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (token("alice", ttl=-5), "TOKEN_EXPIRED"),
        (token("alice", pattern="other-*"), None),  # a valid token: refused at attach
        ("not.a.token", "UNAUTHORIZED"),
    ],
)
async def test_connect_raises_for_a_token_the_relay_refuses(bad: str, code: str | None) -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as server:
        with pytest.raises(RunwireError) as info:
            async with client_side.connect(server.url, "trip", token=bad):
                pass
        assert info.value.code == (code or "UNAUTHORIZED")


async def test_an_expired_token_is_replaced_from_the_provider_at_connect() -> None:
    calls: list[int] = []

    async def provider() -> str:
        calls.append(1)
        return token("alice")

    async with (
        relay.serve(port=0, store="memory://", secret=SECRET) as server,
        client_side.connect(
            server.url, "trip", token=token("alice", ttl=-5), token_provider=provider
        ) as session,
    ):
        assert session.connected and calls == [1]


async def test_a_client_whose_token_expires_resumes_with_a_fresh_one_and_misses_nothing() -> None:
    agent = Conductor()
    svc = token("svc", ["agent"])
    fresh: list[str] = []

    def provider() -> str:
        fresh.append(token("alice"))
        return fresh[-1]

    states = States()
    async with (
        stack(agent, agent_token=svc, secret=SECRET) as server,
        client_side.connect(server.url, "trip", token=token("alice")) as other,
        client_side.connect(
            server.url, "trip", token=token("alice", ttl=2), token_provider=provider
        ) as session,
    ):
        session.on_state(states)
        first = await session.send("before")
        await states.wait(lambda seen: "disconnected" in seen)
        # Published while the expiring session is away or coming back.
        second = await other.send("meanwhile")
        await states.wait(lambda seen: seen[-1] == "connected")
        assert len(fresh) >= 1
        agent.release(first.run_id)
        agent.release(second.run_id)
        await first.result()
        await until(session, lambda: status(session, second.run_id) == "complete")
        assert sorted(texts(session)) == sorted(
            ["before", "meanwhile", "before: started and done", "meanwhile: started and done"]
        )
        serials = [vm.serial for vm in session.view.messages()]
        assert len(set(serials)) == len(serials)
        third = await session.send("after")  # publishing works on the fresh token
        agent.release(third.run_id)
        assert (await third.result()).status == "complete"


async def test_an_agent_whose_token_expires_mid_run_reconnects_and_finishes_it() -> None:
    release = anyio.Event()
    provided: list[str] = []

    def provider() -> str:
        provided.append(token("svc", ["agent"]))
        return provided[-1]

    async def handle(run: Run) -> None:
        await run.start()

        async def stream():  # type: ignore[no-untyped-def]
            yield "part one, "
            await release.wait()
            yield "part two"

        await run.pipe(stream())
        await run.end()

    async with relay.serve(port=0, store="memory://", secret=SECRET, agent_grace=30) as server:
        worker = agent_side.Agent(
            server.url, token=token("svc", ["agent"], ttl=2), token_provider=provider
        )
        worker.on_run(handle)
        states = States()
        worker.connection.on_state(states)
        async with (
            worker,
            client_side.connect(server.url, "trip", token=token("alice")) as session,
        ):
            run = await session.send("go")
            await until(session, lambda: texts(session)[-1:] == ["part one, "])
            await states.wait(lambda seen: "disconnected" in seen and seen[-1] == "connected")
            assert provided
            release.set()
            result = await run.result()
            assert result.status == "complete"
            assert texts(session) == ["go", "part one, part two"]


async def test_a_session_whose_token_expires_without_a_provider_ends_for_good() -> None:
    """As runwire.js does: not connected any more, on_state hears "closed", ``closed`` is
    true, waiting on a Run raises instead of hanging, and a send raises ``TOKEN_EXPIRED``."""
    agent = Conductor()
    states = States()
    async with (
        stack(agent, agent_token=token("svc", ["agent"]), secret=SECRET) as server,
        client_side.connect(server.url, "trip", token=token("alice", ttl=1)) as session,
    ):
        session.on_state(states)
        run = await session.send("before")
        with anyio.fail_after(10):
            with pytest.raises(RunwireError) as waited:
                await run.result()
        assert waited.value.code in ("TOKEN_EXPIRED", "CONNECTION_CLOSED")
        assert states.seen == ["closed"]
        assert not session.connected
        assert session.closed
        with pytest.raises(RunwireError) as sent:
            await session.send("after")
        assert sent.value.code == "TOKEN_EXPIRED"
        assert str(sent.value) == "TOKEN_EXPIRED: the token expired; reconnect with a fresh one"


async def test_a_fresh_token_that_no_longer_covers_the_session_ends_it_for_good() -> None:
    """The provider's token is valid but does not grant ``subscribe`` in the session any
    more: the re-attach is refused, and that is final, as at connect. Before, the client
    took the refusal for a dropped link and reconnected at once, again and again (over a
    hundred connects in five seconds, each asking the provider), never "closed", with every
    send waiting forever."""
    provided: list[str] = []

    def provider() -> str:
        provided.append(token("alice", pattern="other-*"))
        return provided[-1]

    states = States()
    async with (
        relay.serve(port=0, store="memory://", secret=SECRET) as server,
        client_side.connect(
            server.url, "trip", token=token("alice", ttl=1), token_provider=provider
        ) as session,
    ):
        session.on_state(states)
        await states.wait(lambda seen: "closed" in seen)
        assert len(provided) == 1
        assert session.closed and not session.connected
        with anyio.fail_after(5), pytest.raises(RunwireError) as sent:
            await session.send("after")
        assert sent.value.code == "UNAUTHORIZED"
        assert sent.value.details["needs"] == "subscribe"


async def test_an_agent_whose_fresh_token_drops_one_session_keeps_the_others() -> None:
    """A worker in two sessions whose token, replaced after it expired, covers only one of
    them: the re-attach of the other is refused. Before, that ended the worker's whole
    connection for good (no more Runs, in any session). Now only that session's attachment
    ends: its Run's abort signal fires with ``UNAUTHORIZED`` and the relay ends the Run
    ``AGENT_LOST`` after its grace (the agent may not act there any more); the other
    session's Run finishes, and the worker takes new Runs."""
    release = anyio.Event()
    reasons: dict[str, object] = {}

    def provider() -> str:
        return mint_token(user="svc", sessions={"keep-*": ["agent"]}, secret=SECRET)

    async def handle(run: Run) -> None:
        await run.start()
        await run.pipe(_one("part one, "))
        async with run.abort_signal.scope():
            await release.wait()
        if run.abort_signal.aborted:
            reasons[run.session_id] = run.abort_signal.reason
            return
        await run.pipe(_one("part two"))
        await run.end()

    both = mint_token(
        user="svc", sessions={"keep-*": ["agent"], "drop-*": ["agent"]}, secret=SECRET, ttl=2
    )
    async with relay.serve(port=0, store="memory://", secret=SECRET, agent_grace=0.5) as server:
        worker = agent_side.Agent(server.url, token=both, token_provider=provider)
        worker.on_run(handle)
        states = States()
        worker.connection.on_state(states)
        async with (
            worker,
            client_side.connect(server.url, "keep-1", token=token("alice")) as kept,
            client_side.connect(server.url, "drop-1", token=token("alice")) as dropped,
        ):
            first = await kept.send("go")
            second = await dropped.send("go")
            for session in (kept, dropped):
                await until(session, lambda s=session: texts(s)[-1:] == ["part one, "])
            await states.wait(lambda seen: "disconnected" in seen and seen[-1] == "connected")
            with anyio.fail_after(10):
                lost = await second.result()
            assert lost.status == "error"
            assert dropped.view.run(second.run_id).error["code"] == "AGENT_LOST"  # type: ignore[union-attr]
            with anyio.fail_after(10):
                while "drop-1" not in reasons:
                    await anyio.sleep(0.01)
            reason = reasons["drop-1"]
            assert isinstance(reason, RunwireError) and reason.code == "UNAUTHORIZED"
            release.set()
            with anyio.fail_after(10):
                done = await first.result()
            assert done.status == "complete"
            assert texts(kept) == ["go", "part one, ", "part two"]
            assert worker.connection.error is None and worker.connection.connected
            third = await kept.send("again")  # the worker still takes Runs
            with anyio.fail_after(10):
                assert (await third.result()).status == "complete"


async def _one(text: str):  # type: ignore[no-untyped-def]
    yield text
