"""``Deadlines``: timers that end active Runs at their deadline.

A Run started with a ``timeout`` carries ``deadline_ms`` while it is active. The timeout is the
agent's, at most the relay's ``max_run_seconds``. Every node that follows the session keeps a
timer for the Run. When the timer fires, the hub ends the Run ``cancelled`` with ``RUN_TIMEOUT``.
The end's id names the deadline, so several nodes that end the same Run store the end once.

A Run that stops being active drops its timer: it was suspended, passed to another worker, or
ended. Becoming active again starts a new deadline. A node that dies takes its timers along.
Another node that loads the session starts them again from the stored records. An agent that went
away with its node is ended by the ``AGENT_LOST`` sweep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from transport._runs import RunRecord

__all__ = ["Deadlines"]

RunKey = tuple[str, str]
Expire = Callable[[str, str], Coroutine[Any, Any, None]]
"""Ends a Run whose deadline passed (``Liveness.time_out``)."""


class Deadlines:
    """One timer per active Run that has a deadline, on this node."""

    def __init__(self, expire: Expire) -> None:
        self._expire = expire
        self._timers: dict[RunKey, tuple[int, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._timers)

    def follow(self, record: RunRecord) -> None:
        """Time ``record`` if it is active with a deadline; else drop its timer."""
        key = (record.session_id, record.run_id)
        deadline = record.deadline_ms if record.status == "active" else None
        current = self._timers.get(key)
        if current is not None and current[0] == deadline:
            return
        self._drop(key)
        if deadline is not None:
            self._start(key, deadline, max(0.0, (deadline - time.time() * 1000) / 1000))

    def again(self, session_id: str, run_id: str, deadline: int, delay: float) -> None:
        """Try the end of a Run again in ``delay`` seconds (the store did not take it)."""
        key = (session_id, run_id)
        if key not in self._timers:
            self._start(key, deadline, delay)

    def close(self) -> None:
        """Cancel every timer and the ends under way."""
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()

    def _start(self, key: RunKey, deadline: int, delay: float) -> None:
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key, deadline)
        self._timers[key] = (deadline, handle)

    def _drop(self, key: RunKey) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer[1].cancel()

    def _fire(self, key: RunKey, deadline: int) -> None:
        current = self._timers.get(key)
        if current is None or current[0] != deadline:
            return
        del self._timers[key]
        task = asyncio.get_running_loop().create_task(self._expire(*key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
