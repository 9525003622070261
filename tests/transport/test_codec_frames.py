"""The frames the relay builds around already-encoded entries (``codec.attached_frame``,
``page_frame``, ``error_frame``) decode as the frame models say."""

from __future__ import annotations

import orjson

from transport import _codec as codec
from transport.errors import RATE_LIMITED, RunwireError
from transport.frames import Attached, Error, Page

ENTRIES = [
    orjson.dumps({"serial": 4, "kind": "cancel", "id": "c1", "run_id": "r1"}),
    orjson.dumps({"serial": 5, "kind": "cancel", "id": "c2", "run_id": "r1"}),
]


def test_an_attached_frame_decodes_with_its_entries() -> None:
    data = codec.attached_frame("a-1", "s/1", "ep", 5, has_older=True, reset=False, entries=ENTRIES)
    frame = codec.decode_relay_frame(data)
    assert isinstance(frame, Attached)
    assert (frame.req, frame.session_id, frame.epoch, frame.head) == ("a-1", "s/1", "ep", 5)
    assert frame.has_older and not frame.reset
    assert [e["id"] for e in frame.entries] == ["c1", "c2"]


def test_a_page_frame_decodes_and_may_be_empty() -> None:
    frame = codec.decode_relay_frame(codec.page_frame(7, 's"q', False, ENTRIES))
    assert isinstance(frame, Page)
    assert (frame.req, frame.session_id, frame.has_older) == (7, 's"q', False)
    assert len(frame.entries) == 2
    empty = codec.decode_relay_frame(codec.page_frame(8, "s", True, []))
    assert isinstance(empty, Page) and empty.entries == [] and empty.has_older


def test_an_error_frame_carries_the_request_id_only_when_there_is_one() -> None:
    error = RunwireError(RATE_LIMITED, "slow down", details={"retry_after": 0.05})
    with_req = codec.decode_relay_frame(codec.error_frame(error.to_wire(), 3))
    assert isinstance(with_req, Error) and with_req.req == 3
    assert with_req.error.code == RATE_LIMITED
    assert with_req.error.details == {"retry_after": 0.05}
    assert "req" not in orjson.loads(codec.error_frame(error.to_wire()))
