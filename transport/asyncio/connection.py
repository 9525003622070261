"""``Connection``: one logical, self-healing connection from an SDK to the relay.

A ``Connection`` owns at most one WebSocket at a time. ``request(frame)`` gives the frame
a fresh ``req`` id, sends it once the connection is ready, and returns the reply frame:
``attached``, ``ack`` or ``page``. An ``error`` reply raises ``RunwireError``. Frames the
relay pushes unasked go to ``on_frame``.

When the socket drops, the connection reconnects with exponential backoff and full
jitter. After a 1012 close the first try goes at once, since the relay restarts. A relay
that answers no ping for ``keepalive_timeout`` seconds counts as dropped. After each
``hello`` and ``welcome`` it awaits ``on_connect``, where the SDK re-attaches its
sessions. Then it sends again every request still waiting for a reply. Each request of
the protocol is idempotent, so a retry never duplicates anything.

Publishes go through the connection's publish lane, ``self.lane``, a
``transport.lane.PublishLane``. The lane decides their order and when a refused one goes
again. This module only feeds it the replies and the clock, and waits as it says.

``token`` is sent as ``Authorization: Bearer``. ``token_provider`` is asked for a fresh
token before every connect but a first one that already has ``token``. ``UNAUTHORIZED``
is final, and so is ``TOKEN_EXPIRED`` without a provider: requests then fail with that
error and the state callbacks hear ``"closed"``. ``aclose()`` ends everything; pending
requests then fail with ``RunwireError("CONNECTION_CLOSED")``.

Why the lane keeps publishes in order, and how it treats refusals, is told in
docs/explanation/publish-lane.md.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any, Literal

import anyio
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from .. import codec
from ..errors import (
    CLOSE_CODES,
    PAYLOAD_TOO_LARGE,
    TOKEN_EXPIRED,
    UNAUTHORIZED,
    CloseCode,
    RunwireError,
)
from ..frames import Error, Hello, Publish, RelayFrame, Welcome
from ..keepalive import DEFAULT_KEEPALIVE_TIMEOUT, keepalive
from ..lane import RATE_LIMIT_WAIT, STORE_WAIT, PublishLane
from ..lane import backoff as lane_backoff
from ..redact import install as redact_tokens

__all__ = ["CONNECTION_CLOSED", "RATE_LIMIT_WAIT", "STORE_WAIT", "Connection", "TokenProvider"]

log = logging.getLogger("runwire.connection")
redact_tokens()  # the token this connection sends never reaches websockets' DEBUG log

CONNECTION_CLOSED = "CONNECTION_CLOSED"

FrameHandler = Callable[[RelayFrame], None]
TokenProvider = Callable[[], "str | Awaitable[str]"]
ConnectHook = Callable[["Connection"], Awaitable[None]]


DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
"""The largest frame a request may be before the relay's welcome says its own limit."""


class _Pending:
    __slots__ = ("data", "done", "error", "reply", "sent_on", "text")

    def __init__(self, data: dict[str, Any], text: bytes) -> None:
        self.data = data
        self.text = text  # the frame as sent (UTF-8 JSON)
        self.sent_on = -1
        # asyncio's own Event: this module is asyncio-only, and anyio's costs a
        # backend lookup per request (one request per streamed append).
        self.done = asyncio.Event()
        self.reply: RelayFrame | None = None
        self.error: RunwireError | None = None


class Connection:
    """A reconnecting request/reply connection to a relay."""

    def __init__(
        self,
        url: str,
        *,
        client_id: str | None = None,
        role: Literal["client", "agent"] = "client",
        token: str | None = None,
        token_provider: TokenProvider | None = None,
        on_frame: FrameHandler | None = None,
        on_connect: ConnectHook | None = None,
        reconnect: bool = True,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        open_timeout: float = 10.0,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        store_wait: float = STORE_WAIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        ssl: SSLContext | None = None,
    ) -> None:
        self.url = url
        self.keepalive = keepalive(keepalive_timeout, close_max=10.0)
        """Ping settings: a relay that answers no ping for ``keepalive_timeout`` s is gone."""
        self.ssl = ssl
        """The TLS context of a ``wss://`` URL (None: the system's trusted certificates)."""
        self.client_id = client_id
        self.role = role
        self.token = token
        self.token_provider = token_provider
        self.on_frame = on_frame
        self.on_connect = on_connect
        self.reconnect = reconnect
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.open_timeout = open_timeout
        self.welcome: Welcome | None = None
        self.connects = 0
        self._restarting = False  # the last connection was closed 1012 (service restart)
        self._ws: ClientConnection | None = None
        self._ready = anyio.Event()
        self._closed = False
        self._fatal: RunwireError | None = None
        self._next_req = 0
        self._pending: dict[int, _Pending] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        # The background task's own scope: ``aclose()`` cancels it, not the task
        # group's, which also covers the body of the caller's ``async with``. It is
        # made on entry: a cancel scope needs a running event loop, ``__init__`` does not.
        self._stop: anyio.CancelScope | None = None
        self._first = anyio.Event()
        self._first_error: BaseException | None = None
        self._refused: RunwireError | None = None  # ``on_connect`` refused UNAUTHORIZED
        self._state_callbacks: list[Callable[[str], None]] = []
        self._closed_emitted = False
        self.lane = PublishLane(
            jitter=random.random, rate_limit_wait=rate_limit_wait, store_wait=store_wait
        )
        """The order of this connection's publishes and their refusals (``transport.lane``)."""
        self._lane_waiting = 0  # publishes waiting in ``_turn``
        self._lane_changed = asyncio.Event()

    # ------------------------------------------------------------ public --

    @property
    def rate_limit_wait(self) -> float:
        """Seconds a publish refused ``RATE_LIMITED`` keeps going again (the lane's)."""
        return self.lane.rate_limit_wait

    @property
    def store_wait(self) -> float:
        """Seconds a publish refused ``STORE_UNAVAILABLE`` keeps going again (the lane's)."""
        return self.lane.store_wait

    @property
    def connected(self) -> bool:
        """True while a socket is up and ready (never after ``aclose()``)."""
        return self._ready.is_set() and not self._closed

    @property
    def error(self) -> RunwireError | None:
        """The error that ended the connection for good (``UNAUTHORIZED``, ...), or None."""
        return self._fatal

    def on_state(self, fn: Callable[[str], None]) -> None:
        """Call ``fn("connected" | "disconnected" | "closed")`` on every change."""
        self._state_callbacks.append(fn)

    async def __aenter__(self) -> Connection:
        self._stop = anyio.CancelScope()
        if self._closed:  # closed before it was entered: the background task stops at once
            self._stop.cancel()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run_until_closed)
        try:
            await self._first.wait()
        except BaseException:
            # Cancelled while connecting: leave the task group, or the caller's
            # cancel scopes unwind out of order and its cancellation escapes them.
            await self._leave()
            raise
        if self._first_error is not None:
            await self._leave()
            raise self._first_error
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._leave()

    async def _leave(self) -> None:
        """Close, then leave the task group: only the ``async with`` that entered it
        does this, in the task and scope nesting it was entered in."""
        try:
            await self.aclose()
        finally:
            tg, self._tg = self._tg, None
            if tg is not None:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
            self._emit_closed()

    async def aclose(self) -> None:
        """Close the socket, stop reconnecting, fail pending requests.

        Safe from any task or cancel scope (inside the caller's ``fail_after``, say):
        it stops the background tasks, and the ``async with`` block that entered the
        connection leaves their task group when it exits. A close cancelled midway
        (its timeout fired) still leaves the connection closed."""
        if self._closed:
            return
        self._closed = True
        self._fail_all(RunwireError(CONNECTION_CLOSED, "connection closed"))
        try:
            if self._ws is not None:
                await self._ws.close()
        finally:
            if self._stop is not None:
                self._stop.cancel()
            self._emit_closed()

    async def _run_until_closed(self) -> None:
        assert self._stop is not None  # made by ``__aenter__``, which starts this task
        with self._stop:
            await self._run()

    def reserve(self) -> int:
        """Take the next place in the publish lane now; pass it to ``request(slot=...)``.

        For a publish made from a task, or awaited later: it goes after every publish
        whose place was taken before, and before every one taken after, whenever its
        task runs. A place taken must be used by ``request`` or given back with
        ``release``: the publishes behind it wait for it.
        """
        return self.lane.reserve()

    def release(self, slot: int) -> None:
        """Give back a place ``reserve`` took that no publish will use (idempotent)."""
        if self.lane.release(slot) and self._lane_waiting:
            self._wake_lane()

    async def request(
        self, frame: BaseModel, *, wait_ready: bool = True, slot: int | None = None
    ) -> RelayFrame:
        """Send a request frame and return its reply; raise ``RunwireError`` on an error reply.

        Publishes are sent in the order their place in the lane was taken: when
        ``request`` is called, or earlier with ``reserve()`` (``slot``). A publish the
        relay refuses ``RATE_LIMITED`` or ``STORE_UNAVAILABLE`` goes again, in order,
        until it is taken or ``rate_limit_wait`` (or ``store_wait``) seconds passed since
        its first such refusal: then that error is raised. See ``transport.lane``.
        """
        if not isinstance(frame, Publish):
            if slot is not None:
                self.release(slot)
            return await self._exchange(frame, wait_ready)
        lane = self.lane
        place = lane.reserve() if slot is None else slot
        try:
            while True:
                await self._turn(place)
                try:
                    reply = await self._exchange(frame, wait_ready, place)
                except RunwireError as exc:
                    retry_at = lane.refused(place, frame.entry.id, exc, time.monotonic())
                    if retry_at is None:
                        raise
                    log.debug("publish refused %s; again at %.3f", exc, retry_at)
                    continue  # it keeps its place: nothing after it goes before it
                lane.accepted(place)
                return reply
        finally:
            if lane.finish(place):
                self._wake_lane()

    async def _turn(self, place: int) -> None:
        """Wait until the lane lets the publish of ``place`` go; raise when it gives up."""
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._closed:
                raise RunwireError(CONNECTION_CLOSED, "connection closed")
            turn = self.lane.turn(place, time.monotonic())
            if turn.go:
                return
            timeout = None if turn.wake_at is None else turn.wake_at - time.monotonic()
            changed = self._lane_changed
            self._lane_waiting += 1
            try:
                with anyio.move_on_after(timeout):
                    await changed.wait()
            finally:
                self._lane_waiting -= 1

    def _wake_lane(self) -> None:
        """Wake the publishes waiting for their turn: the lane changed."""
        self._lane_changed.set()
        self._lane_changed = asyncio.Event()

    async def _exchange(self, frame: BaseModel, wait_ready: bool, place: int = 0) -> RelayFrame:
        """One request: send ``frame`` (again after every reconnect) and return its reply.

        ``place`` is the publish's place in the lane. The lane hears it was sent once the
        frame is in line: sent at once, or sent on the next connect in ``req`` order. Either
        way it goes before anything made after it, so the next publish may go.
        """
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise RunwireError(CONNECTION_CLOSED, "connection closed")
        self._next_req += 1
        req = self._next_req
        data = frame.model_dump(mode="json", exclude_none=True)
        data["req"] = req
        text = codec.dumps(data)
        limit = self.welcome.max_frame_bytes if self.welcome else DEFAULT_MAX_FRAME_BYTES
        if len(text) > limit:
            # The relay would refuse it, or close the socket (1009) unread over its hard
            # limit: a request re-sent after every reconnect would close every one of them.
            raise RunwireError(
                PAYLOAD_TOO_LARGE,
                f"frame of {len(text)} bytes exceeds the relay's limit of {limit}",
                details={"size": len(text), "limit": limit},
            )
        pending = _Pending(data, text)
        self._pending[req] = pending
        if place and self.lane.sent(place) and self._lane_waiting:
            self._wake_lane()
        try:
            if wait_ready:
                await self._wait_ready(pending)
            await self._send_pending(pending)
            await pending.done.wait()
        finally:
            self._pending.pop(req, None)
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    async def kill_socket(self) -> None:
        """Drop the current socket abruptly (tests use it to simulate a network drop)."""
        if self._ws is not None:
            self._ws.transport.abort()

    # ----------------------------------------------------------- internal --

    async def _wait_ready(self, pending: _Pending) -> None:
        # Until the link is up, or the request failed meanwhile (aclose, a fatal error):
        # waiting on the ready event alone would hang forever after those.
        if self._ready.is_set() or pending.done.is_set():
            return
        async with anyio.create_task_group() as tg:

            async def ready() -> None:
                await self._ready.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(ready)
            await pending.done.wait()
            tg.cancel_scope.cancel()

    async def _send_pending(self, pending: _Pending) -> None:
        ws = self._ws
        if ws is None or pending.done.is_set():
            return  # re-sent after the next connect
        try:
            pending.sent_on = self.connects
            await ws.send(pending.text, text=True)  # UTF-8 bytes as a text frame
        except ConnectionClosed:
            pass  # re-sent after the next connect

    def _emit(self, state: str) -> None:
        for fn in list(self._state_callbacks):
            try:
                fn(state)
            except Exception:  # a listener's bug must not break the connection
                log.exception("state callback failed")

    def _give_up(self, error: RunwireError) -> None:
        """A final refusal: no more reconnects; requests, now and later, fail with ``error``."""
        self._fatal = error
        self._fail_all(error)
        if self._ready.is_set():
            self._ready = anyio.Event()
        self._ws = None
        if not self._first.is_set():
            self._first_error = error
            self._first.set()
        self._emit_closed()

    def _emit_closed(self) -> None:
        if not self._closed_emitted:
            self._closed_emitted = True
            self._emit("closed")

    def _fail_all(self, error: RunwireError) -> None:
        for pending in list(self._pending.values()):
            if not pending.done.is_set():
                pending.error = error
                pending.done.set()
        self._wake_lane()  # publishes waiting for their turn see the end too

    async def _fresh_token(self) -> None:
        assert self.token_provider is not None
        try:
            token = self.token_provider()
            if inspect.isawaitable(token):
                token = await token
        except Exception as exc:
            raise RunwireError(UNAUTHORIZED, f"the token provider failed: {exc!r}") from None
        if not isinstance(token, str) or not token:
            raise RunwireError(UNAUTHORIZED, "the token provider returned no token")
        self.token = token

    async def _run(self) -> None:
        attempt = 0
        tries = 0
        expired = 0  # tokens refused as expired since the last connect that got through
        while not self._closed:
            connects = self.connects
            try:
                if self.token_provider is not None and (tries or self.token is None):
                    await self._fresh_token()
                tries += 1
                await self._connect_once()
                attempt = 0
            except RunwireError as exc:
                if self.connects != connects:
                    expired = attempt = 0
                if exc.code == TOKEN_EXPIRED:
                    expired += 1
                final = exc.code == UNAUTHORIZED or (
                    exc.code == TOKEN_EXPIRED and (self.token_provider is None or expired > 3)
                )
                retry_expired = exc.code == TOKEN_EXPIRED and not final
                if final or (not self._first.is_set() and not retry_expired):
                    self._give_up(exc)
                    return
            except (OSError, WebSocketException, TimeoutError) as exc:
                if not self._first.is_set():
                    self._first_error = RunwireError(
                        CONNECTION_CLOSED, f"cannot connect to {self.url}: {exc}"
                    )
                    self._first.set()
                    return
                log.debug("connection lost: %r", exc)
            if self._ready.is_set():
                self._ready = anyio.Event()
            self._ws = None
            if self._closed or not self.reconnect:
                self._fail_all(RunwireError(CONNECTION_CLOSED, "connection lost"))
                return
            self._emit("disconnected")
            # A relay that restarts (1012) wants its clients elsewhere at once: no backoff
            # before the first try; should that fail, the backoff goes on as usual.
            restarting, self._restarting = self._restarting, False
            if not (restarting and attempt == 0):
                await anyio.sleep(backoff(self.backoff_initial, self.backoff_max, attempt))
            attempt += 1

    async def _connect_once(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        tls: dict[str, Any] = {} if self.ssl is None else {"ssl": self.ssl}
        try:
            ws = await connect(
                self.url,
                additional_headers=headers,
                open_timeout=self.open_timeout,
                max_size=64 * 1024 * 1024,
                compression=None,
                ping_interval=self.keepalive.ping_interval,
                ping_timeout=self.keepalive.ping_timeout,
                close_timeout=self.keepalive.close_timeout,
                **tls,
            )
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise RunwireError(UNAUTHORIZED, "the relay refused the credentials") from None
            raise
        self._ws = ws
        try:
            hello = Hello(client_id=self.client_id, role=self.role)
            await ws.send(codec.encode(hello).decode())
            with anyio.fail_after(self.open_timeout):
                first = codec.decode_relay_frame(await ws.recv())
            if isinstance(first, Error):
                raise RunwireError.from_wire(first.error.model_dump())
            if not isinstance(first, Welcome):
                raise RunwireError("PROTOCOL_ERROR", f"expected welcome, got {first.type}")
            self.welcome = first
            self.client_id = first.client_id
            self.connects += 1
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._after_connect, ws)
                await self._read(ws)
                tg.cancel_scope.cancel()
        finally:
            self._ws = None
            await ws.close()
        refused, self._refused = self._refused, None
        if refused is not None:
            raise refused
        code = ws.close_code
        self._restarting = code == CloseCode.SERVICE_RESTART
        if code == CloseCode.UNAUTHORIZED or code == CloseCode.TOKEN_EXPIRED:
            raise close_error(CLOSE_CODES.get(code, UNAUTHORIZED), ws.close_reason or "")

    async def _after_connect(self, ws: ClientConnection) -> None:
        connects = self.connects
        try:
            if self.on_connect is not None:
                await self.on_connect(self)
        except RunwireError as exc:
            log.warning("re-attaching after connect failed: %s", exc)
            if exc.code == UNAUTHORIZED:
                # The token (a fresh one from the provider) no longer grants what the
                # connection had: as final as a refused hello, not a reason to reconnect.
                self._refused = exc
            if not self._first.is_set():
                self._first_error = exc
                self._first.set()
            await ws.close()
            return
        self._ready.set()
        if not self._first.is_set():
            self._first.set()
        self._emit("connected")
        for pending in list(self._pending.values()):
            if pending.sent_on != connects:
                await self._send_pending(pending)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                try:
                    frame = codec.decode_relay_frame(raw)
                except RunwireError:
                    log.warning("dropping a frame this client cannot read")
                    continue
                # Fields live in the model's __dict__; getattr's miss path is slow in pydantic.
                req = frame.__dict__.get("req")
                if req is not None and frame.type != "welcome":
                    pending = self._pending.get(req) if isinstance(req, int) else None
                    if pending is not None and not pending.done.is_set():
                        if isinstance(frame, Error):
                            pending.error = RunwireError.from_wire(frame.error.model_dump())
                        else:
                            pending.reply = frame
                        pending.done.set()
                    continue
                if self.on_frame is not None:
                    self.on_frame(frame)
        except ConnectionClosed:
            pass


def close_error(code: str, reason: str) -> RunwireError:
    """The error a close stands for; the relay's reason reads ``"CODE: text"``, and the code
    is not repeated in the message."""
    prefix = f"{code}: "
    return RunwireError(code, reason.removeprefix(prefix) or None)


def backoff(first: float, most: float, attempt: int) -> float:
    """Seconds to wait before try ``attempt`` (0 first) goes again: ``first`` doubling
    up to ``most``, with jitter (between half of that and all of it)."""
    return lane_backoff(first, most, attempt, random.random())
