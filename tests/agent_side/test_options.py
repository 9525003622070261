"""RunOptions: validation, merging, and how connect/create_run pass them to a Run."""

from __future__ import annotations

import pytest

import agent_side
from agent_side import QueueOptions, RunOptions
from transport import checks

from .helpers import client_end

pytestmark = pytest.mark.anyio


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError):
        RunOptions(max_iterations=0)
    with pytest.raises(ValueError):
        RunOptions(on_iteration_limit="answer")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RunOptions().merge(queue={"steering": "some"})


def test_merge_keeps_what_is_not_given() -> None:
    pii = checks.pii()
    base = RunOptions(max_iterations=3, input_checks=(pii,), durable=True)
    merged = base.merge(queue={"follow_up": "all"}, history=False)
    assert merged.max_iterations == 3 and merged.input_checks == (pii,) and merged.durable
    assert merged.queue == QueueOptions(steering="all", follow_up="all")
    assert not merged.history and merged.save_interrupted_reply


async def test_session_defaults_reach_the_run_and_create_run_overrides_them(
    relay_url: str,
) -> None:
    async with client_end(relay_url, "opts") as client:
        first = await client.prompt("one")
        second = await client.prompt("two")
        async with agent_side.connect(
            relay_url, "opts", max_iterations=2, on_iteration_limit="error", history=False
        ) as session:
            a = session.create_run(first)
            b = session.create_run(second, max_iterations=5, durable=True)
            assert (a.max_iterations, a.on_iteration_limit, a.keeps_history) == (2, "error", False)
            assert (b.max_iterations, b.durable, b.adopted) == (5, True, False)
