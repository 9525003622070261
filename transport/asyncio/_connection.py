"""``Connection``: one logical, self-healing connection from an SDK to the relay.

A ``Connection`` owns at most one WebSocket at a time. ``request(frame)`` gives the frame
a fresh ``req`` id, sends it once the connection is ready, and returns the reply frame:
``attached``, ``ack`` or ``page``. An ``error`` reply raises ``RunwireError``. Frames the
relay pushes unasked go to ``on_frame``.

When the socket drops, the connection connects again. Its ``policy``, a
``transport._reconnect.ReconnectPolicy``, says after how long, and when to give up. A relay
that answers no ping for ``keepalive_timeout`` seconds counts as dropped. After each
``hello`` and ``welcome`` it awaits ``on_connect``, where the SDK re-attaches its
sessions. Then it sends again every request still waiting for a reply, in ``req`` order
(``transport.asyncio._pending``). Each request of the protocol is idempotent, so a retry
never duplicates anything.

Publishes go through the connection's publish lane, ``self.lane``, a
``transport._lane.PublishLane``, driven by a ``Publisher`` (``transport.asyncio._publishing``).
The lane decides their order, when a refused one goes again, and which publishes go again
at once after a reconnect.

``token`` is sent as ``Authorization: Bearer``. ``token_provider`` is asked for a fresh
token before every connect but a first one that already has ``token``. ``UNAUTHORIZED``
is final, and so is ``TOKEN_EXPIRED`` without a provider: requests then fail with that
error and the state callbacks hear ``"closed"``. ``aclose()`` ends everything; pending
requests then fail with ``RunwireError("CONNECTION_CLOSED")``.

Why the lane keeps publishes in order, and how it treats refusals, is told in
docs/explanation/publish-lane.md.
"""

from __future__ import annotations

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

from .. import _codec as codec
from .._keepalive import DEFAULT_KEEPALIVE_TIMEOUT, Keepalive, keepalive
from .._lane import RATE_LIMIT_WAIT, STORE_WAIT, PublishLane
from .._reconnect import ReconnectPolicy
from ..errors import CLOSE_CODES, UNAUTHORIZED, CloseCode, RunwireError
from ..frames import Error, Hello, Publish, RelayFrame, Welcome
from ..redact import install as redact_tokens
from ._pending import DEFAULT_MAX_FRAME_BYTES, PendingRequest, Requests, SendAgain
from ._publishing import Publisher

__all__ = ["CONNECTION_CLOSED", "RATE_LIMIT_WAIT", "STORE_WAIT", "Connection", "TokenProvider"]

log = logging.getLogger("runwire.connection")
redact_tokens()  # the token this connection sends never reaches websockets' DEBUG log

CONNECTION_CLOSED = "CONNECTION_CLOSED"

FrameHandler = Callable[[RelayFrame], None]
TokenProvider = Callable[[], "str | Awaitable[str]"]
ConnectHook = Callable[["Connection"], Awaitable[None]]


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
        self.policy = ReconnectPolicy(
            jitter=random.random,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            token_provider=token_provider is not None,
        )
        """When the connection tries again after a drop, and when it gives up."""
        self.open_timeout = open_timeout
        self.welcome: Welcome | None = None
        self.connects = 0
        self._restarting = False  # the last connection was closed 1012 (service restart)
        self._ws: ClientConnection | None = None
        self._ready = anyio.Event()
        self._closed = False
        self._fatal: RunwireError | None = None
        self._requests = Requests()
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
        """The order of this connection's publishes and their refusals (``transport._lane``)."""
        self._publisher = Publisher(self.lane, self._exchange, self._check_open)

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
    def backoff_initial(self) -> float:
        """Seconds at most before the first try again after a drop (the policy's)."""
        return self.policy.backoff_initial

    @backoff_initial.setter
    def backoff_initial(self, value: float) -> None:
        self.policy.backoff_initial = value

    @property
    def backoff_max(self) -> float:
        """The longest wait between two tries to connect (the policy's)."""
        return self.policy.backoff_max

    @backoff_max.setter
    def backoff_max(self, value: float) -> None:
        self.policy.backoff_max = value

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
        self._publisher.release(slot)

    async def request(
        self, frame: BaseModel, *, wait_ready: bool = True, slot: int | None = None
    ) -> RelayFrame:
        """Send a request frame and return its reply; raise ``RunwireError`` on an error reply.

        Publishes are sent in the order their place in the lane was taken: when
        ``request`` is called, or earlier with ``reserve()`` (``slot``). A publish the
        relay refuses ``RATE_LIMITED`` or ``STORE_UNAVAILABLE`` goes again, in order,
        until it is taken or ``rate_limit_wait`` (or ``store_wait``) seconds passed since
        its first such refusal: then that error is raised. See ``transport._lane``.
        """
        if not isinstance(frame, Publish):
            if slot is not None:
                self.release(slot)
            return await self._exchange(frame, wait_ready)
        place = self.lane.reserve() if slot is None else slot
        return await self._publisher.publish(frame, wait_ready, place)

    def _check_open(self) -> None:
        """Raise the error that ended the connection, if it ended."""
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise RunwireError(CONNECTION_CLOSED, "connection closed")

    async def _exchange(self, frame: BaseModel, wait_ready: bool, place: int = 0) -> RelayFrame:
        """One request: send ``frame`` (again after every reconnect) and return its reply.

        ``place`` is the publish's place in the lane. The lane hears it was sent once the
        frame is in line: sent at once, or sent on the next connect in ``req`` order. Either
        way it goes before anything made after it, so the next publish may go.
        """
        self._check_open()
        limit = self.welcome.max_frame_bytes if self.welcome else DEFAULT_MAX_FRAME_BYTES
        pending = self._requests.open(frame, limit, place)
        if place:
            self._publisher.sent(place)
        try:
            if wait_ready and not self._ready.is_set():
                await pending.wait_ready(self._ready)  # the next connect sends it, in order
            else:
                await self._send(pending)
            await pending.done.wait()
        finally:
            self._requests.close(pending)
        if pending.again:
            raise SendAgain
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    async def kill_socket(self) -> None:
        """Drop the current socket abruptly (tests use it to simulate a network drop)."""
        if self._ws is not None:
            self._ws.transport.abort()

    # ----------------------------------------------------------- internal --

    async def _send(self, pending: PendingRequest) -> None:
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
        self._requests.fail_all(error)
        self._publisher.wake()  # publishes waiting for their turn see the end too

    async def _run(self) -> None:
        policy = self.policy
        while not self._closed:
            connects = self.connects
            policy.token_provider = self.token_provider is not None  # it may be set late
            try:
                if policy.start(self.token is not None):
                    assert self.token_provider is not None
                    self.token = await fresh_token(self.token_provider)
                await self._connect_once()
                policy.ended()
            except RunwireError as exc:
                welcomed = self.connects != connects
                if policy.failed(exc.code, welcomed=welcomed, started=self._first.is_set()):
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
            restarting, self._restarting = self._restarting, False
            now = time.monotonic()
            await anyio.sleep(policy.next_try_at(now, restarting=restarting) - now)

    async def _connect_once(self) -> None:
        ws = self._ws = await open_socket(
            self.url, self.token, self.ssl, self.keepalive, self.open_timeout
        )
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
        for pending in self._requests.waiting():
            if pending.sent_on == connects or pending.done.is_set():
                continue
            if pending.place and not self.lane.resend(pending.place):
                pending.send_again_later()  # behind an earlier publish that goes again
                continue
            await self._send(pending)

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
                    self._requests.reply(req, frame)
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


async def fresh_token(provider: TokenProvider) -> str:
    """A token from ``provider``; ``UNAUTHORIZED`` when it fails or gives none."""
    try:
        token = provider()
        if inspect.isawaitable(token):
            token = await token
    except Exception as exc:
        raise RunwireError(UNAUTHORIZED, f"the token provider failed: {exc!r}") from None
    if not isinstance(token, str) or not token:
        raise RunwireError(UNAUTHORIZED, "the token provider returned no token")
    return token


async def open_socket(
    url: str, token: str | None, ssl: SSLContext | None, pings: Keepalive, open_timeout: float
) -> ClientConnection:
    """Open a WebSocket to the relay; ``UNAUTHORIZED`` when it refuses the credentials."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    tls: dict[str, Any] = {} if ssl is None else {"ssl": ssl}
    try:
        return await connect(
            url,
            additional_headers=headers,
            open_timeout=open_timeout,
            max_size=64 * 1024 * 1024,
            compression=None,
            ping_interval=pings.ping_interval,
            ping_timeout=pings.ping_timeout,
            close_timeout=pings.close_timeout,
            **tls,
        )
    except InvalidStatus as exc:
        if exc.response.status_code in (401, 403):
            raise RunwireError(UNAUTHORIZED, "the relay refused the credentials") from None
        raise
