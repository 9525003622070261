"""Conversation messages: ``UIMessage`` and its parts.

A ``UIMessage`` is what people and models read: an id, a role, a list of
typed parts (text, reasoning, tool calls and their results) and free-form
metadata. The relay never interprets parts beyond validating their shape; the
conversation tree (``transport.tree``) folds streamed parts into messages.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Part",
    "ReasoningPart",
    "Role",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "UIMessage",
    "message_text",
    "new_id",
    "user_message",
]

Role = Literal["user", "assistant", "system"]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class TextPart(_Part):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ReasoningPart(_Part):
    """A model's visible reasoning."""

    type: Literal["reasoning"] = "reasoning"
    text: str


class ToolCallPart(_Part):
    """A model's request to run a tool."""

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: Any = None


class ToolResultPart(_Part):
    """The answer to a tool call; ``is_error`` marks a failure the model should see."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    output: Any = None
    is_error: bool = Field(default=False, strict=True)


Part = Annotated[
    TextPart | ReasoningPart | ToolCallPart | ToolResultPart, Field(discriminator="type")
]


class UIMessage(BaseModel):
    """One message of a conversation, as the seed's UI message codec defines it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    role: Role
    parts: list[Part] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def text(self) -> str:
        """The concatenated text parts."""
        return message_text(self)


def new_id() -> str:
    """A fresh random id (callers may pass their own anywhere an id is taken)."""
    return uuid4().hex


def user_message(
    text_or_parts: str | list[Part] | list[dict[str, Any]],
    *,
    id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> UIMessage:
    """A user message from text or parts (the seed's ``createUserMessage``)."""
    if isinstance(text_or_parts, str):
        parts: list[Any] = [TextPart(text=text_or_parts)]
    else:
        parts = list(text_or_parts)
    return UIMessage.model_validate(
        {"id": id or new_id(), "role": "user", "parts": parts, "metadata": dict(metadata or {})}
    )


def message_text(message: UIMessage) -> str:
    """The text a person would read: every text part, in order."""
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))
