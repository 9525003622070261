"""``RunInputs``: the queued messages of one Run, as the agent takes them in.

A Run's input is its prompt, then the steers, follow-ups and injects aimed at it. Each queued
message first passes the Run's input checks. A refused message is dropped and reported with a
``refused`` entry; the Run keeps running.

``has_input()`` is true while a model call is still to make. It decides what the next call takes
in: every injected message, then steering by the steering queue mode. Follow-ups come only when
the current turn has nothing still to answer, and they start a new turn. ``max_iterations``
bounds the model calls of one turn; at the limit ``limit_reached`` is set.

``take_seen`` gives what a reply took in, for its ``seen`` list. ``to_save`` gives the injects
that no call took in, saved at a ``complete`` end.

See docs/explanation/input-checks.md for the rules in full.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from transport._tree import ViewMessage
from transport.checks import Check, as_refusal, first_refusal
from transport.errors import RunwireError

__all__ = ["RunInputs"]

Spawn = Callable[..., object]


class RunInputs:
    """The queue state of one Run (see the module docstring)."""

    def __init__(
        self,
        *,
        inputs: Callable[[], list[ViewMessage]],
        checks: Sequence[Check],
        steering: str,
        follow_up: str,
        spawn: Spawn,
        ready: Callable[[ViewMessage], None],
        refuse: Callable[[ViewMessage, RunwireError], None],
        max_iterations: int | None = None,
    ) -> None:
        self._inputs = inputs
        self.checks = list(checks)
        self.steering = steering
        self.follow_up = follow_up
        self._spawn = spawn
        self._ready = ready
        self._refuse = refuse
        self.max_iterations = max_iterations
        self.turn = 1
        self.iterations = 0
        self.limit_reached = False
        self.answered = False
        self.owe = False  # tool results, or a retried step, wait for a model call
        self.drained: list[str] = []
        self.taken: set[str] = set()
        self.stamped: set[str] = set()
        self.state: dict[str, str] = {}  # message id -> "checking" | "passed"
        self.refused: dict[str, RunwireError] = {}
        self.intents: dict[str, str] = {}

    # ------------------------------------------------------------ checks --

    def folded(self, vm: ViewMessage, *, live: bool = True) -> None:
        """A queued message of the Run is in the view: check it (once).

        ``live``: it just folded in (a message found in the backlog is not
        news: ``ready`` is not called for it).
        """
        mid = vm.message.id
        if mid in self.state or mid in self.refused:
            return
        self.intents[mid] = vm.intent or "steer"
        self.state[mid] = "checking"
        for i, check in enumerate(self.checks):
            try:
                result = check(vm.message)
            except Exception as exc:
                self._refused(vm, as_refusal(check, exc))
                return
            if inspect.isawaitable(result):
                self._spawn(self._finish, vm, check, result, self.checks[i + 1 :], live)
                return
        self._passed(vm, live)

    async def _finish(
        self,
        vm: ViewMessage,
        check: Check,
        pending: Awaitable[Any],
        rest: list[Check],
        live: bool,
    ) -> None:
        try:
            await pending
        except Exception as exc:
            refusal: RunwireError | None = as_refusal(check, exc)
        else:
            refusal = await first_refusal(rest, vm.message)
        if refusal is not None:
            self._refused(vm, refusal)
        else:
            self._passed(vm, live)

    def _passed(self, vm: ViewMessage, live: bool) -> None:
        self.state[vm.message.id] = "passed"
        if live:
            self._ready(vm)

    def _refused(self, vm: ViewMessage, error: RunwireError) -> None:
        self.state.pop(vm.message.id, None)
        self.refused[vm.message.id] = error
        self._refuse(vm, error)

    def checking(self) -> list[str]:
        """Ids of queued messages still being checked."""
        return [mid for mid, state in self.state.items() if state == "checking"]

    # ---------------------------------------------------------- draining --

    def available(self, intent: str) -> list[str]:
        """Ids of the Run's ``intent`` messages that passed and were not taken in, oldest first."""
        out: list[str] = []
        for vm in self._inputs():
            if vm.intent != intent:
                continue
            mid = vm.message.id
            if mid in self.taken or mid in self.stamped:
                continue
            if mid not in self.state:
                self.folded(vm, live=False)  # in the backlog before this Run existed
            if self.state.get(mid) == "passed":
                out.append(mid)
        return out

    def _drain(self, ids: list[str], mode: str) -> bool:
        take = ids if mode == "all" else ids[:1]
        for mid in take:
            self.drained.append(mid)
            self.taken.add(mid)
        return bool(take)

    def has_input(self) -> bool:
        """True while a model call is still to make; takes in what the next call gets."""
        if self.limit_reached:
            return False
        self._drain(self.available("inject"), "all")
        self._drain(self.available("steer"), self.steering)
        call_due = (
            not self.answered
            or self.owe
            or any(self.intents.get(mid) != "inject" for mid in self.drained)
        )
        if not call_due and self._drain(self.available("follow_up"), self.follow_up):
            self.turn += 1
            self.iterations = 0
            call_due = True
        if call_due and self.max_iterations is not None and self.iterations >= self.max_iterations:
            self.limit_reached = True
            return False
        return call_due

    def take_seen(self) -> tuple[list[str], bool]:
        """A model call starts: what it took in (its ``seen``), and the state to ``untake``."""
        seen, self.drained = self.drained, []
        was_answered = self.answered
        self.stamped.update(seen)
        self.answered = True
        self.owe = False
        self.iterations += 1
        return seen, was_answered

    def untake(self, seen: list[str], was_answered: bool) -> None:
        """The call published nothing: put back what ``take_seen`` took."""
        self.stamped.difference_update(seen)
        self.drained = seen + self.drained
        self.answered = was_answered
        self.iterations -= 1

    # ----------------------------------------------------------- reading --

    def steering_unstamped(self) -> list[str]:
        """Ids of the Run's steering that no response has stamped, oldest first."""
        return [
            vm.message.id
            for vm in self._inputs()
            if vm.intent == "steer"
            and vm.message.id not in self.stamped
            and vm.message.id not in self.refused
        ]

    def visible(self) -> list[str]:
        """Queued ids the model may see now, in order: answered, taken in, then about to be."""
        soon: list[str] = []
        if not self.limit_reached:
            soon = self.available("inject")
            if self.steering == "all":
                soon += self.available("steer")
        pending = [mid for mid in self.drained if mid not in self.stamped]
        ids = set(self.stamped) | set(pending) | set(soon)
        order = [vm.message.id for vm in self._inputs() if vm.message.id in ids]
        return order

    def tail(self) -> list[str]:
        """Visible ids no response has answered yet: they go last in the model's conversation."""
        return [mid for mid in self.visible() if mid not in self.stamped]

    def to_save(self) -> list[str]:
        """Injects no model call took in (saved at a ``complete`` end when history is kept)."""
        waiting = [mid for mid in self.drained if self.intents.get(mid) == "inject"]
        return waiting + [mid for mid in self.available("inject") if mid not in waiting]

    def undelivered(self) -> list[str]:
        """Ids of queued messages not taken in by any response (refused ones left out)."""
        return [
            vm.message.id
            for vm in self._inputs()
            if vm.message.id not in self.stamped and vm.message.id not in self.refused
        ]

    def restore(self, *, turn: int, iterations: int, seen: Iterable[str], answered: bool) -> None:
        """Go on from a checkpoint (an adopted Run)."""
        self.turn = turn
        self.iterations = iterations
        self.stamped.update(seen)
        self.answered = answered
