"""ClientRun: follow-ups, injects, refusals, queued and undelivered, against a scripted agent."""

from __future__ import annotations

import anyio
import pytest

import client_side
import relay
from client_side import Outcome, Refused
from transport import RunwireError, checks, user_message
from transport.checks import refusal_entry_id
from transport.frames import ErrorBody, RefusedEntry

from .fake_agent import FakeAgent, channel_entries

pytestmark = pytest.mark.anyio


async def test_follow_up_and_inject_go_out_with_their_intent_and_metadata_queued(
    relay_url: str, session_id: str
) -> None:
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("go")
            await agent.start(run.run_id)
            follow = run.follow_up("then this")
            inject = run.inject(user_message("context", metadata={"source": "crm"}))
            await follow.published
            await inject.published
            entries = await channel_entries(relay_url, session_id)
            sent = {e["message"]["id"]: e for e in entries if e["kind"] == "message"}
            assert sent[follow.message.id]["intent"] == "follow_up"
            assert sent[follow.message.id]["message"]["metadata"] == {"queued": "follow_up"}
            assert sent[inject.message.id]["intent"] == "inject"
            assert sent[inject.message.id]["message"]["metadata"] == {
                "source": "crm",
                "queued": "inject",
            }
            assert run.queued == [follow.message, inject.message]
            await agent.reply(run.run_id, "taken", seen=[inject.message.id])
            await agent.end(run.run_id)
            assert await inject.outcome == Outcome(consumed=True, run_terminal_reason="complete")
            assert await follow.outcome == Outcome(consumed=False, run_terminal_reason="complete")
            result = await run.result()
            assert result.undelivered == [follow.message]
            assert run.queued == []


async def test_an_agents_refusal_resolves_the_outcome_and_is_heard_at_once(
    relay_url: str, session_id: str
) -> None:
    heard: list[Refused] = []
    with anyio.fail_after(10):
        async with (
            client_side.connect(relay_url, session_id, on_refused_message=heard.append) as session,
            FakeAgent(relay_url, session_id) as agent,
        ):
            run = await session.send("go")
            await agent.start(run.run_id)
            steer = run.steer("something refused")
            await agent.wait_steer(steer.message.id)
            await agent.publish(
                RefusedEntry(
                    id=refusal_entry_id(steer.message.id),
                    run_id=run.run_id,
                    message_id=steer.message.id,
                    error=ErrorBody(code="MY_RULE", message="not allowed", details={"n": 1}),
                )
            )
            outcome = await steer.outcome
            assert outcome == Outcome(
                consumed=False,
                run_terminal_reason=None,
                refused=RunwireError("MY_RULE", "not allowed", details={"n": 1}),
            )
            assert [(r.message_id, r.error.code, r.message) for r in run.refused] == [
                (steer.message.id, "MY_RULE", steer.message)
            ]
            assert [r.message_id for r in heard] == [steer.message.id]
            assert run.prompt is not None
            assert [vm.message.id for vm in session.view.messages()] == [run.prompt.id]
            assert run.queued == []
            await agent.end(run.run_id)
            assert (await run.result()).undelivered == []
        # A device that connects later reads the refusal from history but is not told again.
        later_heard: list[Refused] = []
        async with client_side.connect(
            relay_url, session_id, on_refused_message=later_heard.append
        ) as later:
            assert [r.error.code for r in later.run(run.run_id).refused] == ["MY_RULE"]
            assert later_heard == []


async def test_a_relay_refusal_rejects_published_and_resolves_the_outcome() -> None:
    async with relay.serve(port=0, store="memory://", input_checks=[checks.pii()]) as server:
        with anyio.fail_after(10):
            async with (
                client_side.connect(server.url, "s") as session,
                FakeAgent(server.url, "s") as agent,
            ):
                run = await session.send("go")
                await agent.start(run.run_id)
                inject = run.inject("IBAN DE89 3704 0044 0532 0130 00")
                assert run.queued == [inject.message]  # still being checked: it waits
                with pytest.raises(RunwireError) as exc:
                    await inject.published
                assert exc.value.code == "PII_DETECTED"
                outcome = await inject.outcome
                assert outcome.refused is not None and outcome.refused.code == "PII_DETECTED"
                assert run.queued == []
                (refused,) = run.refused
                assert refused.message == inject.message and refused.intent == "inject"
                assert await run.cancel(wait=False) == []
