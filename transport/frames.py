"""The runwire wire protocol, version 1: its frames and channel entries, as pydantic models.

A connection carries JSON text frames, each an object with a ``type``. A peer opens with
``hello`` and the relay answers ``welcome``. A peer then attaches to sessions, publishes entries,
pages history, and an agent may register as a ``worker`` of an agent name.

A request carries a ``req`` id, and the relay's reply echoes it: ``attached``, ``ack``, ``page``
or ``error``. Frames the relay sends unasked carry none: ``deliver``, ``dispatch``, and an
``error`` that answers no request.

A channel holds entries. A publisher sends an ``EntryBody``; the relay stamps it with a
``serial``, a ``ts`` and the connection's ids, stores it, acknowledges it and delivers it. The
entry kinds are ``message``, ``run``, ``cancel``, ``cancel_denied``, ``response_open``,
``response_append``, ``response_close``, ``refused``, ``interrupt`` and ``checkpoint``.

Integer fields take JSON integers only, never a bool, a string or a float. A frame a peer sends,
and every entry, refuses unknown fields with ``VALIDATION_ERROR``. A frame the relay sends ignores
them, so a client keeps working when a later relay adds some.

See docs/explanation/wire-protocol.md for the tour, and docs/reference/protocol/ for every field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .messages import UIMessage

__all__ = [
    "PROTOCOL_VERSION",
    "Ack",
    "Attach",
    "Attached",
    "CancelDenied",
    "CancelEntry",
    "CheckpointEntry",
    "ClientFrame",
    "Deliver",
    "Detach",
    "Dispatch",
    "EntryBody",
    "Error",
    "ErrorBody",
    "Hello",
    "History",
    "Intent",
    "Interrupt",
    "InterruptEntry",
    "InterruptKind",
    "MessageEntry",
    "Multitask",
    "Page",
    "Publish",
    "RefusedEntry",
    "RelayErrorBody",
    "RelayFrame",
    "ResponseAppend",
    "ResponseClose",
    "ResponseOpen",
    "RunEndReason",
    "RunEntry",
    "RunStatus",
    "ThreadAccess",
    "Welcome",
    "Worker",
    "client_frame_adapter",
    "entry_adapter",
    "relay_frame_adapter",
]

PROTOCOL_VERSION = 1

RunEndReason = Literal["complete", "cancelled", "error"]
RunStatus = Literal["queued", "pending", "active", "suspended", "complete", "cancelled", "error"]
Intent = Literal["prompt", "steer", "follow_up", "inject"]
Multitask = Literal["alongside", "reject", "enqueue", "interrupt", "rollback"]
ThreadAccess = Literal["own", "shared"]

Id = Annotated[str, Field(min_length=1, max_length=200)]
SessionId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:\-]+$")]
Int = Annotated[int, Field(strict=True)]
Bool = Annotated[bool, Field(strict=True)]
Seconds = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
"""A duration in seconds: a JSON number, not negative (never a boolean or a string)."""
MAX_RUN_TIMEOUT = 31_536_000.0
"""The longest Run deadline, in seconds (a year)."""
"""A JSON ``true`` or ``false``: not ``1``, not ``"yes"`` (pydantic's lax ``bool`` takes both)."""
"""A JSON integer: not ``true``/``false``, not ``"5"``, not ``5.0`` (pydantic's lax ``int``
takes all three)."""
ReqId = Int | Annotated[str, Field(max_length=100)]
Serial = Annotated[int, Field(ge=0, strict=True)]


class _Model(BaseModel):
    """Entries (and what they hold) and the frames a peer sends: a field the model does not
    know is refused (``extra_forbidden``), as the relay refuses it."""

    model_config = ConfigDict(extra="forbid")


class _RelayModel(BaseModel):
    """The frames the relay sends: a field the model does not know is ignored, and dropped
    (a later relay may add fields; a client keeps reading its frames). The fields it knows
    are checked as strictly as ever. Nothing is kept to be encoded again: a frame built
    with an unknown field encodes without it."""

    model_config = ConfigDict(extra="ignore")


class ErrorBody(_Model):
    """The ``error`` object of a failed Run (``run`` entries) and a ``refused`` entry."""

    code: str
    message: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class RelayErrorBody(ErrorBody):
    """The ``error`` object of an ``error`` frame: an ``ErrorBody`` whose unknown fields are
    ignored, as a relay frame's."""

    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- entries ---


class _Entry(_Model):
    # Stamped by the relay; a publisher's values are ignored.
    serial: Serial | None = None
    ts: Int | None = None
    user_id: str | None = None
    client_id: str | None = None

    id: Id
    run_id: Id


class MessageEntry(_Entry):
    """A user message: a prompt that starts a Run, or a message aimed at one."""

    kind: Literal["message"] = "message"
    intent: Intent = "prompt"
    message: UIMessage
    parent_id: Id | None = None
    agent: Id | None = None
    """For a prompt: the agent name its Run goes to (default ``default``)."""
    multitask: Multitask | None = None
    """For a prompt: what its Run does to running Runs (None: the relay's default).

    The relay stamps the strategy in effect on the stored prompt."""
    parent_run_id: Id | None = None
    """For a prompt: the Run whose tool call started this one (never held back by it)."""
    thread_access: ThreadAccess | None = None
    """For a session's first prompt: ``shared`` lets other users' strategies touch its Runs."""
    queued: Bool | None = None
    """Stamped by the relay: true when the Run waits (``queued``); a sender's value is dropped."""
    interrupts: list[Id] | None = None
    """Stamped by the relay: the Runs an ``interrupt``/``rollback`` prompt cancels."""
    activate: Bool | None = None
    """For a prompt on a branch: ``false`` leaves the session's active leaf where it is, so
    its Run does not count as the session's Run for multitask (it runs alongside)."""


class RunEntry(_Entry):
    """A Run's lifecycle event."""

    kind: Literal["run"] = "run"
    status: Literal["pending", "active", "suspended", "complete", "cancelled", "error"]
    """``pending`` only from the relay: a queued Run's turn came, or a durable Run's
    agent went away and another worker is to adopt it."""
    error: ErrorBody | None = None
    durable: Bool | None = None
    """On ``active``: the agent keeps checkpoints, so the relay may hand the Run on."""
    seen: list[Id] | None = None
    """On a terminal status: queued messages taken in without a response (saved injects)."""
    timeout: (
        Annotated[float, Field(strict=True, gt=0, le=MAX_RUN_TIMEOUT, allow_inf_nan=False)] | None
    ) = None
    """On ``active``: seconds the Run may stay active from this start (its deadline). The
    relay stamps the one it enforces (its ``max_run_seconds`` may lower it) and ends the Run
    ``cancelled`` with ``RUN_TIMEOUT`` when it passes."""


class CancelEntry(_Entry):
    """A request to stop a Run."""

    kind: Literal["cancel"] = "cancel"
    reason: str | None = Field(default=None, max_length=1000)
    interrupted_by: Id | None = None
    """Stamped by the relay on the cancels an ``interrupt``/``rollback`` prompt caused."""


class CancelDenied(_Entry):
    """The Run's agent refused a cancel; nothing else changes."""

    kind: Literal["cancel_denied"] = "cancel_denied"
    cancel_id: Id | None = None
    """The id of the refused ``cancel`` entry."""
    reason: str | None = Field(default=None, max_length=1000)


class ResponseOpen(_Entry):
    """The agent starts a response message."""

    kind: Literal["response_open"] = "response_open"
    message_id: Id
    parent_id: Id | None = None
    seen: list[Id] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ResponseAppend(_Entry):
    """Stream parts appended to an open response (several coalesced deltas ride one)."""

    kind: Literal["response_append"] = "response_append"
    message_id: Id
    chunks: list[dict[str, Any]] = Field(min_length=1)


class ResponseClose(_Entry):
    """The response is finished.

    ``message``, when present, is the whole message as it stands: it replaces
    what the appends built. Without it (a message too big for one frame) the
    content the appends built is kept as it is. ``metadata``, when present,
    replaces the message's metadata (with either form).
    """

    kind: Literal["response_close"] = "response_close"
    message_id: Id
    message: UIMessage | None = None
    metadata: dict[str, Any] | None = None


class RefusedEntry(_Entry):
    """An input check refused a queued message (its id and the error, never its content)."""

    kind: Literal["refused"] = "refused"
    message_id: Id
    intent: Intent = "steer"
    error: ErrorBody


InterruptKind = Literal["input", "approval", "plan"]


class Interrupt(_Model):
    """One question a Run asks (``response`` only on a ``resumed`` entry)."""

    id: Id
    kind: InterruptKind = "input"
    reason: str = Field(default="", max_length=200)
    message: str = Field(default="", max_length=10_000)
    response_schema: dict[str, Any] | None = None
    """The JSON Schema an answer must fit (None: anything)."""
    expires_at: Int | None = None
    """Milliseconds since the epoch after which no answer is taken."""
    tool_call_id: str | None = None
    tool_name: str | None = None
    details: dict[str, Any] | None = None
    response: Any = None


class InterruptEntry(_Entry):
    """A Run pauses on questions, or a client answers (or declines) them."""

    kind: Literal["interrupt"] = "interrupt"
    status: Literal["paused", "resumed", "declined"]
    interrupts: list[Interrupt] = Field(default_factory=list)
    """``paused``: the questions waited on; ``resumed``: stamped by the relay."""
    responses: dict[str, Any] | None = None
    """``resumed``: the answers by interrupt id."""
    checkpoint: dict[str, Any] | None = None
    """``paused``: the version-1 checkpoint of the step that paused."""
    reason: str | None = Field(default=None, max_length=1000)
    """``declined``: why the pause ended without answers."""


class CheckpointEntry(_Entry):
    """A durable Run finished step ``step``: what another worker needs to go on."""

    kind: Literal["checkpoint"] = "checkpoint"
    step: int = Field(ge=0, strict=True)
    turn: int = Field(default=1, ge=1, strict=True)
    iterations: int = Field(default=0, ge=0, strict=True)
    seen: list[Id] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)


EntryBody = Annotated[
    MessageEntry
    | RunEntry
    | CancelEntry
    | CancelDenied
    | ResponseOpen
    | ResponseAppend
    | ResponseClose
    | RefusedEntry
    | CheckpointEntry
    | InterruptEntry,
    Field(discriminator="kind"),
]
entry_adapter: TypeAdapter[EntryBody] = TypeAdapter(EntryBody)

# ------------------------------------------------------- peer -> relay -----


class Hello(_Model):
    """The first frame a peer sends."""

    type: Literal["hello"] = "hello"
    v: Int = PROTOCOL_VERSION
    client_id: Id | None = None
    role: Literal["client", "agent"] = "client"
    req: ReqId | None = None


class Attach(_Model):
    """Subscribe to a session; resume after ``from_serial`` or get the newest page."""

    type: Literal["attach"] = "attach"
    req: ReqId
    session_id: SessionId
    from_serial: Serial | None = None
    epoch: str | None = Field(default=None, max_length=100)
    limit: int = Field(default=100, ge=1, le=1000, strict=True)


class Detach(_Model):
    """Stop receiving a session's entries."""

    type: Literal["detach"] = "detach"
    req: ReqId
    session_id: SessionId


class Publish(_Model):
    """Add an entry to a session's channel (the connection must be attached)."""

    type: Literal["publish"] = "publish"
    req: ReqId
    session_id: SessionId
    entry: EntryBody


class History(_Model):
    """Ask for entries older than ``before`` (newest of them first in the page's order)."""

    type: Literal["history"] = "history"
    req: ReqId
    session_id: SessionId
    before: Serial
    limit: int = Field(default=50, ge=1, le=1000, strict=True)


class Worker(_Model):
    """Register this connection as a worker of an agent name."""

    type: Literal["worker"] = "worker"
    req: ReqId
    agent: Id = "default"


ClientFrame = Annotated[
    Hello | Attach | Detach | Publish | History | Worker, Field(discriminator="type")
]
client_frame_adapter: TypeAdapter[ClientFrame] = TypeAdapter(ClientFrame)

# ------------------------------------------------------- relay -> peer -----


class Welcome(_RelayModel):
    """The relay's answer to ``hello``."""

    type: Literal["welcome"] = "welcome"
    v: Int = PROTOCOL_VERSION
    req: ReqId | None = None
    client_id: str
    user_id: str | None = None
    connection_id: str
    max_frame_bytes: Int
    multitask: Multitask | None = None
    """The relay's default strategy for prompts that name none."""
    agent_grace: Seconds | None = None
    """Seconds an agent may be gone before the relay ends its active Runs ``AGENT_LOST``."""


class Attached(_RelayModel):
    """Attach succeeded. ``entries`` is the backlog after ``from_serial``, or the newest page."""

    type: Literal["attached"] = "attached"
    req: ReqId
    session_id: str
    epoch: str
    head: Serial
    entries: list[dict[str, Any]]
    has_older: Bool
    reset: Bool = False


class Ack(_RelayModel):
    """A request took effect; for a publish, ``serial`` is the entry's serial."""

    type: Literal["ack"] = "ack"
    req: ReqId
    serial: Serial | None = None
    duplicate: Bool = False


class Page(_RelayModel):
    """A page of older entries, in serial order."""

    type: Literal["page"] = "page"
    req: ReqId
    session_id: str
    entries: list[dict[str, Any]]
    has_older: Bool


class Deliver(_RelayModel):
    """Live entries of an attached session, in serial order."""

    type: Literal["deliver"] = "deliver"
    session_id: str
    entries: list[dict[str, Any]]


class Dispatch(_RelayModel):
    """A new Run for this worker to take."""

    type: Literal["dispatch"] = "dispatch"
    session_id: str
    run_id: str
    agent: str
    message_id: str
    adopted: Bool | None = None
    """True when the Run was started by a worker that went away: this one adopts it."""
    checkpoint: dict[str, Any] | None = None
    """The Run's last checkpoint (a ``checkpoint`` entry's fields), if it kept any."""


class Error(_RelayModel):
    """A request failed (``req`` set) or the relay reports a problem (``req`` absent)."""

    type: Literal["error"] = "error"
    req: ReqId | None = None
    session_id: str | None = None
    error: RelayErrorBody


RelayFrame = Annotated[
    Welcome | Attached | Ack | Page | Deliver | Dispatch | Error, Field(discriminator="type")
]
relay_frame_adapter: TypeAdapter[RelayFrame] = TypeAdapter(RelayFrame)
