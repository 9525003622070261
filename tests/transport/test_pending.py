"""The requests of a connection that wait for their reply (``transport.asyncio._pending``)."""

from __future__ import annotations

import pytest

from transport import _codec as codec
from transport.asyncio._pending import Requests
from transport.errors import PAYLOAD_TOO_LARGE, RATE_LIMITED, RunwireError
from transport.frames import Attach, RelayFrame

pytestmark = pytest.mark.anyio


def frame(req: int, text: str) -> RelayFrame:
    return codec.decode_relay_frame(text.replace("REQ", str(req)))


async def test_each_request_gets_the_next_req_and_its_own_reply() -> None:
    requests = Requests()
    first = requests.open(Attach(req=0, session_id="a"), limit=1000)
    second = requests.open(Attach(req=0, session_id="b"), limit=1000, place=3)
    assert (first.data["req"], second.data["req"]) == (1, 2)
    sent = codec.loads(second.text)
    assert (sent["type"], sent["req"], sent["session_id"]) == ("attach", 2, "b")
    assert (first.place, second.place) == (0, 3)
    assert requests.waiting() == [first, second]
    requests.reply(2, frame(2, '{"type": "ack", "req": REQ}'))
    error = '{"type": "error", "req": REQ, "error": {"code": "RATE_LIMITED", "message": "slow"}}'
    requests.reply(1, frame(1, error))
    requests.reply(7, frame(7, '{"type": "ack", "req": REQ}'))  # no such request: ignored
    assert second.done.is_set() and second.reply is not None and second.error is None
    assert first.done.is_set() and first.error is not None and first.error.code == RATE_LIMITED
    requests.close(first)
    assert requests.waiting() == [second]


async def test_a_frame_over_the_limit_is_refused_and_takes_no_req() -> None:
    requests = Requests()
    with pytest.raises(RunwireError) as caught:
        requests.open(Attach(req=0, session_id="x" * 100), limit=50)
    assert caught.value.code == PAYLOAD_TOO_LARGE
    assert caught.value.details["limit"] == 50 and caught.value.details["size"] > 50
    assert requests.waiting() == []
    assert requests.open(Attach(req=0, session_id="s"), limit=1000).data["req"] == 1


async def test_fail_all_ends_the_requests_still_waiting_and_keeps_the_replies() -> None:
    requests = Requests()
    answered = requests.open(Attach(req=0, session_id="a"), limit=1000)
    waiting = requests.open(Attach(req=0, session_id="b"), limit=1000)
    back = requests.open(Attach(req=0, session_id="c"), limit=1000, place=1)
    requests.reply(1, frame(1, '{"type": "ack", "req": REQ}'))
    back.send_again_later()
    requests.fail_all(RunwireError("CONNECTION_CLOSED", "gone"))
    assert answered.error is None and answered.reply is not None
    assert waiting.error is not None and waiting.error.code == "CONNECTION_CLOSED"
    assert back.again and back.error is None
