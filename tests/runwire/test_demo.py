"""`runwire demo`: the README's first command works, and its model reacts to steering."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runwire.demo import demo_model, plan_reply
from transport import AbortController, user_message
from transport.messages import TextPart, UIMessage


def assistant(text: str) -> UIMessage:
    return UIMessage(id="a", role="assistant", parts=[TextPart(text=text)])


def test_plan_follows_the_prompt() -> None:
    reply = plan_reply([user_message("Plan a 3-day trip to Lisbon.")])
    assert "3-day plan for Lisbon" in reply
    assert "Day 3:" in reply and "Day 4:" not in reply


def test_plan_reacts_to_steering_at_the_tail() -> None:
    convo = [
        user_message("Plan a 3-day trip to Lisbon."),
        assistant("Here is a 3-day plan for Lisbon. Day 1"),
        user_message("Make it 5 days, and keep it under £800."),
    ]
    reply = plan_reply(convo)
    assert reply.startswith('Got it: "Make it 5 days, and keep it under £800".')
    assert "5-day plan for Lisbon" in reply and "Day 5:" in reply
    assert "under £800" in reply


@pytest.mark.anyio
async def test_model_stops_when_its_signal_fires() -> None:
    ctrl = AbortController()
    words: list[str] = []
    async for word in demo_model([user_message("Plan 4 days in Rome")], ctrl.signal, delay=0):
        words.append(word)
        if len(words) == 3:
            ctrl.abort()
    assert len(words) == 3


def test_demo_command_chats_steers_and_quits(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runwire",
            "demo",
            "--port",
            "0",
            "--store",
            f"sqlite:///{tmp_path / 'demo.db'}",
            "--session",
            "t1",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen = ""

    def read_until(marker: str) -> str:
        nonlocal seen
        while marker not in seen:
            ch = proc.stdout.read(1)  # type: ignore[union-attr]
            if not ch:
                raise AssertionError(f"demo exited before {marker!r}: {seen}")
            seen += ch
        return seen

    try:
        read_until("Type to chat")
        proc.stdin.write("Plan a 3-day trip to Lisbon.\n")
        proc.stdin.flush()
        read_until("Day 1:")
        proc.stdin.write("Make it 5 days please\n")  # steers the streaming Run
        proc.stdin.flush()
        read_until("complete]")
        proc.stdin.write("/quit\n")
        proc.stdin.flush()
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
    # The answer to the steering streams as it comes, before the Run ends.
    assert "5-day plan for Lisbon" in seen
    assert seen.index("Day 5:") < seen.index("complete]"), seen
