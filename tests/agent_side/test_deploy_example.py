"""``examples/deploy_region.py``: the README's interrupt example runs end to end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deploy_region.py"


async def test_the_deploy_example_asks_and_deploys_where_the_person_said() -> None:
    spec = importlib.util.spec_from_file_location("deploy_region_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the example's annotations through it
    spec.loader.exec_module(module)
    with anyio.fail_after(20):
        assert await module.main("EU") == "Done: api is live in eu."
