"""A Run's ``on_steer`` hook and the refusals of its input checks (internal to ``agent_side``).

A queued message that passed its checks calls ``on_steer`` if it is steering.
A plain hook runs on the delivery path; an async one is awaited in a task.
Either way its exception is logged, never raised. A message the checks
refused is published as a ``refused`` entry and never reaches the model.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from transport._tree import ViewMessage
from transport.checks import Check, first_refusal, refusal_entry_id
from transport.errors import RunwireError
from transport.frames import EntryBody, ErrorBody, RefusedEntry

from ._options import SteerHook
from ._run_link import RunLink

__all__ = ["RunInputHooks", "SteeredRun"]

log = logging.getLogger("runwire.agent")


class SteeredRun(Protocol):
    """What ``RunInputHooks`` needs of its ``Run``."""

    @property
    def run_id(self) -> str: ...

    @property
    def on_steer(self) -> SteerHook | None: ...

    @property
    def ended(self) -> bool: ...


class RunInputHooks:
    """Calls one Run's ``on_steer`` and publishes what its input checks refused."""

    def __init__(
        self,
        run: SteeredRun,
        link: RunLink,
        publish: Callable[[EntryBody], Awaitable[None]],
        checks: Callable[[], list[Check]],
    ) -> None:
        self._run = run
        self._link = link
        self._publish = publish
        self._checks = checks
        self._refusals: dict[str, RefusedEntry] = {}

    async def check_prompt(self) -> RunwireError | None:
        """Check the Run's prompt; a refusal is kept to publish before the Run's end."""
        checks = self._checks()
        if not checks:
            return None
        prompt = self._link.tree().prompt(self._run.run_id)
        if prompt is None:
            return None
        refusal = await first_refusal(checks, prompt.message)
        if refusal is not None:
            self._refusals[prompt.message.id] = _refused_entry(self._run.run_id, prompt, refusal)
        return refusal

    def ready(self, vm: ViewMessage) -> None:
        """A queued message passed its checks: a steering one calls ``on_steer``."""
        run = self._run
        if vm.intent != "steer" or run.ended or run.on_steer is None:
            return
        try:
            outcome = run.on_steer()
        except Exception:
            log.exception("on_steer of run %s failed", run.run_id)
            return
        if inspect.isawaitable(outcome):
            self._link.spawn(self._await_steer, outcome)

    async def _await_steer(self, outcome: Awaitable[object]) -> None:
        """Finish an async ``on_steer``; its exception is logged."""
        try:
            await outcome
        except Exception:
            log.exception("on_steer of run %s failed", self._run.run_id)

    def refused(self, vm: ViewMessage, error: RunwireError) -> None:
        """An input check refused a queued message: publish the refusal from a task."""
        log.info("run %s: input check refused %s: %s", self._run.run_id, vm.message.id, error)
        self._refusals[vm.message.id] = _refused_entry(self._run.run_id, vm, error)
        self._link.spawn(self.flush)

    async def flush(self) -> None:
        """Publish the refusals not published yet."""
        for message_id, entry in list(self._refusals.items()):
            try:
                await self._publish(entry)
            except RunwireError as exc:
                log.warning(
                    "run %s: refusal of %s not published: %s", self._run.run_id, message_id, exc
                )
            self._refusals.pop(message_id, None)


def _refused_entry(run_id: str, vm: ViewMessage, error: RunwireError) -> RefusedEntry:
    return RefusedEntry(
        id=refusal_entry_id(vm.message.id),
        run_id=run_id,
        message_id=vm.message.id,
        intent=vm.intent or "steer",
        error=ErrorBody(code=error.code, message=error.message, details=error.details),
    )
