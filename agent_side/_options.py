"""The options of a Run, and the small types its hooks see.

``RunOptions`` holds what ``Agent(...)``, ``agent_side.connect(...)`` and
``session.create_run(...)`` take for the Runs they make. That is the queue modes, the input
checks, and the iteration budget per turn with what happens at it. It also says whether the Run
keeps history, whether a cancelled reply is saved, and whether the Run is durable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from transport.checks import Check
from transport.errors import RunwireError
from transport.frames import MAX_RUN_TIMEOUT

__all__ = [
    "AGENT_ERROR",
    "ITERATION_LIMIT_REACHED",
    "CancelHook",
    "CancelRequest",
    "EndReason",
    "Invocation",
    "IterationLimit",
    "QueueMode",
    "QueueOptions",
    "RunOptions",
    "SteerHook",
    "as_error",
    "queue_options",
]

AGENT_ERROR = "AGENT_ERROR"
"""The code of a Run that ended ``error`` because the agent's code raised."""
ITERATION_LIMIT_REACHED = "ITERATION_LIMIT_REACHED"
"""The code of a Run that stopped at ``max_iterations`` with ``on_iteration_limit="error"``."""
IterationLimit = Literal["stop", "error"]

QueueMode = Literal["all", "one-at-a-time"]
EndReason = Literal["complete", "cancelled", "error"]
LifecycleStatus = Literal["active", "suspended", "complete", "cancelled", "error"]
_MODES: dict[str, QueueMode] = {"all": "all", "one-at-a-time": "one-at-a-time"}


@dataclass(frozen=True)
class Invocation:
    """Which Run to take: the session and the run id (what a dispatch names)."""

    session_id: str
    run_id: str


@dataclass(frozen=True)
class CancelRequest:
    """A cancel of a Run, as ``on_cancel`` sees it (who asked: ids stamped by the relay).

    ``interrupted_by`` is the Run whose ``interrupt`` / ``rollback`` caused it.
    """

    run_id: str
    reason: str | None = None
    client_id: str | None = None
    user_id: str | None = None
    cancel_id: str | None = None
    interrupted_by: str | None = None


@dataclass(frozen=True)
class QueueOptions:
    """How many waiting messages one ``has_input()`` takes, per kind."""

    steering: QueueMode = "all"
    follow_up: QueueMode = "one-at-a-time"


def queue_options(
    queue: Mapping[str, str] | QueueOptions | None, default: QueueOptions | None = None
) -> QueueOptions:
    """Validate a ``queue={...}`` option; raises ``ValueError`` for unknown keys or modes."""
    base = default or QueueOptions()
    if queue is None:
        return base
    if isinstance(queue, QueueOptions):
        return queue
    unknown = set(queue) - {"steering", "follow_up"}
    if unknown:
        raise ValueError(f"unknown queue keys: {', '.join(sorted(unknown))}")
    modes: list[QueueMode] = []
    for key in ("steering", "follow_up"):
        mode = queue.get(key, getattr(base, key))
        if mode not in _MODES:
            raise ValueError(f"queue mode must be 'all' or 'one-at-a-time', not {mode!r}")
        modes.append(_MODES[mode])
    return QueueOptions(steering=modes[0], follow_up=modes[1])


SteerHook = Callable[[], object]
"""``on_steer()``: plain, or async (the Run awaits it in a background task)."""
CancelHook = Callable[[CancelRequest], "bool | Awaitable[bool | None] | None"]


def as_error(error: BaseException | str | None) -> RunwireError:
    """The ``RunwireError`` a Run ends with for ``error`` (``AGENT_ERROR`` unless it is one)."""
    if isinstance(error, RunwireError):
        return error
    if error is None:
        return RunwireError(AGENT_ERROR, "the agent failed")
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return RunwireError(AGENT_ERROR, text)


@dataclass(frozen=True)
class RunOptions:
    """What a Run is made with (see each field).

    ``queue``: the queue modes. ``input_checks``: checks every queued message
    (and the prompt) passes before the model sees it. ``max_iterations``:
    model calls per turn (``None``: no limit). ``on_iteration_limit``:
    ``"stop"`` ends the Run ``complete`` (what it did not take is
    undelivered), ``"error"`` ends it ``error`` (``ITERATION_LIMIT_REACHED``).
    ``history``: the Run saves to the session what it took in without a model
    call (injects at its end); with ``False`` such messages stay undelivered.
    ``save_interrupted_reply``: a cancelled reply is saved with what was
    streamed and ``metadata.interrupted``; ``False`` leaves it to the agent's
    code (``run.save_reply``). ``durable``: the Run checkpoints every step and
    the relay hands it to another worker if this one goes away. ``timeout``:
    seconds the Run may stay active from each start (``None``: no deadline of its
    own); the relay then ends it ``cancelled`` with ``RUN_TIMEOUT`` and its
    ``abort_signal`` fires. Time spent suspended does not count: a resumed Run
    gets the whole ``timeout`` anew.
    """

    queue: QueueOptions = field(default_factory=QueueOptions)
    input_checks: tuple[Check, ...] = ()
    max_iterations: int | None = None
    on_iteration_limit: IterationLimit = "stop"
    history: bool = True
    save_interrupted_reply: bool = True
    durable: bool = False
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None and not 0 < self.timeout <= MAX_RUN_TIMEOUT:
            raise ValueError(
                f"timeout must be more than 0 s and at most a year, not {self.timeout}"
            )
        if self.max_iterations is not None and self.max_iterations < 1:
            raise ValueError("max_iterations must be at least 1 (or None)")
        if self.on_iteration_limit not in ("stop", "error"):
            raise ValueError(
                f"on_iteration_limit must be 'stop' or 'error', not {self.on_iteration_limit!r}"
            )

    def merge(
        self,
        *,
        queue: Mapping[str, str] | QueueOptions | None = None,
        input_checks: Sequence[Check] | None = None,
        max_iterations: int | None = None,
        on_iteration_limit: IterationLimit | None = None,
        history: bool | None = None,
        save_interrupted_reply: bool | None = None,
        durable: bool | None = None,
        timeout: float | None = None,
    ) -> RunOptions:
        """These options with the given ones (those not ``None``) put over them."""
        return RunOptions(
            queue=queue_options(queue, self.queue),
            input_checks=self.input_checks if input_checks is None else tuple(input_checks),
            max_iterations=self.max_iterations if max_iterations is None else max_iterations,
            on_iteration_limit=on_iteration_limit or self.on_iteration_limit,
            history=self.history if history is None else history,
            save_interrupted_reply=(
                self.save_interrupted_reply
                if save_interrupted_reply is None
                else save_interrupted_reply
            ),
            durable=self.durable if durable is None else durable,
            timeout=self.timeout if timeout is None else timeout,
        )
