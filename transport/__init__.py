"""runwire's wire protocol and the logic every side shares, without sockets.

``transport.frames`` defines the protocol and ``transport._codec`` encodes it.
``transport._runs`` holds the Run rules, and ``transport._tree`` folds a channel's entries into a
conversation. ``transport._outcomes`` resolves steering outcomes, and ``transport.checks`` holds
the input checks. ``transport._history`` reads back what a stopped Run left: interrupted replies
and unanswered tool calls. ``transport.asyncio`` is the one I/O driver that the relay and both
SDKs share; importing ``transport`` does not load it.

Modules whose names start with ``_`` are internal: import their public names from ``transport``.
"""

from typing import TYPE_CHECKING

from . import checks
from ._answers import ParsedAnswer, answer_format, parse_answer
from ._history import (
    ABORTED_BEFORE_DISPATCH,
    OUTCOME_UNKNOWN,
    history_message,
    repair_unanswered_tool_calls,
)
from ._interrupts import PausedRun
from ._outcomes import OutcomeRecord
from ._tree import (
    ConversationTree,
    DeliveryEvent,
    MessageEvent,
    Refusal,
    RunEvent,
    RunInfo,
    ViewMessage,
)
from .errors import (
    CloseCode,
    CredentialsError,
    FinalError,
    RequestError,
    RetryableError,
    RunwireError,
)
from .frames import PROTOCOL_VERSION, Interrupt, RunEndReason, RunStatus
from .messages import (
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UIMessage,
    message_text,
    new_id,
    user_message,
)

if TYPE_CHECKING:
    from .asyncio._abort import AbortController, AbortSignal

__all__ = [
    "ABORTED_BEFORE_DISPATCH",
    "OUTCOME_UNKNOWN",
    "PROTOCOL_VERSION",
    "AbortController",
    "AbortSignal",
    "CloseCode",
    "ConversationTree",
    "CredentialsError",
    "DeliveryEvent",
    "FinalError",
    "Interrupt",
    "MessageEvent",
    "OutcomeRecord",
    "ParsedAnswer",
    "Part",
    "PausedRun",
    "ReasoningPart",
    "Refusal",
    "RequestError",
    "RetryableError",
    "RunEndReason",
    "RunEvent",
    "RunInfo",
    "RunStatus",
    "RunwireError",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "UIMessage",
    "ViewMessage",
    "answer_format",
    "checks",
    "history_message",
    "message_text",
    "new_id",
    "parse_answer",
    "repair_unanswered_tool_calls",
    "user_message",
]


# AbortController and AbortSignal live in the I/O layer, since a signal's scope() cancels an
# anyio block. They load on first use, so importing transport never imports anyio.
_LAZY = {"AbortController", "AbortSignal"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from .asyncio import _abort as abort

        return getattr(abort, name)
    raise AttributeError(f"module 'transport' has no attribute {name!r}")
