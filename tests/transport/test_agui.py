"""transport.agui: a session's entries as AG-UI events. The JSON vectors in
tests/vectors/ag-ui/ are what it gives; the JavaScript mapping (client_side/js/src/ag-ui.ts)
must give the same, and its test checks each event against @ag-ui/core's schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from transport import agui

VECTORS = sorted((Path(__file__).resolve().parents[1] / "vectors" / "ag-ui").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.name)
def test_the_vectors_are_what_the_mapping_gives(path: Path) -> None:
    doc = load(path)
    assert agui.session_events(doc["entries"], doc["thread_id"]) == doc["events"]


def test_the_mapping_has_no_state() -> None:
    """One entry at a time gives what the whole history gives: a reader may start anywhere."""
    doc = load(VECTORS[0])
    one_by_one = [e for entry in doc["entries"] for e in agui.entry_events(entry, "trip-42")]
    assert one_by_one == agui.session_events(doc["entries"], "trip-42")


def test_runs_and_replies() -> None:
    doc = load(VECTORS[0])
    events = doc["events"]
    starts = [e for e in events if e["type"] == "RUN_STARTED"]
    assert starts[0] == {
        "type": "RUN_STARTED",
        "threadId": "trip-42",
        "runId": "run-1",
        "timestamp": 1700000000001,
    }
    cancelled = [e for e in events if e["type"] == "RUN_FINISHED" and "result" in e]
    assert cancelled[0]["result"] == {"status": "cancelled"}
    errors = [e for e in events if e["type"] == "RUN_ERROR"]
    assert [e.get("code") for e in errors] == ["LLM_ERROR", None]
    assert errors[1]["message"] == "the Run failed"
    tool = [e for e in events if e.get("toolCallId") == "c1"]
    assert [e["type"] for e in tool] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert json.loads(tool[1]["delta"]) == {"city": "Lisbon", "days": [1, 2]}
    assert tool[0]["parentMessageId"] == "a1"
    content = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "" not in content, "AG-UI refuses an empty delta"
    names = {e["name"] for e in events if e["type"] == "CUSTOM"}
    assert {"runwire.steer", "runwire.inject", "runwire.refused", "runwire.interrupt"} <= names
    assert {"runwire.cancel", "runwire.cancel_denied", "runwire.run_status", "data-map"} <= names
    assert {"type": "STATE_SNAPSHOT", "snapshot": {"days": 5}, "timestamp": 1700000000007} in events
