"""runwire.js against a real relay whose store refuses writes a while (``STORE_UNAVAILABLE``):
its sends are stored once, in the order made, and one the store keeps refusing rejects after
``storeWait``. Node (with ``--experimental-websocket``) runs tests/js/store_outage_client.mjs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

import relay

from ..agent_side.test_store_outage import Outage

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "js" / "store_outage_client.mjs"
NODE = shutil.which("node")


async def run_client(url: str, session_id: str, scenario: str) -> dict[str, Any]:
    if NODE is None:
        pytest.skip("node is not installed")
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [
                NODE,
                "--no-warnings",
                "--experimental-websocket",
                str(CLIENT),
                url,
                session_id,
                scenario,
            ],
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])
    return result


def text(entry: dict[str, Any]) -> str:
    return str(entry["message"]["parts"][0]["text"])


@pytest.mark.parametrize("times", [2, 1])
async def test_sends_made_during_an_outage_are_stored_once_in_the_order_made(
    monkeypatch: pytest.MonkeyPatch, times: int
) -> None:
    """The store refuses the first send ``times`` times (slowly), and what comes meanwhile:
    each send is stored once, m0 first (runwire.js rejected m0 with ``STORE_UNAVAILABLE``
    while m1 and m2 were stored). With ``times=1`` the store is back at once: m1 and m2,
    on their way already, are held by the relay behind m0 (not stored before it)."""
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        first: list[str] = []

        def down(entry_id: str, entry: dict[str, Any]) -> bool:
            if not first and entry["kind"] == "message":
                first.append(entry_id)
            if times == 1 and entry_id != first[0]:
                return False
            return outage.refused.count(first[0]) < times

        outage.down = down
        result = await run_client(server.url, "js-order", "order")
        assert all("ok" in r for r in result["sends"]), result
        assert outage.refused.count(first[0]) == times
        assert outage.refusals() > times  # the outage caught the sends in flight
        stored = await server.store.read("js-order", after=0, limit=100)
        prompts = [orjson.loads(e.data) for e in stored]
        assert [text(p) for p in prompts] == ["m0", "m1", "m2"]
        assert [p["run_id"] for p in prompts] == [r["ok"] for r in result["sends"]]


async def test_a_send_the_store_keeps_refusing_rejects_after_store_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:
        outage = Outage(server, monkeypatch)
        outage.down = lambda _id, entry: entry["kind"] == "message" and text(entry) == "lost"
        result = await run_client(server.url, "js-gone", "give-up")
        assert result["sends"][0] == {"code": "STORE_UNAVAILABLE"}
        assert "ok" in result["sends"][1] and result["connected"] is True
        assert len(outage.refused) > 1  # it went again before it gave up
        stored = await server.store.read("js-gone", after=0, limit=100)
        assert [text(orjson.loads(e.data)) for e in stored] == ["kept"]
