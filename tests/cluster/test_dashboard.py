"""Every metric deploy/grafana/runwire-dashboard.json queries is in a Redis relay's /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from relay.store._redis import RedisStore
from tests.relay.test_metrics_latency import scrape_after_runs

from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "runwire-dashboard.json"


def dashboard_metrics() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return {m for e in exprs for m in re.findall(r"\b((?:runwire|process)_[a-z_]+)\b", e)}


async def test_every_metric_the_dashboard_queries_exists(redis_prefix: str) -> None:
    text = await scrape_after_runs(RedisStore(REDIS_URL, prefix=redis_prefix))
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    used = dashboard_metrics()
    assert len(used) >= 15
    assert sorted(used - names) == []
