"""runwire's wire protocol and the logic every side shares (no sockets here).

``transport.frames`` defines the protocol, ``transport.codec`` encodes it,
``transport.runs`` holds the Run rules, ``transport.tree`` folds a channel's
entries into a conversation, ``transport.outcomes`` resolves steering
outcomes. ``transport.asyncio`` is the one I/O driver the relay and both SDKs
share.
"""

from .asyncio.abort import AbortController, AbortSignal
from .errors import CloseCode, RunwireError
from .frames import PROTOCOL_VERSION, RunEndReason, RunStatus
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
from .tree import ConversationTree, DeliveryEvent, MessageEvent, RunEvent, RunInfo, ViewMessage

__all__ = [
    "PROTOCOL_VERSION",
    "AbortController",
    "AbortSignal",
    "CloseCode",
    "ConversationTree",
    "DeliveryEvent",
    "MessageEvent",
    "OutcomeRecord",
    "Part",
    "ReasoningPart",
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
    "message_text",
    "new_id",
    "user_message",
]
