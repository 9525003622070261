"""The HTTP API's OpenAPI document: valid OpenAPI 3.1, served at ``/v1/openapi.json`` on a
relay with tokens too (it holds no session data), in step with the routes the relay answers
and with the copy in the docs."""

from __future__ import annotations

import http.client
import json
from typing import Any

import anyio
import pytest
from openapi_spec_validator import validate

import relay
from relay import openapi
from relay._http_api import PostMessage

pytestmark = pytest.mark.anyio

SECRET = "openapi-test-secret-" + "0123456789abcdef" * 3


def fetch(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_the_document_is_valid_openapi_3_1() -> None:
    document = openapi.document()
    validate(document)
    assert document["openapi"] == "3.1.0"
    # The body schemas are the models the relay validates with.
    schemas = document["components"]["schemas"]
    assert set(schemas["PostMessage"]["properties"]) == set(PostMessage.model_fields)
    assert schemas["PostMessage"]["additionalProperties"] is False


def test_the_docs_copy_is_the_document() -> None:
    assert openapi.DOCS_COPY.read_bytes() == openapi.render(), (
        "docs/reference/protocol/openapi.json is stale: run python -m relay.openapi"
    )


async def test_served_without_a_token_and_every_path_is_a_route() -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as server:
        with anyio.fail_after(30):
            status, headers, body = await anyio.to_thread.run_sync(
                fetch, server.port, "GET", "/v1/openapi.json"
            )
            assert status == 200 and headers["Content-Type"] == "application/json"
            document: dict[str, Any] = json.loads(body)
            assert document == json.loads(openapi.render())
            status, headers, _ = await anyio.to_thread.run_sync(
                fetch, server.port, "POST", "/v1/openapi.json"
            )
            assert status == 405 and headers["Allow"] == "GET, HEAD, OPTIONS"
            # Every documented route exists: without a token each answers 401, not 404.
            for path, item in document["paths"].items():
                if path == "/v1/openapi.json":
                    continue
                concrete = path.replace("{id}", "s-1").replace("{run_id}", "r-1")
                for method in ("get", "post"):
                    if method in item:
                        status, _, reply = await anyio.to_thread.run_sync(
                            fetch, server.port, method.upper(), concrete
                        )
                        assert status == 401, (path, method, reply)
                        assert json.loads(reply)["error"]["code"] == "UNAUTHORIZED"
