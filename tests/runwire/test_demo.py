"""`runwire demo`: the README's first command works, and its model reacts to steering."""

from __future__ import annotations

import re
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
    # A steer as the conversation tree gives it to a model: metadata.queued says "steer".
    convo = [
        user_message("Plan a 3-day trip to Lisbon."),
        assistant("Here is a 3-day plan for Lisbon. Day 1"),
        user_message("Make it 5 days, and keep it under £800.", metadata={"queued": "steer"}),
    ]
    reply = plan_reply(convo)
    assert reply.startswith('Got it: "Make it 5 days, and keep it under £800".')
    assert "5-day plan for Lisbon" in reply and "Day 5:" in reply
    assert "under £800" in reply


def test_a_steered_reply_says_it_changed_course_and_a_new_prompt_does_not() -> None:
    said = "Make it 5 days, and keep it under £800."
    history = [
        user_message("Plan a 3-day trip to Lisbon."),
        assistant("Here is a 3-day plan for Lisbon. Day 1"),
    ]
    steered = plan_reply([*history, user_message(said, metadata={"queued": "steer"})])
    fresh = plan_reply([*history, user_message(said)])
    assert steered != fresh
    assert steered.splitlines()[0] == (
        'Got it: "Make it 5 days, and keep it under £800". '
        "Changing course: here is a 5-day plan for Lisbon."
    )
    assert fresh.splitlines()[0] == (
        'New request: "Make it 5 days, and keep it under £800". Here is a 5-day plan for Lisbon.'
    )
    assert "Changing course" not in fresh and "Got it" not in fresh
    # Both follow what was asked: the plan itself is the same.
    assert steered.splitlines()[1:] == fresh.splitlines()[1:]
    assert "- Day 5:" in steered and "under £800" in steered


@pytest.mark.anyio
async def test_model_stops_when_its_signal_fires() -> None:
    ctrl = AbortController()
    words: list[str] = []
    async for word in demo_model([user_message("Plan 4 days in Rome")], ctrl.signal, delay=0):
        words.append(word)
        if len(words) == 3:
            ctrl.abort()
    assert len(words) == 3


@pytest.mark.anyio
async def test_model_streams_the_reply_word_by_word() -> None:
    prompt = [user_message("Plan 2 days in Rome")]
    words = [w async for w in demo_model(prompt, AbortController().signal, delay=0)]
    assert "".join(str(w) for w in words) == plan_reply(prompt)
    assert words[:3] == ["Here", " is", " a"] and "\n-" in words


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
            "--pace",
            "40",
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


DEMO = [sys.executable, "-m", "runwire", "demo"]


def test_through_a_pipe_the_demo_answers_before_the_input_ends_it() -> None:
    """Plain lines, labelled; at the end of its input the chat lets the reply finish."""
    done = subprocess.run(
        [*DEMO, "--port", "0", "--store", "memory://", "--pace", "200"],
        input="Plan a 2-day trip to Oslo.\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("you> Plan a 2-day trip to Oslo.")
    assert lines[start + 1 : start + 4] == [
        "agent> Here is a 2-day plan for Oslo.",
        "       - Day 1: walk the old town and have lunch by the river.",
        "       - Day 2: visit the main museum, then a long dinner.",
    ]
    assert re.fullmatch(r"\[run [0-9a-f]{8} complete\]", lines[start + 4]), lines
    assert done.stderr == ""
