"""runwire's wire protocol and the logic every side shares, without sockets.

``transport.frames`` defines the protocol and ``transport.codec`` encodes it.
``transport.runs`` holds the Run rules, and ``transport.tree`` folds a channel's entries into a
conversation. ``transport.outcomes`` resolves steering outcomes, and ``transport.checks`` holds
the input checks. ``transport.history`` reads back what a stopped Run left: interrupted replies
and unanswered tool calls. ``transport.asyncio`` is the one I/O driver that the relay and both
SDKs share; importing ``transport`` does not load it.
"""

from typing import TYPE_CHECKING

from . import checks
from .answers import ParsedAnswer, answer_format, parse_answer
from .errors import (
    CloseCode,
    CredentialsError,
    FinalError,
    RequestError,
    RetryableError,
    RunwireError,
)
from .frames import PROTOCOL_VERSION, Interrupt, RunEndReason, RunStatus
from .history import (
    ABORTED_BEFORE_DISPATCH,
    OUTCOME_UNKNOWN,
    history_message,
    repair_unanswered_tool_calls,
)
from .interrupts import PausedRun
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
from .outcomes import OutcomeRecord
from .tree import (
    ConversationTree,
    DeliveryEvent,
    MessageEvent,
    Refusal,
    RunEvent,
    RunInfo,
    ViewMessage,
)

if TYPE_CHECKING:
    from .asyncio.abort import AbortController, AbortSignal

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
        from .asyncio import abort

        return getattr(abort, name)
    raise AttributeError(f"module 'transport' has no attribute {name!r}")
