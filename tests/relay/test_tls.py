"""TLS on the relay's one port: ``wss://`` for both Python SDKs, ``https://`` for the HTTP API.

The certificates come from ``trustme``: a throwaway CA that the tests trust through an
``ssl`` context, as a deployment with a private CA would.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
import trustme

import agent_side
import client_side
import relay
from agent_side import Agent, Run

pytestmark = pytest.mark.anyio


@dataclass
class Certs:
    cert: Path
    key: Path
    ca: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    found = Certs(folder / "cert.pem", folder / "key.pem", folder / "ca.pem")
    issued.cert_chain_pems[0].write_to_path(str(found.cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(found.cert), append=True)
    issued.private_key_pem.write_to_path(str(found.key))
    ca.cert_pem.write_to_path(str(found.ca))
    return found


@pytest.fixture
async def tls_relay(certs: Certs) -> AsyncIterator[relay.Server]:
    async with relay.serve(
        port=0, store="memory://", ssl_certfile=str(certs.cert), ssl_keyfile=str(certs.key)
    ) as server:
        yield server


def http(
    url: str, context: ssl.SSLContext, body: object | None = None
) -> tuple[int, dict[str, object]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_the_urls_say_wss_and_https(tls_relay: relay.Server) -> None:
    assert tls_relay.url == f"wss://127.0.0.1:{tls_relay.port}"
    assert tls_relay.http_url == f"https://127.0.0.1:{tls_relay.port}"


async def test_both_sdks_talk_over_wss(tls_relay: relay.Server, certs: Certs) -> None:
    context = certs.client_context()
    agent = Agent(tls_relay.url, ssl=context)

    async def words() -> AsyncIterator[str]:
        for word in ("over ", "TLS"):
            yield word

    @agent.on_run
    async def answer(run: Run) -> None:
        await run.pipe(words())

    with anyio.fail_after(20):
        async with agent, client_side.connect(tls_relay.url, "tls-1", ssl=context) as session:
            run = await session.send("hello")
            result = await run.result()
            assert result.status == "complete"
            texts = [vm.message.text() for vm in session.view.messages()]
            assert texts == ["hello", "over TLS"]
        # The explicit agent mode (agent_side.connect) takes the context too.
        async with agent_side.connect(tls_relay.url, "tls-2", ssl=context) as attached:
            assert attached.session_id == "tls-2"


async def test_the_http_api_answers_over_https(tls_relay: relay.Server, certs: Certs) -> None:
    context = certs.client_context()
    base = tls_relay.http_url
    with anyio.fail_after(20):
        status, health = await anyio.to_thread.run_sync(http, f"{base}/healthz", context)
        assert (status, health["status"]) == (200, "ok")
        status, posted = await anyio.to_thread.run_sync(
            http, f"{base}/v1/sessions/tls-3/messages", context, {"message": "hi"}
        )
        assert status == 201 and posted["serial"] == 1
        status, page = await anyio.to_thread.run_sync(
            http, f"{base}/v1/sessions/tls-3/history", context
        )
        assert status == 200 and [e["serial"] for e in page["entries"]] == [1]  # type: ignore[attr-defined]


async def test_plain_http_and_untrusted_clients_are_refused(
    tls_relay: relay.Server, certs: Certs
) -> None:
    def plain() -> None:
        urllib.request.urlopen(f"http://127.0.0.1:{tls_relay.port}/healthz", timeout=10)

    def untrusted() -> None:
        urllib.request.urlopen(
            f"{tls_relay.http_url}/healthz", timeout=10, context=ssl.create_default_context()
        )

    with anyio.fail_after(20):
        with pytest.raises((OSError, urllib.error.URLError)):  # no plain text on a TLS port
            await anyio.to_thread.run_sync(plain)
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            await anyio.to_thread.run_sync(untrusted)


async def test_an_ssl_context_may_be_given_instead_of_files(certs: Certs) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certs.cert), str(certs.key))
    async with relay.serve(port=0, store="memory://", ssl=context) as server:
        assert server.url.startswith("wss://")
        with anyio.fail_after(20):
            status, health = await anyio.to_thread.run_sync(
                http, f"{server.http_url}/healthz", certs.client_context()
            )
        assert status == 200 and health["status"] == "ok"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ssl_keyfile": "key.pem"}, "ssl_keyfile needs ssl_certfile"),
        ({"ssl_certfile": "/nonexistent/cert.pem"}, "cannot load the TLS certificate"),
        (
            {"ssl_certfile": "cert.pem", "ssl": ssl.create_default_context()},
            "not both",
        ),
        ({"ssl": "cert.pem"}, "ssl must be an ssl.SSLContext"),
    ],
)
async def test_tls_options_that_cannot_work_are_refused_before_listening(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        async with relay.serve(port=0, store="memory://", **options):
            pass


async def test_a_key_that_does_not_match_the_certificate_is_refused(
    certs: Certs, tmp_path: Path
) -> None:
    other = tmp_path / "other.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other))
    with pytest.raises(ValueError, match="cannot load the TLS certificate"):
        async with relay.serve(
            port=0, store="memory://", ssl_certfile=str(certs.cert), ssl_keyfile=str(other)
        ):
            pass


def test_the_cli_says_why_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "relay", "--port", "0", "--store", "memory://"),
            *("--ssl-certfile", str(tmp_path / "missing.pem")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("runwire relay: cannot load the TLS certificate")
    assert "Traceback" not in done.stderr
