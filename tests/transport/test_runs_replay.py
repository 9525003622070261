"""RunRegistry.replay: another relay node rebuilds the records the publishing node holds."""

from __future__ import annotations

from transport._policy import Sender
from transport._runs import RunRegistry
from transport.frames import EntryBody

from .test_runs import AGENT, ALICE, prompt, status


def published(reg: RunRegistry, log: list[EntryBody], entry: EntryBody, sender: Sender) -> None:
    changes = reg.plan(entry, sender, 1000 + len(log))
    log.append(reg.stamp(entry, sender, 1000 + len(log), changes))
    reg.apply(changes)


def replayed(log: list[EntryBody]) -> RunRegistry:
    other = RunRegistry("s")
    for entry in log:
        other.replay(entry)
    return other


def test_the_relays_end_of_an_interrupted_pending_run_makes_no_owner_on_replay() -> None:
    reg = RunRegistry("s")
    log: list[EntryBody] = []
    published(reg, log, prompt("p"), ALICE)  # pending: no agent started it
    published(reg, log, prompt("i", "interrupt"), ALICE)
    [(end, asker)] = reg.due()  # run: cancelled for p, under alice's identity
    published(reg, log, end, asker)
    assert reg.runs["p"].status == "cancelled" and reg.runs["p"].owner is None
    assert replayed(log).runs == reg.runs


def test_an_agents_end_of_a_pending_run_still_makes_it_the_owner_on_replay() -> None:
    reg = RunRegistry("s")
    log: list[EntryBody] = []
    published(reg, log, prompt("p"), ALICE)
    published(reg, log, status("p", "cancelled"), AGENT)
    assert reg.runs["p"].owner == AGENT.client_id
    assert replayed(log).runs == reg.runs


def test_a_prompt_is_replayed_as_its_stamps_say_not_planned_again() -> None:
    """An agent's prompt with a system message (a tool call's Run, say) passed the rules
    where it was published; another node applies it as stored, whatever its message."""
    from transport.frames import MessageEntry
    from transport.messages import UIMessage

    reg = RunRegistry("s")
    log: list[EntryBody] = []
    published(reg, log, prompt("p"), ALICE)
    published(reg, log, status("p", "active"), AGENT)
    child = MessageEntry(
        id="p-child",
        run_id="child",
        message=UIMessage(id="m-child", role="system", parts=[]),
        parent_run_id="p",
    )
    published(reg, log, prompt("q", "enqueue"), ALICE)  # queued behind p
    tool_agent = Sender(client_id=AGENT.client_id, user_id="svc", role="agent")  # every right
    published(reg, log, child, tool_agent)
    assert reg.runs["q"].status == "queued" and reg.runs["child"].status == "pending"
    assert replayed(log).runs == reg.runs
