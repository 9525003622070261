"""``connect(..., subscribe=False)``: a write-only session for a token that may publish in a
session but not read it (no ``subscribe``): it never attaches, publishes resolve from their
acks, and whatever reads the session fails at once with ``NOT_ATTACHED``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

import client_side
import relay
from relay.auth import mint_token
from transport.errors import NOT_ATTACHED, RUN_NOT_ACTIVE, UNAUTHORIZED, RunwireError

from .fake_agent import FakeAgent

pytestmark = pytest.mark.anyio

SECRET = "client-write-only-secret-" + "0123456789abcdef" * 3
WRITE = ["publish", "steer", "cancel"]


def token(caps: list[str], user: str = "alice") -> str:
    return mint_token(user=user, sessions={"trip-*": caps}, secret=SECRET)


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://", secret=SECRET) as srv:
        yield srv.url


async def test_a_publish_only_token_sends_steers_and_cancels_without_attaching(url: str) -> None:
    sid = "trip-1"
    with anyio.fail_after(10):
        # Attaching needs 'subscribe': the default session cannot even open with this token.
        with pytest.raises(RunwireError) as refused:
            async with client_side.connect(url, sid, token=token(WRITE)):
                pass
        assert refused.value.code == UNAUTHORIZED

        async with (
            FakeAgent(url, sid, token=token(["subscribe", "agent"])) as agent,
            client_side.connect(url, sid, token=token(WRITE), subscribe=False) as poster,
        ):
            assert poster.subscribe is False
            run = await poster.send("plan a trip")
            prompt = await agent.wait_for(lambda e: e.get("run_id") == run.run_id)
            assert prompt["message"]["parts"][0]["text"] == "plan a trip"
            assert prompt["user_id"] == "alice"
            await agent.start(run.run_id)

            delivery = run.steer("make it 5 days")
            published = await delivery.published
            steered = await agent.wait_steer(delivery.message.id)
            assert steered["serial"] == published.serial
            # Its outcome needs the session's entries: it failed at once.
            assert delivery.outcome.done()
            with pytest.raises(RunwireError) as outcome:
                await delivery.outcome
            assert outcome.value.code == NOT_ATTACHED

            await poster.cancel(run.run_id, reason="enough")
            cancel = await agent.wait_for(lambda e: e["kind"] == "cancel")
            assert (cancel["run_id"], cancel["reason"]) == (run.run_id, "enough")

            # A handle on a Run by id works without a view; the relay checks each publish.
            await agent.end(run.run_id, "cancelled")
            late = poster.run(run.run_id).steer("too late")
            with pytest.raises(RunwireError) as ended:
                await late.published
            assert ended.value.code == RUN_NOT_ACTIVE


async def test_whatever_reads_the_session_fails_at_once_with_not_attached(url: str) -> None:
    async with client_side.connect(url, "trip-2", token=token(WRITE), subscribe=False) as poster:
        run = await poster.send("hello")
        view = poster.view
        with anyio.fail_after(5):  # nothing here may wait for entries that never come
            reads = [
                run.result,
                lambda: run.cancel(),  # waits for the end by default
                lambda: poster.cancel(run.run_id, wait=True),
                lambda: view.load_older(),
            ]
            for read in reads:
                with pytest.raises(RunwireError) as info:
                    await read()
                assert info.value.code == NOT_ATTACHED
                assert "subscribe=False" in info.value.message
            for sync_read in [
                lambda: run.status,
                lambda: run.queued,
                lambda: run.refused,
                view.messages,
                view.runs,
                lambda: view.run(run.run_id),
                view.waiting,
                view.has_older,
                lambda: view.branches("x"),
                lambda: view.select_branch("x"),
                lambda: view.tree,
                view.events,
                lambda: view.on("message", print),
                poster.paused_run,
            ]:
                with pytest.raises(RunwireError) as info:
                    sync_read()
                assert info.value.code == NOT_ATTACHED
            # A cancel that does not wait is a publish: it works, and returns no messages
            # (what the Run took cannot be seen).
            assert await run.cancel(wait=False) == []
        assert "write-only" in repr(run) and "write-only" in repr(poster)


async def test_subscribe_false_with_a_token_that_may_read_says_why_the_relay_refuses(
    url: str,
) -> None:
    # The relay takes unattached publishes only from a token without 'subscribe' there.
    full = token(["subscribe", *WRITE])
    async with client_side.connect(url, "trip-3", token=full, subscribe=False) as poster:
        with anyio.fail_after(5), pytest.raises(RunwireError) as info:
            await poster.send("hello")
    assert info.value.code == NOT_ATTACHED
    assert "subscribe" in info.value.message and info.value.details["session_id"] == "trip-3"


def test_a_write_only_session_takes_no_refusal_callback() -> None:
    with pytest.raises(RunwireError) as info:
        client_side.connect("ws://unused", "s", subscribe=False, on_refused_message=print)
    assert info.value.code == "VALIDATION_ERROR"
