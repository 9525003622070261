"""What a model adapter costs: relay and agent CPU per delivered token, adapter against plain text.

    .venv/bin/python bench/adapters.py --sessions 100 --rate 50 --warmup 10 --duration 20

Two modes, measured one after the other in the same run, each with a fresh
relay (``python -m relay --store memory://``) and a fresh agent process (a
worker, ``agent_side.Agent``, one Run per session):

* ``plain``: the worker's ``run.pipe()`` reads ``<microseconds>`` text tokens
  from an async generator at ``--rate`` tokens/s per session;
* ``adapter``: the worker's ``run.pipe()`` reads ``openai_chat_model``, the
  OpenAI Chat Completions adapter, streaming from a fake provider (its own
  process) that sends the same tokens as chat completion chunks over HTTP at
  ``--rate`` per session.

Subscribers (in this process, one raw connection per session) count the
tokens the relay delivers inside the measuring window. CPU is read with
psutil from the relay's and the agent's processes over the same window. The
figures are CPU microseconds per delivered token and the adapter/plain ratio
of each: the target is an adapter ratio of at most 1.15 for the agent. A
last line splits the adapter's time per event, measured in this process:
the OpenAI SDK building its event object, runwire's conversion, and the
checkpoint after each chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from peers import RawConn, Tally, entry, raise_nofile, tokens  # noqa: E402
from run import RelayProcess  # noqa: E402

# ---------------------------------------------------------------- provider --


def _chunk(content: str) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def _provider(
    port_out: multiprocessing.connection.Connection, limit: int, rate: float
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            async for token in tokens(limit, rate, asyncio.Event()):
                writer.write(_chunk(token))
                await writer.drain()
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    port_out.send(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def provider_main(port_out: multiprocessing.connection.Connection, limit: int, rate: float) -> None:
    """The fake provider's process: chat completion chunks at ``rate`` per connection."""
    raise_nofile()
    asyncio.run(_provider(port_out, limit, rate))


# ------------------------------------------------------------------- agent --


def agent_main(url: str, mode: str, provider: str | None, limit: int, rate: float) -> None:
    """The agent's process: a worker answering every Run in ``mode``."""
    raise_nofile()
    asyncio.run(_agent(url, provider, limit, rate))


async def _agent(url: str, provider: str | None, limit: int, rate: float) -> None:
    from openai import AsyncOpenAI

    import agent_side
    from agent_side.models.openai_chat import openai_chat_model

    agent = agent_side.Agent(url)
    llm = None
    if provider is not None:
        client = AsyncOpenAI(api_key="bench", base_url=f"{provider}/v1", max_retries=0)
        llm = openai_chat_model(client, "bench")

    @agent.on_run
    async def handle(run: agent_side.Run) -> None:
        if llm is None:
            await run.pipe(tokens(limit, rate, asyncio.Event()))
        else:
            await run.pipe(llm(run.history(), run.abort_signal))

    await agent.serve()


# --------------------------------------------------------------- measuring --


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


async def _measure(
    url: str, agent_pid: int, relay_pid: int, provider_pid: int | None, args: argparse.Namespace
) -> dict[str, Any]:
    tally = Tally()
    conns: list[RawConn] = []
    for i in range(args.sessions):
        conn = await RawConn.open(url, tally, on_deliver=tally.on_deliver)
        sid = f"s{i}"
        await conn.attach(sid)
        message = {"id": f"p{i}", "role": "user", "parts": [{"type": "text", "text": "go"}]}
        await conn.publish(
            sid, entry("message", f"e{i}", f"r{i}", intent="prompt", message=message)
        )
        conns.append(conn)
    await asyncio.sleep(args.warmup)
    relay, agent = psutil.Process(relay_pid), psutil.Process(agent_pid)
    provider = psutil.Process(provider_pid) if provider_pid is not None else None
    cpu0 = (_cpu(relay), _cpu(agent), _cpu(provider) if provider else 0.0)
    start = time.monotonic()
    tally.measuring = True
    await asyncio.sleep(args.duration)
    tally.measuring = False
    took = time.monotonic() - start
    cpu1 = (_cpu(relay), _cpu(agent), _cpu(provider) if provider else 0.0)
    for conn in conns:
        await conn.close()
    if not tally.tokens:
        raise RuntimeError("no token was delivered: see the agent's output above")
    n = tally.tokens
    return {
        "tokens": tally.tokens,
        "tokens_per_s": tally.tokens / took,
        "tokens_per_frame": tally.tokens / max(tally.frames, 1),
        "relay_us_per_token": (cpu1[0] - cpu0[0]) / n * 1e6,
        "agent_us_per_token": (cpu1[1] - cpu0[1]) / n * 1e6,
        "relay_busy_pct": (cpu1[0] - cpu0[0]) / took * 100,
        "agent_busy_pct": (cpu1[1] - cpu0[1]) / took * 100,
        "provider_busy_pct": (cpu1[2] - cpu0[2]) / took * 100,
        "errors": tally.errors,
    }


def measure_mode(mode: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One mode end to end: relay, provider (adapter only), agent, subscribers."""
    limit = int(args.rate * (args.warmup + args.duration + 30))
    ctx = multiprocessing.get_context("spawn")
    relay = RelayProcess("memory", workdir, f"adapters-{mode}")
    procs: list[multiprocessing.process.BaseProcess] = []
    try:
        provider = None
        provider_pid = None
        if mode == "adapter":
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=provider_main, args=(send, limit, args.rate), daemon=True)
            proc.start()
            procs.append(proc)
            provider = f"http://127.0.0.1:{recv.recv()}"
            provider_pid = proc.pid
        agent = ctx.Process(
            target=agent_main, args=(relay.url, mode, provider, limit, args.rate), daemon=True
        )
        agent.start()
        procs.append(agent)
        assert agent.pid is not None
        return asyncio.run(_measure(relay.url, agent.pid, relay.pid, provider_pid, args))
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(5)
        relay.stop()


def split(events: int = 20000) -> dict[str, float]:
    """Where the adapter's time per event goes, in this process: microseconds per event.

    ``sdk_construct``: the OpenAI SDK turning a decoded event into a
    ``ChatCompletionChunk``; ``convert``: ``chat_chunks`` turning those into UI
    chunks; ``checkpoint``: the yield to the event loop after each chunk.
    """
    import anyio
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk

    from agent_side.models.openai_chat import chat_chunks

    raw = orjson.loads(_chunk("<1700000000000>")[6:])
    start = time.perf_counter()
    objs = [construct_type(type_=ChatCompletionChunk, value=dict(raw)) for _ in range(events)]
    construct = time.perf_counter() - start

    async def source() -> Any:
        for obj in objs:
            yield obj

    async def convert() -> None:
        async for _ in chat_chunks(source()):
            pass

    async def checkpoints() -> None:
        for _ in range(events):
            await anyio.lowlevel.checkpoint()

    start = time.perf_counter()
    asyncio.run(convert())
    converted = time.perf_counter() - start
    start = time.perf_counter()
    asyncio.run(checkpoints())
    checked = time.perf_counter() - start
    return {
        "sdk_construct": construct / events * 1e6,
        "convert": converted / events * 1e6,
        "checkpoint": checked / events * 1e6,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="tokens/s per session")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)
    raise_nofile()
    with tempfile.TemporaryDirectory() as tmp:
        results = {mode: measure_mode(mode, args, Path(tmp)) for mode in ("plain", "adapter")}
    plain, adapter = results["plain"], results["adapter"]
    results["ratio"] = {
        key: adapter[key] / plain[key] if plain[key] else float("nan")
        for key in ("relay_us_per_token", "agent_us_per_token")
    }
    print(f"{args.sessions} sessions at {args.rate:g} tokens/s, {args.duration:g} s measured")
    print(f"{'':22}{'plain':>10}{'adapter':>10}{'ratio':>8}")
    for key in ("tokens_per_s", "relay_us_per_token", "agent_us_per_token"):
        ratio = results["ratio"].get(key)
        tail = f"{ratio:8.2f}" if ratio is not None else ""
        print(f"{key:22}{plain[key]:10.1f}{adapter[key]:10.1f}{tail}")
    for key in ("tokens_per_frame", "relay_busy_pct", "agent_busy_pct", "provider_busy_pct"):
        print(f"{key:22}{plain[key]:10.1f}{adapter[key]:10.1f}")
    results["split_us_per_event"] = parts = split()
    print("adapter time per event (us): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
