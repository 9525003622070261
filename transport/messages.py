"""Conversation messages: ``UIMessage`` and its parts.

A ``UIMessage`` is what people and models read: an id, a role, a list of
typed parts (text, reasoning, tool calls and their results, sources, files
and the app's own ``data-<name>`` parts) and free-form metadata. The relay
never interprets parts beyond validating their shape; the conversation tree
(``transport._tree``) folds streamed parts into messages.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import uuid4

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
)

__all__ = [
    "DataPart",
    "FilePart",
    "Part",
    "ReasoningPart",
    "Role",
    "SourceDocumentPart",
    "SourceUrlPart",
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


class _Optional(_Part):
    """A part whose optional fields are left out of its dump while they are ``None``."""

    _omit_none: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self._omit_none:
                if data.get(name, 0) is None:
                    del data[name]
        return data


class TextPart(_Part):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ReasoningPart(_Part):
    """A model's visible reasoning."""

    type: Literal["reasoning"] = "reasoning"
    text: str


class ToolCallPart(_Optional):
    """A model's request to run a tool.

    ``input_text`` is the input's JSON as streamed so far while the model
    still writes it (``tool-input-delta``); ``None`` once the input is whole.
    A call whose input never became whole is not run.
    """

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: Any = None
    input_text: str | None = None
    _omit_none = ("input_text",)


class ToolResultPart(_Part):
    """The answer to a tool call; ``is_error`` marks a failure the model should see."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    output: Any = None
    is_error: bool = Field(default=False, strict=True)


class SourceUrlPart(_Optional):
    """A web page the answer draws on."""

    type: Literal["source-url"] = "source-url"
    source_id: str
    url: str
    title: str | None = None
    _omit_none = ("title",)


class SourceDocumentPart(_Optional):
    """A document the answer draws on."""

    type: Literal["source-document"] = "source-document"
    source_id: str
    media_type: str
    title: str
    filename: str | None = None
    _omit_none = ("filename",)


class FilePart(_Part):
    """A file: its URL (often a ``data:`` URL) and media type."""

    type: Literal["file"] = "file"
    url: str
    media_type: str


class DataPart(_Optional):
    """The app's own data, typed ``data-<name>``; ``id`` lets a later part replace it."""

    type: str = Field(pattern=r"^data-.+")
    id: str | None = None
    data: Any = None
    _omit_none = ("id",)


def _part_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(kind, str) and kind.startswith("data-"):
        return "data"
    return kind if isinstance(kind, str) else None


Part = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[ReasoningPart, Tag("reasoning")]
    | Annotated[ToolCallPart, Tag("tool-call")]
    | Annotated[ToolResultPart, Tag("tool-result")]
    | Annotated[SourceUrlPart, Tag("source-url")]
    | Annotated[SourceDocumentPart, Tag("source-document")]
    | Annotated[FilePart, Tag("file")]
    | Annotated[DataPart, Tag("data")],
    Discriminator(_part_tag),
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
