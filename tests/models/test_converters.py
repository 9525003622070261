"""The conversation converters: what each provider is sent, checked by the SDK's own types."""

from __future__ import annotations

from typing import Any

from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter

from agent_side.models.anthropic import anthropic_system, to_anthropic_messages
from agent_side.models.openai_chat import to_chat_messages
from agent_side.models.openai_responses import to_responses_input
from transport._history import INTERRUPTED_MARK, history_message
from transport.messages import (
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UIMessage,
    user_message,
)


def conversation(*, marked: bool = False) -> list[UIMessage]:
    """A prompt, a reply with a tool round, steering, an interrupted reply, more steering."""
    interrupted = UIMessage(
        id="a2",
        role="assistant",
        parts=[TextPart(text="Day 1: Belém")],
        metadata={"interrupted": True},
    )
    return [
        UIMessage(id="s", role="system", parts=[TextPart(text="Answer in English.")]),
        user_message("Plan a trip to Lisbon", id="u1"),
        UIMessage(
            id="a1",
            role="assistant",
            parts=[
                ReasoningPart(text="I need the weather."),
                TextPart(text="Checking."),
                ToolCallPart(tool_call_id="c1", tool_name="get_weather", input={"city": "Lisbon"}),
                ToolCallPart(tool_call_id="c2", tool_name="half", input_text='{"ci'),
                ToolResultPart(tool_call_id="c1", tool_name="get_weather", output={"temp": 21}),
                TextPart(text="It is warm."),
            ],
        ),
        user_message("Make it 5 days.", id="u2"),
        history_message(interrupted) if marked else interrupted,
        user_message("And cheaper.", id="u3"),
    ]


def test_chat_messages_are_what_the_sdk_types_take() -> None:
    out = to_chat_messages(conversation(), system="Be brief.")
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(out)
    roles = [m["role"] for m in out]
    assert roles == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    call = out[3]
    assert call.get("content") == "Checking."
    assert [c["id"] for c in call["tool_calls"]] == ["c1"]  # type: ignore[typeddict-item]
    assert out[4] == {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'}
    assert out[7]["content"] == f"Day 1: Belém\n{INTERRUPTED_MARK}"
    assert out[-1]["content"] == "And cheaper."


def test_the_interrupted_mark_is_added_once_whether_or_not_history_added_it() -> None:
    plain = to_chat_messages(conversation())
    marked = to_chat_messages(conversation(marked=True))
    assert plain == marked
    assert str(plain).count(INTERRUPTED_MARK) == 1


def test_responses_input_is_what_the_sdk_types_take() -> None:
    out: list[Any] = list(to_responses_input(conversation()))
    TypeAdapter(ResponseInputParam).validate_python(out)
    kinds = [(i["type"], i.get("role")) for i in out]
    assert kinds == [
        ("message", "developer"),
        ("message", "user"),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert out[3]["call_id"] == out[4]["call_id"] == "c1"
    assert out[3]["arguments"] == '{"city": "Lisbon"}'


def test_anthropic_messages_alternate_and_are_what_the_sdk_types_take() -> None:
    out: list[Any] = list(to_anthropic_messages(conversation()))
    TypeAdapter(list[MessageParam]).validate_python(out)
    roles = [m["role"] for m in out]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert [b["type"] for b in out[1]["content"]] == ["text", "tool_use"]
    assert out[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": '{"temp": 21}',
        "is_error": False,
    }
    assert out[5]["content"][-1]["text"] == f"\n{INTERRUPTED_MARK}"
    assert anthropic_system(conversation(), "Be brief.") == "Be brief.\n\nAnswer in English."


def test_anthropic_turns_merge_and_a_reply_first_gets_a_user_turn_before_it() -> None:
    messages = [
        UIMessage(id="a", role="assistant", parts=[TextPart(text="Hello!")]),
        user_message("one", id="u1"),
        user_message("two", id="u2"),
    ]
    out: list[Any] = list(to_anthropic_messages(messages))
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["text"] for b in out[2]["content"]] == ["one", "two"]
