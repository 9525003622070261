"""Tokens on the wire: refused at connect with a clear code, stamped identities, capabilities
per frame, expiry mid-connection, anonymous relays on loopback only."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import jwt
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

import relay
from relay.auth import mint_token
from transport.messages import new_id

from .wire import RawPeer, prompt, run_status, sized_token, steer

pytestmark = pytest.mark.anyio

SECRET = "relay-test-secret-" + "0123456789abcdef" * 3
ALL = ["subscribe", "publish", "steer", "cancel"]


def token(user: str = "alice", sessions: dict[str, list[str]] | None = None, **kw: Any) -> str:
    return mint_token(user=user, sessions=sessions or {"trip-*": ALL}, secret=SECRET, **kw)


@pytest.fixture
async def server() -> AsyncIterator[relay.Server]:
    async with relay.serve(port=0, store="memory://", secret=SECRET) as srv:
        yield srv


async def dial(
    url: str, tok: str | None, *, role: str = "client", query: bool = False, client_id: str = ""
) -> tuple[RawPeer, dict[str, Any]]:
    """Connect and say hello; the first frame the relay answers with."""
    headers = {"Authorization": f"Bearer {tok}"} if tok and not query else None
    target = f"{url}/?token={tok}" if tok and query else url
    ws = await connect(target, additional_headers=headers, max_size=None)
    peer = RawPeer(ws)
    hello: dict[str, Any] = {"type": "hello", "v": 1, "role": role, "req": 1}
    if client_id:
        hello["client_id"] = client_id
    await peer.send(hello)
    first = await peer.recv()
    if first["type"] == "welcome":
        peer.client_id = first["client_id"]
    return peer, first


async def closed_with(peer: RawPeer) -> int | None:
    with anyio.fail_after(5):
        try:
            while True:
                await peer.ws.recv()
        except ConnectionClosed:
            pass
    return peer.ws.close_code


@pytest.mark.parametrize(
    ("make", "code", "close"),
    [
        (lambda: None, "UNAUTHORIZED", 4001),
        (lambda: token(ttl=-10), "TOKEN_EXPIRED", 4003),
        (
            lambda: mint_token(user="alice", sessions={"*": ALL}, secret="wrong-" + "k" * 60),
            "UNAUTHORIZED",
            4001,
        ),
        (
            lambda: jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, SECRET, "HS256"),
            "UNAUTHORIZED",
            4001,
        ),
        (
            lambda: jwt.encode(
                {"sub": "a", "exp": int(time.time()) + 60, "sessions": {}}, SECRET * 2, "HS512"
            ),
            "UNAUTHORIZED",
            4001,
        ),
        (
            lambda: jwt.encode({"sub": "a", "exp": 10**400, "sessions": {}}, SECRET, "HS256"),
            "UNAUTHORIZED",
            4001,
        ),
    ],
    ids=["missing", "expired", "bad-signature", "missing-claims", "wrong-algorithm", "huge-exp"],
)
async def test_bad_tokens_are_refused_at_connect_with_a_clear_code(
    server: relay.Server, make: Any, code: str, close: int
) -> None:
    peer, first = await dial(server.url, make())
    assert first["type"] == "error" and first["req"] == 1
    assert first["error"]["code"] == code
    assert await closed_with(peer) == close


async def test_a_token_in_the_query_is_accepted_for_browsers(server: relay.Server) -> None:
    peer, first = await dial(server.url, token(), query=True)
    assert first["type"] == "welcome" and first["user_id"] == "alice"
    await peer.close()


async def test_identity_is_stamped_from_the_token_whatever_the_frame_claims(
    server: relay.Server,
) -> None:
    peer, welcome = await dial(server.url, token(), client_id="bob/web")
    # A client id another user's would be scoped to this user.
    assert welcome["client_id"] == "alice/bob/web"
    pinned, welcome2 = await dial(server.url, token(client_id="alice-phone"), client_id="x")
    assert welcome2["client_id"] == "alice-phone"
    await peer.attach("trip-1")
    entry = {**prompt(), "user_id": "bob", "client_id": "bob/web", "queued": True}
    ack = await peer.publish("trip-1", entry)
    assert ack["type"] == "ack"
    [stored] = await peer.entries(1)
    assert (stored["user_id"], stored["client_id"]) == ("alice", "alice/bob/web")
    assert "queued" not in stored
    await pinned.close()
    await peer.close()


async def test_a_session_the_token_does_not_cover_gets_unauthorized_and_nothing(
    server: relay.Server,
) -> None:
    alice, _ = await dial(server.url, token())
    bob, _ = await dial(server.url, token("bob", {"*": ALL}))
    refused = await alice.request({"type": "attach", "session_id": "work-7"})
    assert refused["type"] == "error" and refused["error"]["code"] == "UNAUTHORIZED"
    await bob.attach("work-7")
    await bob.publish("work-7", prompt(text="private"))
    publish = await alice.publish("work-7", prompt())
    assert publish["error"]["code"] == "NOT_ATTACHED"
    history = await alice.request({"type": "history", "session_id": "work-7", "before": 10})
    assert history["error"]["code"] == "NOT_ATTACHED"
    # The next delivery alice gets is of her own session: nothing of work-7 came.
    await alice.attach("trip-2")
    await alice.publish("trip-2", prompt(text="mine"))
    [frame] = [await alice.next("deliver")]
    assert frame["session_id"] == "trip-2"
    assert all(f.get("session_id") != "work-7" for f in alice.inbox)
    await alice.close()
    await bob.close()


@pytest.mark.parametrize(
    ("caps", "entry_kind", "code"),
    [
        (["subscribe"], "prompt", "UNAUTHORIZED"),
        (["subscribe", "publish"], "prompt", None),
        (["subscribe", "publish"], "steer", "UNAUTHORIZED"),
        (["subscribe", "publish", "steer"], "steer", None),
        (["subscribe", "publish"], "cancel", "UNAUTHORIZED"),
        (["subscribe", "publish", "cancel"], "cancel", None),
    ],
)
async def test_each_publish_needs_its_capability(
    server: relay.Server, caps: list[str], entry_kind: str, code: str | None
) -> None:
    owner, _ = await dial(server.url, token("alice", {"*": ALL}))
    await owner.attach("trip-3")
    run_id = new_id()
    await owner.publish("trip-3", prompt(run_id))
    peer, _ = await dial(server.url, token("alice", {"trip-*": caps}))
    await peer.attach("trip-3")
    entry: dict[str, Any]
    if entry_kind == "prompt":
        entry = prompt()
    elif entry_kind == "steer":
        entry = steer(run_id, "more")
    else:
        entry = {"kind": "cancel", "id": new_id(), "run_id": run_id}
    reply = await peer.publish("trip-3", entry)
    if code is None:
        assert reply["type"] == "ack"
    else:
        assert reply["type"] == "error" and reply["error"]["code"] == code
    await peer.close()
    await owner.close()


async def test_agents_need_the_agent_capability(server: relay.Server) -> None:
    client, _ = await dial(server.url, token("alice", {"*": ALL}))
    await client.attach("trip-4")
    run_id = new_id()
    await client.publish("trip-4", prompt(run_id))
    fake, _ = await dial(server.url, token("mallory", {"*": ALL}), role="agent")
    worker = await fake.request({"type": "worker", "agent": "default"})
    assert worker["error"]["code"] == "UNAUTHORIZED"
    await fake.attach("trip-4")
    start = await fake.publish("trip-4", run_status(run_id, "active"))
    assert start["error"]["code"] == "UNAUTHORIZED"
    # A worker whose token covers other sessions only is not handed this Run.
    elsewhere, _ = await dial(server.url, token("svc", {"work-*": ["agent"]}), role="agent")
    assert (await elsewhere.request({"type": "worker", "agent": "default"}))["type"] == "ack"
    real, _ = await dial(server.url, token("svc", {"trip-*": ["agent"]}), role="agent")
    assert (await real.request({"type": "worker", "agent": "default"}))["type"] == "ack"
    dispatch = await real.next("dispatch")
    assert dispatch["run_id"] == run_id
    await real.attach("trip-4")
    assert (await real.publish("trip-4", run_status(run_id, "active")))["type"] == "ack"
    assert not any(f["type"] == "dispatch" for f in elsewhere.inbox)
    for peer in (client, fake, elsewhere, real):
        await peer.close()


async def test_a_token_that_expires_mid_connection_closes_it_with_4003(
    server: relay.Server,
) -> None:
    peer, first = await dial(server.url, token(ttl=2))
    assert first["type"] == "welcome"
    await peer.attach("trip-5")
    assert await closed_with(peer) == 4003
    assert "TOKEN_EXPIRED" in (peer.ws.close_reason or "")


async def test_an_anonymous_relay_listens_on_loopback_only_unless_allowed() -> None:
    with pytest.raises(ValueError, match="allow_anonymous"):
        async with relay.serve(host="0.0.0.0", port=0, store="memory://"):
            pass
    async with relay.serve(host="0.0.0.0", port=0, store="memory://", allow_anonymous=True) as srv:
        peer = await RawPeer.open(f"ws://127.0.0.1:{srv.port}")
        await peer.close()
    async with relay.serve(host="0.0.0.0", port=0, store="memory://", secret=SECRET) as srv:
        assert srv.port > 0


async def test_a_user_id_with_a_slash_cannot_share_another_users_client_id(
    server: relay.Server,
) -> None:
    # Users "svc" and "svc/eu" (two services). "svc" claiming "eu/w1" and "svc/eu"
    # claiming "w1" were both stamped "svc/eu/w1": Run ownership goes by client id, so
    # "svc" could stream into (and end) the Run "svc/eu"'s agent had started.
    owner, welcome = await dial(
        server.url, token("svc/eu", {"*": ["agent"]}), role="agent", client_id="w1"
    )
    other, welcome2 = await dial(
        server.url, token("svc", {"*": ["agent"]}), role="agent", client_id="eu/w1"
    )
    assert welcome["client_id"] != welcome2["client_id"]
    assert welcome["client_id"] == "svc%2Feu/w1"
    assert welcome2["client_id"] == "svc/eu/w1"
    client, _ = await dial(server.url, token("alice", {"*": ALL}))
    await client.attach("trip-6")
    run_id = new_id()
    await client.publish("trip-6", prompt(run_id))
    await owner.attach("trip-6")
    assert (await owner.publish("trip-6", run_status(run_id, "active")))["type"] == "ack"
    await other.attach("trip-6")
    taken = await other.publish("trip-6", run_status(run_id, "complete"))
    assert taken["type"] == "error" and taken["error"]["code"] == "UNAUTHORIZED"
    for peer in (owner, other, client):
        await peer.close()


@pytest.mark.parametrize(
    ("make", "code", "close"),
    [
        (lambda: "garbage", "UNAUTHORIZED", 4001),
        (lambda: None, "UNAUTHORIZED", 4001),
        (lambda: token(ttl=-10), "TOKEN_EXPIRED", 4003),
        (lambda: token(), "PROTOCOL_ERROR", 4002),
    ],
    ids=["forged", "missing", "expired", "good"],
)
async def test_a_connection_that_never_says_hello_is_answered_and_closed(
    make: Any, code: str, close: int
) -> None:
    # Before, a socket with a refused token (or none) that sent no hello stayed open for
    # ever (pings answered): enough of them would take every file descriptor.
    async with relay.serve(port=0, store="memory://", secret=SECRET, hello_timeout=0.5) as srv:
        tok = make()
        headers = {"Authorization": f"Bearer {tok}"} if tok else None
        ws = await connect(srv.url, additional_headers=headers)
        peer = RawPeer(ws)
        error = await peer.recv(timeout=5)
        assert error["type"] == "error" and error["error"]["code"] == code
        assert "req" not in error
        assert await closed_with(peer) == close


async def test_a_repeated_id_is_acknowledged_only_to_a_sender_with_the_right(
    server: relay.Server,
) -> None:
    owner, _ = await dial(server.url, token("alice", {"*": ALL}))
    await owner.attach("trip-7")
    run_id = new_id()
    first = prompt(run_id)
    assert (await owner.publish("trip-7", first))["type"] == "ack"
    viewer, _ = await dial(server.url, token("grandma", {"*": ["subscribe"]}))
    await viewer.attach("trip-7")
    # Before: "ack", duplicate, for a prompt the viewer may not send.
    repeat = await viewer.publish("trip-7", first)
    assert repeat["type"] == "error" and repeat["error"]["code"] == "UNAUTHORIZED"
    assert repeat["error"]["details"]["needs"] == "publish"
    # A client repeating the id of an agent's entry: agents only.
    agent, _ = await dial(server.url, token("svc", {"*": ["agent"]}), role="agent")
    await agent.attach("trip-7")
    started = run_status(run_id, "active")
    assert (await agent.publish("trip-7", started))["type"] == "ack"
    forged = await owner.publish("trip-7", started)
    assert forged["type"] == "error" and forged["error"]["code"] == "UNAUTHORIZED"
    # Retries by those who may send them are still duplicates.
    again = await owner.publish("trip-7", first)
    assert again["type"] == "ack" and again["duplicate"] is True
    assert (await agent.publish("trip-7", started))["duplicate"] is True
    for peer in (owner, viewer, agent):
        await peer.close()


MAX_TOKEN = 32 * 1024  # RelayOptions.max_token_bytes


@pytest.mark.parametrize("query", [False, True], ids=["header", "query"])
async def test_a_large_token_is_accepted_up_to_the_limit_and_refused_clearly_past_it(
    server: relay.Server, query: bool
) -> None:
    # Before, a token over about 8 KiB got websockets' plain-text 414 / 431 instead of a
    # handshake: no error frame, no close code, and the SDKs retried for ever.
    sessions = {"trip-*": ALL}
    under = sized_token(MAX_TOKEN, secret=SECRET, sessions=sessions)
    peer, first = await dial(server.url, under, query=query)
    assert first["type"] == "welcome" and first["user_id"] == "alice"
    await peer.attach("trip-1")
    await peer.close()
    # Just past the limit (checked by the token's size), and far past it (the line that
    # carries it is too long to read whole): the same refusal, as any refused token's.
    for size in (MAX_TOKEN + 3, 10 * MAX_TOKEN):
        over = sized_token(size, secret=SECRET, sessions=sessions)
        assert len(over) > MAX_TOKEN
        peer, first = await dial(server.url, over, query=query)
        assert first["type"] == "error" and first["req"] == 1, first
        error = first["error"]
        assert error["code"] == "UNAUTHORIZED", error
        assert error["details"]["reason"] == "too_large"
        assert error["details"]["limit"] == MAX_TOKEN
        if size == MAX_TOKEN + 3:
            assert error["details"]["size"] == len(over)
        else:  # the size of the request line or header line that carried it
            assert error["details"]["size"] > len(over)
        assert await closed_with(peer) == 4001


async def test_the_token_limit_is_an_option() -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET, max_token_bytes=2000) as srv:
        fits = sized_token(2000, secret=SECRET, sessions={"*": ALL})
        peer, first = await dial(srv.url, fits)
        assert first["type"] == "welcome"
        await peer.close()
        over = sized_token(2003, secret=SECRET, sessions={"*": ALL})
        peer, first = await dial(srv.url, over)
        details = first["error"]["details"]
        assert details == {"reason": "too_large", "size": len(over), "limit": 2000}
        assert await closed_with(peer) == 4001


async def test_a_publish_only_token_publishes_without_attaching_and_reads_nothing(
    server: relay.Server,
) -> None:
    # Before, publishing needed an attach and attaching needs 'subscribe': a token with
    # only 'publish' (a back end that posts prompts) could not publish at all.
    reader, _ = await dial(server.url, token("alice", {"*": ALL}))
    await reader.attach("trip-8")
    run_id = new_id()
    assert (await reader.publish("trip-8", prompt(run_id, text="first")))["serial"] == 1
    poster, _ = await dial(server.url, token("alice", {"trip-*": ["publish"]}), client_id="hook")
    refused = await poster.request({"type": "attach", "session_id": "trip-8"})
    assert refused["error"]["code"] == "UNAUTHORIZED"
    ack = await poster.publish("trip-8", prompt(text="from the hook"))
    assert ack["type"] == "ack" and ack["serial"] == 2, ack
    stored = (await reader.entries(2))[-1]
    assert stored["message"]["parts"][0]["text"] == "from the hook"
    assert (stored["user_id"], stored["client_id"]) == ("alice", "alice/hook")
    # Its rights are still checked entry by entry, and a retry is a duplicate.
    steering = await poster.publish("trip-8", steer(run_id, "faster"))
    assert steering["error"]["code"] == "UNAUTHORIZED"
    entry = prompt(text="again")
    assert (await poster.publish("trip-8", entry))["duplicate"] is False
    assert (await poster.publish("trip-8", entry))["duplicate"] is True
    # It reads nothing: no history, no deliveries (its next frame is the reply it asked for).
    history = await poster.request({"type": "history", "session_id": "trip-8", "before": 10})
    assert history["error"]["code"] == "NOT_ATTACHED"
    await reader.publish("trip-8", prompt(text="not for the hook"))
    assert (await poster.request({"type": "detach", "session_id": "trip-8"}))["type"] == "error"
    assert poster.inbox == []
    # A session its token does not cover at all is refused as before.
    elsewhere = await poster.publish("work-1", prompt())
    assert elsewhere["error"]["code"] == "NOT_ATTACHED"
    assert poster.inbox == []
    await poster.close()
    await reader.close()


@pytest.mark.parametrize("role", ["client", "agent"])
@pytest.mark.parametrize("when", ["before", "after"])
async def test_only_an_agent_connection_keeps_an_agents_client_id_present(
    role: str, when: str
) -> None:
    # The same user with user rights, claiming the agent's client id: before, its
    # connection counted as the agent's presence, so the Run never ended AGENT_LOST.
    async with relay.serve(port=0, store="memory://", secret=SECRET, agent_grace=0.3) as srv:
        client, _ = await dial(srv.url, token("alice", {"*": ALL}))
        await client.attach("trip-9")
        run_id = new_id()
        await client.publish("trip-9", prompt(run_id))
        agent, welcome = await dial(
            srv.url, token("svc", {"*": ["agent"]}), role="agent", client_id="w1"
        )
        await agent.attach("trip-9")
        assert (await agent.publish("trip-9", run_status(run_id, "active")))["type"] == "ack"
        users = token("svc", {"*": ALL})
        impostor: RawPeer | None = None
        if when == "before":
            impostor, same = await dial(srv.url, users, role=role, client_id="w1")
            assert same["client_id"] == welcome["client_id"] == "svc/w1"
        agent.ws.transport.abort()
        if when == "after":
            with anyio.fail_after(5):
                while any(p.sender.client_id == "svc/w1" for p in srv.hub.peers):
                    await anyio.sleep(0.01)
            impostor, same = await dial(srv.url, users, role=role, client_id="w1")
            assert same["client_id"] == "svc/w1"
        with anyio.fail_after(5):
            while True:
                [entry] = await client.entries(1)
                if entry["kind"] == "run" and entry["status"] != "active":
                    break
        assert entry["status"] == "error" and entry["error"]["code"] == "AGENT_LOST", entry
        assert impostor is not None
        await impostor.close()
        await client.close()


async def test_an_agent_connection_coming_back_still_keeps_its_run() -> None:
    async with relay.serve(port=0, store="memory://", secret=SECRET, agent_grace=0.3) as srv:
        client, _ = await dial(srv.url, token("alice", {"*": ALL}))
        await client.attach("trip-9")
        run_id = new_id()
        await client.publish("trip-9", prompt(run_id))
        agents = token("svc", {"trip-*": ["agent"]})
        agent, _ = await dial(srv.url, agents, role="agent", client_id="w1")
        await agent.attach("trip-9")
        assert (await agent.publish("trip-9", run_status(run_id, "active")))["type"] == "ack"
        agent.ws.transport.abort()
        back, _ = await dial(srv.url, agents, role="agent", client_id="w1")
        await anyio.sleep(0.6)  # past the grace period: nothing may happen
        await back.attach("trip-9")
        assert (await back.publish("trip-9", run_status(run_id, "complete")))["type"] == "ack"
        await back.close()
        await client.close()
