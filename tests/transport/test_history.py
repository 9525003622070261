"""Reading back what a stopped Run left: interrupted replies, unanswered tool calls."""

from __future__ import annotations

from transport._chunks import fold_chunks
from transport._history import (
    ABORTED_BEFORE_DISPATCH,
    ABORTED_BEFORE_DISPATCH_TEXT,
    INTERRUPTED_MARK,
    OUTCOME_UNKNOWN,
    OUTCOME_UNKNOWN_TEXT,
    history_message,
    repair_unanswered_tool_calls,
)
from transport.messages import TextPart, ToolCallPart, ToolResultPart, UIMessage, user_message


def assistant(mid: str, *parts: object, **metadata: object) -> UIMessage:
    return UIMessage.model_validate(
        {"id": mid, "role": "assistant", "parts": list(parts), "metadata": metadata}
    )


def call(cid: str, name: str = "search") -> ToolCallPart:
    return ToolCallPart(tool_call_id=cid, tool_name=name, input={"q": cid})


def result(cid: str, name: str = "search") -> ToolResultPart:
    return ToolResultPart(tool_call_id=cid, tool_name=name, output="found")


def test_an_interrupted_reply_reads_with_the_mark_after_it() -> None:
    reply = assistant("a1", TextPart(text="Day 1: Alfa"), interrupted=True)
    read = history_message(reply)
    assert read.text() == f"Day 1: Alfa\n{INTERRUPTED_MARK}"
    assert reply.text() == "Day 1: Alfa"  # the stored message is untouched
    assert history_message(assistant("a2", TextPart(text="done"))).text() == "done"
    assert history_message(assistant("a3", interrupted=True)).text() == INTERRUPTED_MARK


def test_calls_without_results_get_outcome_unknown_and_the_input_is_not_changed() -> None:
    messages = [
        user_message("book it"),
        assistant("a1", TextPart(text="booking"), call("c1"), call("c2", "pay"), call("c3")),
        assistant("a2", result("c1")),
    ]
    before = [m.model_copy(deep=True) for m in messages]
    repaired = repair_unanswered_tool_calls(messages)
    assert messages == before
    assert repaired[0] is messages[0] and repaired[2] is messages[2]
    parts = repaired[1].parts
    assert [type(p).__name__ for p in parts] == [
        "TextPart",
        "ToolCallPart",
        "ToolCallPart",
        "ToolResultPart",
        "ToolCallPart",
        "ToolResultPart",
    ]
    unknown = parts[3]
    assert isinstance(unknown, ToolResultPart)
    assert (unknown.tool_call_id, unknown.tool_name, unknown.is_error) == ("c2", "pay", True)
    assert unknown.output == {"code": OUTCOME_UNKNOWN, "message": OUTCOME_UNKNOWN_TEXT}
    assert OUTCOME_UNKNOWN_TEXT == (
        "The run stopped before this tool call returned: outcome unknown, verify before retrying"
    )


def test_a_whole_history_comes_back_as_it_was() -> None:
    messages = [user_message("hi"), assistant("a1", call("c1"), result("c1"))]
    repaired = repair_unanswered_tool_calls(messages)
    assert all(a is b for a, b in zip(repaired, messages, strict=True))


def test_a_coded_error_result_folds_from_its_chunk() -> None:
    message = assistant("t1")
    ids: dict[tuple[str, str], int] = {}
    folded = fold_chunks(
        message,
        ids,
        [
            {
                "type": "tool-output-error",
                "toolCallId": "c9",
                "toolName": "pay",
                "errorText": ABORTED_BEFORE_DISPATCH_TEXT,
                "errorCode": ABORTED_BEFORE_DISPATCH,
            },
            {"type": "tool-output-error", "toolCallId": "c8", "errorText": "plain"},
        ],
    )
    coded, plain = folded.parts
    assert isinstance(coded, ToolResultPart) and isinstance(plain, ToolResultPart)
    assert coded.output["code"] == ABORTED_BEFORE_DISPATCH and coded.is_error
    assert plain.output == "plain"
