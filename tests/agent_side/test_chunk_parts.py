"""The parts the newer chunk types fold into: on the wire, in history, and for the tool runner."""

from __future__ import annotations

from agent_side._tools import tool_calls
from transport import _codec as codec
from transport._history import history_message
from transport.frames import ResponseClose
from transport.messages import (
    DataPart,
    FilePart,
    SourceDocumentPart,
    SourceUrlPart,
    TextPart,
    ToolCallPart,
    UIMessage,
)


def _message() -> UIMessage:
    return UIMessage(
        id="m",
        role="assistant",
        parts=[
            ToolCallPart(tool_call_id="done", tool_name="t", input={"a": 1}),
            ToolCallPart(tool_call_id="half", tool_name="t", input_text='{"a"'),
            SourceUrlPart(source_id="s", url="https://example.com"),
            SourceDocumentPart(source_id="d", media_type="text/plain", title="T"),
            FilePart(url="data:text/plain;base64,eA==", media_type="text/plain"),
            DataPart(type="data-chart", id="c", data={"x": [1]}),
            TextPart(text="ok"),
        ],
    )


def test_every_part_kind_round_trips_through_a_response_close_entry() -> None:
    entry = ResponseClose(id="e", run_id="r", message_id="m", message=_message())
    raw = codec.encode_entry(entry)
    assert b"input_text" in raw and b'"title":null' not in raw
    decoded = codec.decode_entry(codec.loads(raw))
    assert isinstance(decoded, ResponseClose) and decoded.message == _message()


def test_a_call_whose_input_never_became_whole_is_neither_run_nor_shown_to_a_model() -> None:
    message = _message()
    assert [c.tool_call_id for c in tool_calls(message)] == ["done"]
    shown = history_message(message)
    ids = [p.tool_call_id for p in shown.parts if isinstance(p, ToolCallPart)]
    assert ids == ["done"]
    assert len(shown.parts) == len(message.parts) - 1
