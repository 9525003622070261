"""RunInputs: what each model call takes in, by queue mode, turn and iteration budget."""

from __future__ import annotations

from typing import Any

from agent_side._inputs import RunInputs
from transport._tree import ViewMessage
from transport.errors import RunwireError
from transport.messages import UIMessage, user_message


class Channel:
    """The Run's queued messages as the view would list them."""

    def __init__(self) -> None:
        self.views: list[ViewMessage] = []
        self.ready: list[str] = []
        self.refused: list[tuple[str, str]] = []

    def add(self, mid: str, intent: str) -> ViewMessage:
        vm = ViewMessage(user_message(mid, id=mid), "r1", len(self.views) + 2, None, intent)  # type: ignore[arg-type]
        self.views.append(vm)
        return vm

    def inputs(
        self, *, mode: str = "all", follow_up: str = "one-at-a-time", **kw: Any
    ) -> RunInputs:
        return RunInputs(
            inputs=lambda: list(self.views),
            steering=mode,
            follow_up=follow_up,
            spawn=lambda *a: None,
            ready=lambda vm: self.ready.append(vm.message.id),
            refuse=lambda vm, err: self.refused.append((vm.message.id, err.code)),
            **{"checks": (), **kw},
        )


def call(inputs: RunInputs) -> list[str]:
    """One model call: what it took in."""
    seen, _ = inputs.take_seen()
    return seen


def test_the_prompt_is_owed_first_then_nothing() -> None:
    channel = Channel()
    inputs = channel.inputs()
    assert inputs.has_input()
    assert call(inputs) == []
    assert not inputs.has_input()


def test_one_at_a_time_takes_one_steering_message_per_call() -> None:
    channel = Channel()
    inputs = channel.inputs(mode="one-at-a-time")
    inputs.has_input()
    call(inputs)
    for mid in ("s1", "s2", "s3"):
        channel.add(mid, "steer")
    taken = []
    while inputs.has_input():
        taken.append(call(inputs))
    assert taken == [["s1"], ["s2"], ["s3"]]


def test_injects_join_the_next_call_but_cause_none() -> None:
    channel = Channel()
    inputs = channel.inputs()
    inputs.has_input()
    call(inputs)
    channel.add("i1", "inject")
    assert not inputs.has_input()
    assert inputs.to_save() == ["i1"]
    channel.add("s1", "steer")
    assert inputs.has_input()
    assert call(inputs) == ["i1", "s1"]
    assert inputs.to_save() == []


def test_follow_ups_wait_for_the_turn_and_start_a_new_one_with_a_fresh_budget() -> None:
    channel = Channel()
    inputs = channel.inputs(max_iterations=1)
    inputs.has_input()
    channel.add("f1", "follow_up")
    call(inputs)  # the prompt's answer: the follow-up waited
    assert inputs.turn == 1 and inputs.iterations == 1
    assert inputs.has_input()  # the turn is done: the follow-up starts turn 2
    assert (inputs.turn, inputs.iterations) == (2, 0)
    assert call(inputs) == ["f1"]
    channel.add("s1", "steer")
    assert not inputs.has_input() and inputs.limit_reached  # turn 2 used its one call
    assert inputs.undelivered() == ["s1"]


def test_a_call_that_published_nothing_gives_back_what_it_took() -> None:
    channel = Channel()
    inputs = channel.inputs()
    channel.add("s1", "steer")
    inputs.has_input()
    seen, was = inputs.take_seen()
    assert seen == ["s1"]
    inputs.untake(seen, was)
    assert inputs.has_input() and inputs.drained == ["s1"] and inputs.iterations == 0


def test_checks_refuse_or_pass_and_only_live_messages_fire_ready() -> None:
    channel = Channel()

    def no_secrets(message: UIMessage) -> None:
        if "secret" in message.text():
            raise RunwireError("SECRET", "no secrets")

    inputs = channel.inputs(checks=(no_secrets,))
    old = channel.add("backlog", "steer")  # there before the Run: checked lazily
    inputs.folded(channel.add("secret plan", "steer"))
    inputs.folded(channel.add("fine", "steer"))
    assert channel.refused == [("secret plan", "SECRET")]
    assert channel.ready == ["fine"]
    assert inputs.has_input()
    assert call(inputs) == [old.message.id, "fine"]
    assert channel.ready == ["fine"]  # the backlog message was not news
