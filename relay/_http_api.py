"""The HTTP API: back ends without a socket, on the relay's own port.

Routes (``{id}`` a session id, ``{run_id}`` a Run's; path segments may be
percent-encoded):

* ``POST /v1/sessions/{id}/messages``: body ``PostMessage`` -> ``201 {"serial",
  "run_id", "message_id", "duplicate"}``. A ``message`` entry published as the
  token's user, exactly as a WebSocket ``publish``: the same Run rules, the
  same de-duplication by the message id (a retry answers the first serial and
  Run with ``duplicate: true``).
* ``POST /v1/sessions/{id}/runs/{run_id}/cancel``: body ``PostCancel`` (or none)
  -> ``202 {"serial", "run_id", "duplicate"}``.
* ``POST /v1/sessions/{id}/runs/{run_id}/resume``: body ``PostResume`` -> ``202``:
  answers a paused Run's questions, or declines them.
* ``GET /v1/sessions/{id}/history?before=&limit=``: a page of older entries.
* ``GET /v1/sessions/{id}/events``: Server-Sent Events (``relay._event_stream``).
* ``GET /v1/openapi.json``: the OpenAPI document (``relay.openapi``), to anyone.

A request presents a token as a WebSocket connection does and has the rights
it grants in that session. Every failure is ``{"error": {"code", "message",
"details"}}`` with the protocol's code and an HTTP status (``http_models.STATUS``).
Requests arrive read whole, body included, from the HTTP front
(``relay._http_front``). The reference is ``docs/reference/protocol/http.md``.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError
from websockets.http11 import Response

from transport import _codec as codec
from transport._runs import SUBSCRIBE, Sender
from transport.errors import (
    EPOCH_MISMATCH,
    INTERNAL_ERROR,
    NOT_FOUND,
    PROTOCOL_ERROR,
    UNAUTHORIZED,
    VALIDATION_ERROR,
    RunwireError,
)
from transport.frames import CancelEntry, EntryBody, InterruptEntry, MessageEntry
from transport.messages import new_id, user_message

from ._event_stream import MAX_WAIT, EventStream
from ._http_front import Exchange, too_large
from ._http_message import HttpRequest, json_response, response
from ._http_models import (
    STATUS,
    Body,
    PostCancel,
    PostMessage,
    PostResume,
    int_param,
    opt_int_param,
    session_id,
)
from ._hub import Hub
from ._sse import RETRY_MS
from .auth import Identity, TokenVerifier, token_from_request
from .openapi import render as openapi_document

__all__ = ["MAX_WAIT", "RETRY_MS", "STATUS", "HttpApi", "PostCancel", "PostMessage", "PostResume"]

log = logging.getLogger("runwire.relay")

DEFAULT_CLIENT_ID = "http"

B = TypeVar("B", bound=Body)

_ROUTES: dict[str, str] = {
    "messages": "POST",
    "history": "GET",
    "events": "GET",
    "cancel": "POST",
    "resume": "POST",
}


class HttpApi:
    """Answers ``/v1/...`` requests of one relay (see the module docstring)."""

    def __init__(self, hub: Hub, verifier: TokenVerifier | None) -> None:
        self.hub = hub
        self.store = hub.store
        self.options = hub.options
        self.verifier = verifier
        self.events = EventStream(hub)

    def close(self) -> None:
        """The relay is stopping: waiting requests answer now, and open event streams end."""
        self.events.close()

    async def handle(self, exchange: Exchange) -> None:
        """Answer one request (never raises)."""
        try:
            reply = await self._route(exchange)
        except RunwireError as exc:
            reply = self._error(exc)
        except Exception:
            log.exception("HTTP %s failed", exchange.request.path.split("?", 1)[0])
            reply = self._error(RunwireError(INTERNAL_ERROR, "the relay failed on this request"))
        if reply is not None:
            exchange.respond(reply)

    async def _route(self, exchange: Exchange) -> Response | None:
        request = exchange.request
        method = request.method
        split = urlsplit(request.path)
        if split.path == "/v1/openapi.json":
            return _openapi(method)
        parts = split.path.split("/")
        name = ""
        run_id: str | None = None
        if len(parts) == 5 and parts[1:3] == ["v1", "sessions"] and parts[4] in _ROUTES:
            name = parts[4]
        elif len(parts) == 7 and parts[1:3] == ["v1", "sessions"] and parts[4] == "runs":
            if parts[6] in ("cancel", "resume"):
                name, run_id = parts[6], unquote(parts[5])
        if not name:
            raise RunwireError(
                NOT_FOUND, f"no route {split.path!r}", details={"path": split.path[:300]}
            )
        if method == "OPTIONS":
            return response(204, b"", None, cors=True)
        if method != _ROUTES[name]:
            refused = self._error(
                RunwireError(
                    PROTOCOL_ERROR,
                    f"{split.path} takes {_ROUTES[name]}, not {method}",
                    details={"allow": _ROUTES[name]},
                ),
                status=405,
            )
            refused.headers["Allow"] = f"{_ROUTES[name]}, OPTIONS"
            return refused
        identity = self._identity(request)
        session = session_id(parts[3])
        if run_id is not None and not 0 < len(run_id) <= 200:
            raise RunwireError(VALIDATION_ERROR, "a run id is 1-200 characters")
        query = parse_qs(split.query)
        if name == "messages":
            return await self._post_message(request, identity, session)
        if name == "cancel":
            assert run_id is not None
            return await self._cancel(request, identity, session, run_id)
        if name == "resume":
            assert run_id is not None
            return await self._resume(request, identity, session, run_id)
        self._need_subscribe(identity, session)
        if name == "history":
            return await self._history(session, query)
        if "text/event-stream" in (request.header("Accept") or "").lower():
            await self.events.follow(exchange, session, query, identity)
        else:
            await self.events.one_batch(exchange, session, query, identity)
        return None

    # ----------------------------------------------------------- publishing --
    # ----------------------------------------------------------- publishing --

    async def _post_message(
        self, request: HttpRequest, identity: Identity | None, session: str
    ) -> Response:
        body = self._body(request, PostMessage)
        if isinstance(body.message, str):
            message = user_message(body.message, id=body.message_id)
        else:
            message = body.message
            if body.message_id is not None and body.message_id != message.id:
                raise RunwireError(
                    VALIDATION_ERROR,
                    "message_id differs from message.id (give one or the other)",
                    details={"message_id": body.message_id, "message.id": message.id},
                )
        run_id = body.run_id
        if run_id is None:
            if body.intent != "prompt":
                raise RunwireError(
                    VALIDATION_ERROR,
                    f"run_id: required for intent {body.intent!r} (the Run it is aimed at)",
                    details={
                        "errors": [{"loc": ["run_id"], "msg": "Field required", "type": "missing"}]
                    },
                )
            run_id = new_id()
        entry = MessageEntry(
            id=message.id,
            run_id=run_id,
            intent=body.intent,
            message=message,
            parent_id=body.parent_id,
            agent=body.agent,
            multitask=body.multitask,
            parent_run_id=body.parent_run_id,
            thread_access=body.thread_access,
        )
        sender = self.hub.sender(identity, body.client_id or DEFAULT_CLIENT_ID, session)
        serial, duplicate = await self._publish(session, entry, sender)
        if duplicate:
            run_id = await self._stored_run_id(session, entry.id) or run_id
        return json_response(
            201,
            {"serial": serial, "run_id": run_id, "message_id": message.id, "duplicate": duplicate},
        )

    async def _cancel(
        self, request: HttpRequest, identity: Identity | None, session: str, run_id: str
    ) -> Response:
        body = self._body(request, PostCancel)
        entry = CancelEntry(id=body.id or new_id(), run_id=run_id, reason=body.reason)
        sender = self.hub.sender(identity, body.client_id or DEFAULT_CLIENT_ID, session)
        serial, duplicate = await self._publish(session, entry, sender)
        if duplicate:
            run_id = await self._stored_run_id(session, entry.id) or run_id
        return json_response(202, {"serial": serial, "run_id": run_id, "duplicate": duplicate})

    async def _resume(
        self, request: HttpRequest, identity: Identity | None, session: str, run_id: str
    ) -> Response:
        body = self._body(request, PostResume)
        entry = InterruptEntry(
            id=body.id or new_id(),
            run_id=run_id,
            status="declined" if body.decline else "resumed",
            responses=None if body.decline else body.responses,
            reason=body.reason,
        )
        sender = self.hub.sender(identity, body.client_id or DEFAULT_CLIENT_ID, session)
        serial, duplicate = await self._publish(session, entry, sender)
        return json_response(202, {"serial": serial, "run_id": run_id, "duplicate": duplicate})

    async def _publish(self, session: str, entry: EntryBody, sender: Sender) -> tuple[int, bool]:
        """Publish as ``hub.publish`` does, on a channel loaded again if the store lost the
        one this node had (``EPOCH_MISMATCH``: nothing was stored, and the channel's
        clients were told to rebuild). A request has no history to rebuild, so its
        entry goes into the session as the store has it now, as if it came first."""
        try:
            async with self.hub.hold(session) as channel:
                return await self.hub.publish(channel, entry, sender)
        except RunwireError as exc:
            if exc.code != EPOCH_MISMATCH:
                raise
        async with self.hub.hold(session) as channel:
            return await self.hub.publish(channel, entry, sender)

    async def _stored_run_id(self, session: str, entry_id: str) -> str | None:
        """The Run of the entry already stored under ``entry_id`` (a retry names the first)."""
        found = await self.store.find(session, entry_id)
        if found is None:
            return None
        try:
            run_id = codec.loads(found.data, max_depth=codec.RELAY_FRAME_DEPTH).get("run_id")
        except (RunwireError, AttributeError):
            return None
        return run_id if isinstance(run_id, str) else None

    # -------------------------------------------------------------- reading --

    async def _history(self, session: str, query: dict[str, list[str]]) -> Response:
        limit = min(int_param(query, "limit", 50, 1, 1000), self.options.history_page_max)
        before = opt_int_param(query, "before")
        for attempt in range(2):
            try:
                async with self.hub.hold(session) as channel:
                    page, has_older = await channel.history(
                        channel.last + 1 if before is None else before, limit
                    )
                    head, epoch = channel.last, channel.epoch
                break
            except RunwireError as exc:
                # The node's channel was of a history the store lost: read the session
                # as the store has it now.
                if exc.code != EPOCH_MISMATCH or attempt:
                    raise
        body = (
            b'{"entries":['
            + b",".join(e.data for e in page)
            + b'],"has_older":'
            + (b"true" if has_older else b"false")
            + b',"head":%d,"epoch":' % head
            + codec.dumps(epoch)
            + b"}"
        )
        return response(200, body, "application/json", cors=True)

    # -------------------------------------------------------------- helpers --

    def _identity(self, request: HttpRequest) -> Identity | None:
        if self.verifier is None:
            return None
        return self.verifier.verify(token_from_request(request.credentials, request.path))

    @staticmethod
    def _need_subscribe(identity: Identity | None, session: str) -> None:
        if identity is not None and SUBSCRIBE not in identity.caps(session):
            raise RunwireError(
                UNAUTHORIZED,
                f"the token does not grant 'subscribe' in {session!r}",
                details={"session_id": session, "needs": SUBSCRIBE},
            )

    def _body(self, request: HttpRequest, model: type[B]) -> B:
        raw = request.body
        if len(raw) > self.options.max_frame_bytes:
            raise too_large(len(raw), self.options.max_frame_bytes)
        data: Any = {}
        if raw.strip():
            try:
                data = codec.loads(raw)
            except RunwireError as exc:
                if exc.code != PROTOCOL_ERROR:  # nested too deep: VALIDATION_ERROR
                    raise
                raise RunwireError(
                    PROTOCOL_ERROR, exc.message.replace("frame", "the body", 1)
                ) from None
        if not isinstance(data, dict):
            raise RunwireError(PROTOCOL_ERROR, "the body must be a JSON object")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise codec.validation_error(exc) from None

    def refuse(self, exc: RunwireError, status: int | None = None) -> Response:
        """The JSON error response for ``exc`` (of a request the relay will not route), with
        ``status`` or the code's."""
        return self._error(exc, status)

    def _error(self, exc: RunwireError, status: int | None = None) -> Response:
        self.hub.metrics.errors.labels(exc.code).inc()
        if status is None:
            status = STATUS.get(exc.code, 400)
            if exc.code == UNAUTHORIZED and "needs" in exc.details:
                status = 403
        reply = json_response(status, {"error": exc.to_wire()})
        if status == 401:
            reply.headers["WWW-Authenticate"] = 'Bearer realm="runwire"'
        return reply


def _openapi(method: str) -> Response:
    """``/v1/openapi.json``: the API's description, to anyone (it holds no session data)."""
    if method == "OPTIONS":
        return response(204, b"", None, cors=True)
    if method not in ("GET", "HEAD"):
        refused = json_response(405, {"error": {"code": PROTOCOL_ERROR, "message": "GET only"}})
        refused.headers["Allow"] = "GET, HEAD, OPTIONS"
        return refused
    return response(200, openapi_document(), "application/json", cors=True)
