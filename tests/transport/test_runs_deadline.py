"""RunRegistry: Run deadlines (the agent's ``timeout``, the relay's ``max_run_seconds``)."""

from __future__ import annotations

import pytest

from transport._policy import RELAY, Policy, Sender
from transport._runs import RunRegistry, effective_timeout, timeout_entry
from transport.errors import RUN_TIMEOUT, RunwireError
from transport.frames import EntryBody, ErrorBody, RunEntry

from .test_runs import AGENT, ALICE, cancel, prompt


def at(reg: RunRegistry, entry: EntryBody, sender: Sender, now: int) -> EntryBody:
    """Publish ``entry`` at ``now`` ms; the entry as stored (stamped)."""
    changes = reg.plan(entry, sender, now)
    stamped = reg.stamp(entry, sender, now, changes)
    reg.apply(changes)
    return stamped


def active(run_id: str, timeout: float | None, n: int = 0) -> RunEntry:
    return RunEntry(id=f"a-{run_id}-{n}", run_id=run_id, status="active", timeout=timeout)


def test_the_relay_enforces_the_shorter_of_the_two() -> None:
    assert effective_timeout(None, None) is None
    assert effective_timeout(5, None) == 5
    assert effective_timeout(None, 60) == 60
    assert effective_timeout(500, 60) == 60
    reg = RunRegistry("s", policy=Policy(max_run_seconds=60))
    at(reg, prompt("a"), ALICE, 1000)
    stamped = at(reg, active("a", 500), AGENT, 2000)
    assert isinstance(stamped, RunEntry) and stamped.timeout == 60  # what it enforces
    record = reg.get("a")
    assert record is not None and record.deadline_ms == 62_000


def test_the_relay_ends_an_active_run_only_once_its_deadline_passed() -> None:
    reg = RunRegistry("s")
    at(reg, prompt("a"), ALICE, 1000)
    at(reg, active("a", 0.5), AGENT, 2000)
    record = reg.get("a")
    assert record is not None and record.deadline_ms == 2500
    end = timeout_entry(record)
    with pytest.raises(RunwireError) as info:
        reg.plan(end, RELAY, 2499)
    assert info.value.code == "VALIDATION_ERROR"
    at(reg, end, RELAY, 2500)
    record = reg.get("a")
    assert record is not None and record.status == "cancelled" and record.deadline_ms is None
    assert record.error is not None and record.error["code"] == RUN_TIMEOUT
    assert record.owner == AGENT.client_id


def test_a_run_without_a_deadline_is_never_timed_out() -> None:
    reg = RunRegistry("s")
    at(reg, prompt("a"), ALICE, 1000)
    at(reg, active("a", None), AGENT, 2000)
    record = reg.get("a")
    assert record is not None and record.deadline_ms is None
    late = ErrorBody(code=RUN_TIMEOUT, message="late")
    fake = RunEntry(id="t", run_id="a", status="cancelled", error=late)
    with pytest.raises(RunwireError):
        reg.plan(fake, RELAY, 10**12)


def test_suspended_time_does_not_count_and_a_resume_starts_the_deadline_anew() -> None:
    reg = RunRegistry("s")
    at(reg, prompt("a"), ALICE, 1000)
    at(reg, active("a", 1.0), AGENT, 2000)
    at(reg, RunEntry(id="s1", run_id="a", status="suspended"), AGENT, 2900)
    record = reg.get("a")
    assert record is not None and record.deadline_ms is None
    at(reg, active("a", 1.0, 1), AGENT, 9000)
    record = reg.get("a")
    assert record is not None and record.deadline_ms == 10_000
    # A cancel (a client's) is a request to the agent: the deadline stands.
    at(reg, cancel("a"), ALICE, 9100)
    assert reg.get("a").deadline_ms == 10_000  # type: ignore[union-attr]


def test_a_hand_over_clears_the_deadline_and_the_adopter_sets_its_own() -> None:
    reg = RunRegistry("s")
    at(reg, prompt("a"), ALICE, 1000)
    at(reg, RunEntry(id="x", run_id="a", status="active", durable=True, timeout=1), AGENT, 2000)
    at(reg, RunEntry(id="h", run_id="a", status="pending"), RELAY, 2500)
    assert reg.get("a").deadline_ms is None  # type: ignore[union-attr]
    other = Sender(client_id="agent-2", user_id="svc", role="agent", caps=frozenset({"agent"}))
    at(reg, active("a", 2.0), other, 7000)
    assert reg.get("a").deadline_ms == 9000  # type: ignore[union-attr]


def test_every_node_replays_the_same_deadline() -> None:
    """The stored ``run: active`` carries the timeout the relay enforces, so a node with
    another ``max_run_seconds`` (or none) still agrees on the deadline."""
    reg = RunRegistry("s", policy=Policy(max_run_seconds=2))
    other = RunRegistry("s")
    stored = [at(reg, prompt("a"), ALICE, 1000), at(reg, active("a", 30), AGENT, 2000)]
    record = reg.get("a")
    assert record is not None
    stored.append(at(reg, timeout_entry(record), RELAY, 4000))
    for entry in stored[:2]:
        other.replay(entry)
    assert other.get("a").deadline_ms == 4000  # type: ignore[union-attr]
    other.replay(stored[2])
    assert other.get("a").status == "cancelled"  # type: ignore[union-attr]


def test_a_timeout_beyond_a_year_or_not_positive_is_refused() -> None:
    for bad in (0, -1, 31_536_001, float("inf"), "5"):
        with pytest.raises(ValueError):
            RunEntry.model_validate({"id": "a", "run_id": "r", "status": "active", "timeout": bad})
