"""Worker mode: ``Agent`` takes the Runs the relay dispatches to its name.

An ``Agent`` holds one connection. After every connect and reconnect it attaches again to the
sessions it works in, then registers as a ``worker`` of its name. The relay answers with one
``dispatch`` frame per new Run.

For each dispatch, the agent attaches to that session, builds the ``Run`` and calls the
``on_run`` handler in a task of its own. So one agent serves many Runs at once. The Runs of one
session share one attachment, which ends when the last of them is done.

A handler that raises ends its Run ``error``: ``AGENT_ERROR``, unless it raised a
``RunwireError``. A handler that returns without ending its Run ends it ``complete``, or
``cancelled`` if its abort signal fired. When the relay's store refuses that end with
``STORE_UNAVAILABLE``, the agent tries again in the background until the store takes it.

A dispatch marked ``adopted`` passes this worker a durable Run whose worker went away. The
``Run`` is built from the dispatch's checkpoint, and the handler is called as for a new Run;
``run.adopted`` tells the two apart. A handler that raises ``RunPaused`` leaves its Run
suspended on questions. Once they are answered, the relay dispatches the Run again, adopted, and
``run.resume_tools()`` finishes the paused step. A Run dispatched again while its handler still
runs here is taken once that handler is done.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from ssl import SSLContext
from types import TracebackType

import anyio
import anyio.abc

from transport import _tracing as tracing
from transport import logcontext
from transport._keepalive import DEFAULT_KEEPALIVE_TIMEOUT
from transport._runs import run_ended
from transport.asyncio._connection import RATE_LIMIT_WAIT, STORE_WAIT, Connection, TokenProvider
from transport.asyncio._tasks import Background
from transport.checks import Check
from transport.errors import AGENT_LOST, RUN_NOT_ACTIVE, STORE_UNAVAILABLE, RunwireError
from transport.frames import Dispatch, Worker

from ._link import Link
from ._options import EndReason, Invocation, IterationLimit, QueueOptions, RunOptions, as_error
from ._run import Run, RunPaused
from ._session import AgentSession

__all__ = ["Agent", "RunHandler"]

log = logging.getLogger("runwire.agent")

RunHandler = Callable[[Run], Awaitable[object]]


class Agent:
    """A worker of an agent name (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_provider: TokenProvider | None = None,
        name: str = "default",
        client_id: str | None = None,
        queue: Mapping[str, str] | QueueOptions | None = None,
        max_in_flight: int = 1,
        rollup_window: float = 0.0,
        input_checks: Sequence[Check] = (),
        max_iterations: int | None = None,
        on_iteration_limit: IterationLimit = "stop",
        history: bool = True,
        save_interrupted_reply: bool = True,
        durable: bool = False,
        timeout: float | None = None,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        store_wait: float = STORE_WAIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        ssl: SSLContext | None = None,
    ) -> None:
        """A worker of agent ``name``; the keyword options are the ``RunOptions`` of its Runs.

        ``max_in_flight`` is how many appends of one reply may wait for the
        relay's acknowledgement at once (as for ``connect()``); it does not
        limit Runs: a worker takes every Run the relay hands it, in any number
        of sessions. ``rollup_window`` (seconds, default 0: off) is how long a
        ``pipe()`` may hold tokens before it publishes them (as for ``connect()``).
        ``rate_limit_wait`` and ``store_wait`` bound how long a
        publish refused ``RATE_LIMITED`` or ``STORE_UNAVAILABLE`` goes again (as
        for ``connect()``). ``keepalive_timeout``: a relay that answers no ping this
        long counts as gone; still gone after its ``agent_grace``, the worker's started
        Runs' ``abort_signal`` fires ``AGENT_LOST``. ``ssl`` is the TLS context of a ``wss://``
        URL (as for ``connect()``). Raises ``ValueError`` for a bad option.
        """
        self.url = url
        self.name = name
        self.options = RunOptions().merge(
            queue=queue,
            input_checks=input_checks,
            max_iterations=max_iterations,
            on_iteration_limit=on_iteration_limit,
            history=history,
            save_interrupted_reply=save_interrupted_reply,
            durable=durable,
            timeout=timeout,
        )
        self.queue = self.options.queue
        self.max_in_flight = max_in_flight
        if not 0 <= rollup_window <= 10:
            raise ValueError(f"rollup_window must be 0 to 10 seconds, not {rollup_window}")
        self.rollup_window = rollup_window
        self.handler: RunHandler | None = None
        self._link: Link[AgentSession] = Link(
            url,
            token=token,
            token_provider=token_provider,
            client_id=client_id,
            on_dispatch=self._on_dispatch,
            after_connect=self._register,
            rate_limit_wait=rate_limit_wait,
            store_wait=store_wait,
            keepalive_timeout=keepalive_timeout,
            ssl=ssl,
        )
        self._taken: set[tuple[str, str]] = set()
        self._again: dict[tuple[str, str], Dispatch] = {}
        self._early: list[Dispatch] = []
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._stopped = anyio.Event()
        self._handlers = Background()  # one ``_take`` per Run; aclose cancels them
        self._runs: dict[tuple[str, str], Run] = {}  # the Runs whose handler is running
        self._draining = False  # shutdown(): dispatches are left for another worker
        self._quiet: anyio.Event | None = None  # set when the last Run taken is done

    @property
    def client_id(self) -> str | None:
        """The client id the relay knows this worker by (kept across reconnects)."""
        return self._link.conn.client_id

    @property
    def connection(self) -> Connection:
        """The underlying connection (its state, for tests and health checks)."""
        return self._link.conn

    def on_run(self, handler: RunHandler) -> RunHandler:
        """Decorator: ``handler(run)`` is called for each Run dispatched to this agent."""
        self.handler = handler
        return handler

    async def serve(self) -> None:
        """Take Runs until cancelled or ``aclose()``.

        Raises ``RunwireError`` if it cannot connect.
        """
        if self._stack is not None:
            await self._stopped.wait()
            return
        async with self:
            await self._stopped.wait()

    async def __aenter__(self) -> Agent:
        if self.handler is None:
            raise RuntimeError("set a handler with @agent.on_run before serving")
        if self._stack is not None:
            raise RuntimeError("this Agent is already serving")
        if self._stopped.is_set():
            raise RuntimeError("this Agent was closed; make a new one")
        stack = AsyncExitStack()
        try:
            await stack.enter_async_context(self._link.running())
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        # Runs waiting for a worker are dispatched as soon as it registers,
        # which happens while connecting, before the task group existed.
        early, self._early = self._early, []
        for frame in early:
            self._on_dispatch(frame)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            # The block that entered the task groups leaves them, in its own scope.
            stack, self._stack = self._stack, None
            if stack is not None:
                await stack.aclose()

    async def aclose(self) -> None:
        """Stop taking Runs, cancel the handlers still running and close the connection.

        Safe from any task or cancel scope (a caller's ``fail_after``, say): the
        ``async with`` block (or ``serve()``) that entered the Agent leaves its task
        groups when it exits. Runs left active end ``AGENT_LOST`` on the relay after
        its grace period.
        """
        self._stopped.set()
        self._link.shut()
        self._handlers.cancel()  # not the task group: it covers the body of ``async with``
        await self._link.aclose()

    async def shutdown(self, grace: float) -> None:
        """Stop gracefully: take no new Run, let running ones finish, then close.

        Runs dispatched from now on are left to the relay, which hands them to another
        worker once this one is gone. Runs still going after ``grace`` seconds are left
        to the relay if durable (it hands them, with their last checkpoint, to another
        worker after its ``agent_grace``); the others end ``error`` with code
        ``AGENT_LOST`` and ``details.reason`` ``worker_shutdown``.
        """
        self._draining = True
        with anyio.move_on_after(grace):
            while self._taken:
                self._quiet = anyio.Event()
                await self._quiet.wait()
        left = [run for run in self._runs.values() if not run.ended]
        for run in left:
            if run.durable:
                log.info("run %s is durable: left for another worker", run.run_id)
                continue
            error = RunwireError(
                AGENT_LOST,
                f"the worker shut down; the Run did not finish within {grace:g} s",
                details={"reason": "worker_shutdown", "grace_seconds": grace},
            )
            try:
                await run.end("error", error=error)
            except RunwireError as exc:
                log.warning("could not end run %s on shutdown: %s", run.run_id, exc)
        await self.aclose()

    # ---------------------------------------------------------- internal --

    async def _register(self, conn: Connection) -> None:
        await conn.request(Worker(req=0, agent=self.name), wait_ready=False)

    def _on_dispatch(self, frame: Dispatch) -> None:
        if self._stopped.is_set() or self._draining:
            # Closing (its task group may have ended already): the relay hands the Run
            # to another worker once this one is gone.
            return
        if self._tg is None:
            self._early.append(frame)
            return
        key = (frame.session_id, frame.run_id)
        if key in self._taken:
            if frame.adopted:
                self._again[key] = frame  # handed back while its old handler winds down
            return
        self._taken.add(key)
        self._handlers.start_soon(self._tg, self._take, frame)

    async def _take(self, frame: Dispatch) -> None:
        try:
            ids = {"session_id": frame.session_id, "run_id": frame.run_id}
            with logcontext.bind(**ids, client_id=self.client_id):
                await self._take_run(frame)
        except Exception:  # a bug here must not bring down the other Runs
            log.exception("run %s of session %s failed", frame.run_id, frame.session_id)
        again = self._again.pop((frame.session_id, frame.run_id), None)
        if again is not None:
            self._on_dispatch(again)

    async def _take_run(self, frame: Dispatch) -> None:
        key = (frame.session_id, frame.run_id)
        try:
            session = await self._link.acquire(frame.session_id, lambda: self._new_session(frame))
        except RunwireError as exc:
            log.warning("cannot attach %s for run %s: %s", frame.session_id, frame.run_id, exc)
            self._taken.discard(key)
            return
        try:
            info = session.tree.run(frame.run_id)
            if info is not None and run_ended(info.status):
                log.info("run %s was dispatched but has ended (%s)", frame.run_id, info.status)
                return
            run = session.create_run(
                Invocation(frame.session_id, frame.run_id),
                adopted=True if frame.adopted else None,
                checkpoint=frame.checkpoint,
            )
            self._runs[key] = run
            attributes = {"runwire.session_id": run.session_id, "runwire.run_id": run.run_id}
            parent = _trace_parent(run)
            with tracing.span("runwire.run", parent=parent, kind="consumer", attributes=attributes):
                await self._handle(run)
        finally:
            self._runs.pop(key, None)
            await self._link.release(session)
            self._taken.discard(key)
            if not self._taken and self._quiet is not None:
                self._quiet.set()

    def _new_session(self, frame: Dispatch) -> AgentSession:
        return AgentSession(
            self._link,
            frame.session_id,
            max_in_flight=self.max_in_flight,
            options=self.options,
            rollup_window=self.rollup_window,
        )

    async def _handle(self, run: Run) -> None:
        assert self.handler is not None
        try:
            await self.handler(run)
        except RunPaused as paused:
            log.info("run %s paused on %s", run.run_id, paused)
            return
        except RunwireError as exc:
            if exc.code == RUN_NOT_ACTIVE and run.ended:
                # The relay ended it meanwhile (an interrupt of a Run not started yet).
                log.info("run %s ended elsewhere while its handler ran: %s", run.run_id, exc)
                return
            if run.inbox.started_elsewhere and not run.started:
                # Handed out twice (a relay restart, or a link that dropped between the
                # dispatch and the start): the other worker started it first and owns it.
                log.info("run %s was started by another worker: %s", run.run_id, exc)
                return
            log.exception("handler of run %s failed", run.run_id)
            await self._end_quietly(run, "error", exc)
        except Exception as exc:
            log.exception("handler of run %s failed", run.run_id)
            await self._end_quietly(run, "error", as_error(exc))
        else:
            if run.ended:
                return
            if run.abort_signal.aborted:
                await self._end_quietly(run, "cancelled", None)
            elif run.pipe_error is not None:  # the last model call failed: an error chunk
                await self._end_quietly(run, "error", as_error(run.pipe_error))
            else:
                await self._end_quietly(run, "complete", None)

    @staticmethod
    async def _end_quietly(run: Run, reason: EndReason, error: RunwireError | None) -> None:
        """End the Run; one whose end the relay's store refused is ended again later.

        ``run.end`` gives up on a store that stays away after the connection's
        ``store_wait``; the Run would then stay active on the relay for as long as this
        worker is connected. So its end is tried again, every ``END_RETRY_FIRST`` seconds
        at first and every ``END_RETRY_MAX`` at most, until it is stored (or the Run ended
        otherwise, or the worker stops).
        """
        try:
            await run.end(reason, error=error)
        except RunwireError as exc:
            if exc.code != STORE_UNAVAILABLE or run.ended:
                log.warning("could not end run %s: %s", run.run_id, exc)
                return
            log.warning("could not end run %s yet (trying again): %s", run.run_id, exc)
            await run.inbox.end_until_stored(reason, error)


def _trace_parent(run: Run) -> Mapping[str, object] | None:
    """The ``traceparent`` carrier of the Run's prompt (the client's send span), if any."""
    if not tracing.ENABLED:
        return None
    for message in reversed(run.messages):
        if message.role == "user":
            found = tracing.carrier_of(message.metadata)
            if found is not None:
                return found
    return None
