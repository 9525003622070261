"""Cancel rights end to end: any device with the right cancels; the relay checks ``cancel`` /
``cancel-any``; the agent's ``on_cancel`` sees who asked and may refuse (``CANCEL_DENIED``)."""

from __future__ import annotations

import pytest

import client_side
from agent_side import CancelRequest
from transport import RunwireError

from .conductor import CLIENT_CAPS, SECRET, Conductor, stack, status, token, until

pytestmark = pytest.mark.anyio

SVC = token("svc", ["agent"])


async def test_cancel_from_a_second_device_of_the_same_user() -> None:
    agent = Conductor()
    async with (
        stack(agent, agent_token=SVC, secret=SECRET) as server,
        client_side.connect(server.url, "trip", token=token("alice")) as phone,
        client_side.connect(server.url, "trip", token=token("alice")) as laptop,
    ):
        run = await phone.send("long answer")
        await agent.wait(lambda: run.run_id in agent.started)
        await laptop.cancel(run.run_id, reason="stop", wait=True)
        assert (await run.result()).status == "cancelled"
        [request] = agent.requests
        assert (request.user_id, request.client_id, request.reason) == (
            "alice",
            laptop.client_id,
            "stop",
        )
        assert request.cancel_id is not None


async def test_a_cancel_without_the_right_is_refused_and_changes_nothing() -> None:
    agent = Conductor()
    async with (
        stack(agent, agent_token=SVC, secret=SECRET) as server,
        client_side.connect(server.url, "trip", token=token("alice")) as alice,
        client_side.connect(server.url, "trip", token=token("bob")) as bob,
        client_side.connect(
            server.url, "trip", token=token("carol", ["subscribe", "publish"])
        ) as carol,
        client_side.connect(
            server.url, "trip", token=token("dan", [*CLIENT_CAPS, "cancel-any"])
        ) as dan,
    ):
        run = await alice.send("mine")
        await agent.wait(lambda: run.run_id in agent.started)
        for session in (bob, carol):  # bob may cancel his own Runs only; carol none
            with pytest.raises(RunwireError) as info:
                await session.cancel(run.run_id)
            assert info.value.code == "UNAUTHORIZED"
        own = await carol.send("carol's")
        with pytest.raises(RunwireError) as info:
            await carol.cancel(own.run_id)
        assert info.value.code == "UNAUTHORIZED"
        assert agent.requests == []
        assert not alice.view.tree.cancel_requested(run.run_id)
        await dan.cancel(run.run_id, wait=True)  # cancel-any: anyone's
        assert (await run.result()).status == "cancelled"
        agent.release(own.run_id)


async def test_on_cancel_refusing_gives_the_asker_cancel_denied_and_the_run_goes_on() -> None:
    def only_the_owner(request: CancelRequest) -> bool:
        return request.user_id == "alice"

    agent = Conductor(on_cancel=only_the_owner)
    async with (
        stack(agent, agent_token=SVC, secret=SECRET) as server,
        client_side.connect(server.url, "trip", token=token("alice")) as alice,
        client_side.connect(
            server.url, "trip", token=token("admin", [*CLIENT_CAPS, "cancel-any"])
        ) as admin,
    ):
        run = await alice.send("keep going")
        await agent.wait(lambda: run.run_id in agent.started)
        handle = admin.run(run.run_id)
        with pytest.raises(RunwireError) as info:
            await handle.cancel(reason="admin says stop")
        assert info.value.code == "CANCEL_DENIED"
        assert info.value.details["run_id"] == run.run_id
        # Every device sees the refusal; nothing else changed.
        await until(alice, lambda: len(alice.view.tree.cancel_denials(run.run_id)) == 1)
        assert status(alice, run.run_id) == "active"
        assert not alice.view.tree.cancel_requested(run.run_id)
        assert agent.ended == []
        with pytest.raises(RunwireError) as info:
            await admin.cancel(run.run_id, wait=True)
        assert info.value.code == "CANCEL_DENIED"
        await admin.cancel(run.run_id)  # without wait: returns once sequenced
        await until(alice, lambda: len(alice.view.tree.cancel_denials(run.run_id)) == 3)
        # The owner's own cancel is accepted.
        await run.cancel()
        assert run.status == "cancelled"
        assert [r.user_id for r in agent.requests] == ["admin", "admin", "admin", "alice"]


@pytest.mark.parametrize("kind", ["plain", "async"])
async def test_an_on_cancel_that_raises_refuses_the_cancel_and_the_run_goes_on(kind: str) -> None:
    """An authorisation hook that fails must not let the cancel through (fail closed)."""
    owners: dict[str, str] = {}  # the app forgot to record the owner: the lookup raises

    def only_the_owner(request: CancelRequest) -> bool:
        return request.user_id == owners[request.run_id]

    async def only_the_owner_async(request: CancelRequest) -> bool:
        return only_the_owner(request)

    agent = Conductor()
    async with (
        stack(agent, agent_token=SVC, secret=SECRET) as server,
        client_side.connect(
            server.url, "trip", token=token("mallory", [*CLIENT_CAPS, "cancel-any"])
        ) as mallory,
        client_side.connect(server.url, "trip", token=token("alice")) as alice,
    ):
        run = await alice.send("keep going")
        await agent.wait(lambda: run.run_id in agent.started)
        agent.on_cancel = only_the_owner if kind == "plain" else only_the_owner_async  # type: ignore[assignment]
        with pytest.raises(RunwireError) as info:
            await mallory.run(run.run_id).cancel(reason="stop it")
        assert info.value.code == "CANCEL_DENIED"
        assert "on_cancel" in info.value.message
        await until(alice, lambda: len(alice.view.tree.cancel_denials(run.run_id)) == 1)
        assert status(alice, run.run_id) == "active"
        assert agent.ended == []
        agent.release(run.run_id)
        assert (await run.result()).status == "complete"


async def test_on_an_anonymous_relay_any_device_cancels_any_run() -> None:
    agent = Conductor()
    async with (
        stack(agent) as server,
        client_side.connect(server.url, "s") as phone,
        client_side.connect(server.url, "s") as laptop,
    ):
        run = await phone.send("x")
        await agent.wait(lambda: run.run_id in agent.started)
        await laptop.run(run.run_id).cancel()
        assert (await run.result()).status == "cancelled"
        assert agent.requests[0].user_id is None
