"""Retrieval server: a tool call's cost over the prefilter alone, whole sessions, calls
per core.

    .venv/bin/python -m benchmarks.bench_retrieval_server [--chunks 10000] [--rounds 300]
        [--calls 2000] [--clients 8] [--reference-src DIR] [--keep]

Starts its own PostgreSQL 18 + pgvector with ``--chunks`` chunks. The vectors are clustered
(12 topics), and 10 % of the chunks are readable by the caller. It runs the real
``fgentic-governance retrieval-server`` process, and an embeddings stub in this process that
answers each query with its deterministic unit vector (``tests.support.vectors``), built and
serialised once per distinct input and served as bytes afterwards (every query is sent through
each server once before the rounds, so the rounds see no first answers). It prints figures and
never asserts timings.

1. **Added latency.** A ``tools/call`` (k = 5) through the server, sent as the runtime sends
   it: raw JSON-RPC over a kept-alive connection, with the carrier and
   ``MCP-Protocol-Version``. The baseline is ``prefilter.search`` for the same query, with
   the same k and projection, called directly on an asyncpg connection with the vector
   already made. The two are interleaved, one of each per round. The stub's own round trip is
   shown too, because the server spends one per call and it is part of what is added. The
   stub and the client share this process's event loop. Target: at most 2 ms added at p50.
   The provider's own answer time is not the server's: each call's figure is also printed net
   of the stub's handler time during that call (reading the request, finding or building the
   answer; the stub's HTTP stack is not taken out, it stands in for the network hop).
   With ``--reference-src`` (the ``src`` of another checkout, e.g. ``git worktree add
   /tmp/before HEAD~1``), a second server process runs that code over the same corpus and
   stub, and its calls join the same rounds: before and after in one run, on one load. The
   two servers get the same requests (a tool call and a whole session each per round) and
   swap places every other round: a server that sat idle longer, or always came second,
   answered ~1 ms slower here with the very same code (an A/A run, 2026-12-07).
2. **A whole session per turn.** kagent's runtime opens one MCP session per turn:
   ``initialize``, ``notifications/initialized``, ``tools/list``, ``tools/call``. The server is
   stateless, so there is no close.
3. **Calls per second per core.** ``--clients`` concurrent clients make ``--calls`` tool calls.
   The figure is calls per CPU-second of the server process, read from ``/proc/<pid>/stat``
   (its CPU, not the stub's or the database's).
4. **The MCP layer alone, before and after in one run.** In this process, one admitted
   ``tools/call`` answered by ``retrievalserver.protocol.Protocol`` (our own dispatch)
   and by the SDK's stateless Streamable HTTP transport it replaced
   (``tests.support.mcp_transport``), interleaved, over a search that returns five fixed hits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import ClientSession, ClientTimeout, DummyCookieJar, TCPConnector

from benchmarks.common import (
    Mixture,
    Table,
    banner,
    command_line,
    local_postgres,
    machine,
    scratch_dir,
    time_async,
)
from fgentic_governance import contract
from fgentic_governance.contract import VerifiedIdentity
from fgentic_governance.retrieval.search import corpus, ingest, prefilter
from fgentic_governance.retrievalserver import protocol, tool
from tests.support.mcp_transport import SdkProtocol
from tests.support.projector import AGENT, ALICE, room_context
from tests.support.retrieval_server import TOOL, QueryEmbeddings, retrieval_server
from tests.support.vectors import unit_vector

VERSION = "2025-11-25"
TOPICS = 12
ALICE_KEY = {"kind": "matrix", "principal": ALICE}
SWAP = {"call": "before", "before": "call", "session": "session before",
        "session before": "session"}
"""Every other round the two servers swap places (``--reference-src``)."""
BOB_KEY = {"kind": "matrix", "principal": "@bob:org-a.example"}


async def load(dsn: str, chunks: int) -> list[str]:
    """The corpus (10 % Alice's) and the query texts; each query's stub vector is near a topic
    because the stub answers ``unit_vector(text)``, so queries are chunk texts themselves."""
    rng = random.Random(5)
    topics = Mixture.draw(rng, topics=TOPICS, spread=0.15,
                          dimensions=corpus.EMBEDDING_DIMENSIONS)
    rows, vectors = [], []
    for i in range(1, chunks + 1):
        reader = ALICE_KEY if i % 10 == 0 else BOB_KEY
        rows.append(ingest.Row(i, f"chunk {i}", f"docs/{i}.md", {
            "classification": "public", "allowed_principals": [reader], "allowed_groups": []},
            None))
        vectors.append(topics.point(rng))
    conn = await asyncpg.connect(dsn)
    try:
        await corpus.create_chunks_table(conn, indexes=False)
        for start in range(0, len(rows), 1000):
            await ingest.load(conn, rows[start:start + 1000], vectors[start:start + 1000])
        await corpus.create_chunk_indexes(conn)
        await conn.execute("ANALYZE chunks")
    finally:
        await conn.close()
    return [f"question {i} about topic {i % TOPICS}" for i in range(64)]


def carrier() -> str:
    return contract.encode_identity(
        contract.stamp_matrix(room_context(), agent=AGENT, iat=int(time.time())))


def headers(value: str, *, version: bool = True) -> dict[str, str]:
    out = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "x-fgentic-identity": value}
    if version:
        out["mcp-protocol-version"] = VERSION
    return out


def rpc(method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if not method.startswith("notifications/"):
        body["id"] = uuid.uuid4().hex[:8]
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


async def post(http: ClientSession, url: str, body: bytes, hdrs: dict[str, str]) -> None:
    async with http.post(url, data=body, headers=hdrs) as answer:
        await answer.read()
        if answer.status not in (200, 202):
            raise RuntimeError(f"HTTP {answer.status}")


class FixedHits:
    """The tool's argument checks and result over five fixed hits: no embedding, no store."""

    async def call(self, _identity: VerifiedIdentity, arguments: Any) -> dict[str, Any]:
        query = tool.parse_arguments(arguments)
        return tool.result([prefilter.Hit(i, f"chunk {i} " * 20, f"docs/{i}.md", i / 10)
                            for i in range(1, query.k + 1)])


async def mcp_layer(identity: VerifiedIdentity, rounds: int) -> None:
    """Section 4: the lean path and the SDK's transport, interleaved in one process."""
    lean = protocol.Protocol(TOOL, FixedHits())  # type: ignore[arg-type]
    sdk = SdkProtocol(protocol.build_server(TOOL, FixedHits()))  # type: ignore[arg-type]
    hdrs = [(k.encode(), v.encode()) for k, v in headers("", version=True).items()
            if k != "x-fgentic-identity"]
    body = rpc("tools/call", {"name": TOOL, "arguments": {"query": "q", "k": 5}})
    figures: dict[str, list[float]] = {"lean": [], "sdk": []}
    async with lean.running(), sdk.running():
        steps = {name: (lambda p=p: p.answer("/mcp", hdrs, body, identity))
                 for name, p in (("lean", lean), ("sdk", sdk))}
        for step in steps.values():
            await time_async(step, 20, warmup=20)
        for _ in range(rounds):
            for name, step in steps.items():
                figures[name] += await time_async(step, 1, warmup=0)
    table = Table("MCP layer, one admitted tools/call (k = 5), in process, interleaved")
    sdk_stats = table.add("the SDK's stateless Streamable HTTP transport (before)",
                          figures["sdk"])
    lean_stats = table.add("our own dispatch (Protocol, after)", figures["lean"],
                           baseline=figures["sdk"])
    table.print()
    print(f"saved at p50: {(sdk_stats.median - lean_stats.median) * 1e3:.2f} ms per request")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(args: argparse.Namespace, work: Path) -> None:
    with local_postgres(work) as postgres:
        dsn = await postgres.create_database("bench_retrieval_server", extensions=("vector",))
        banner(f"loading {args.chunks} chunks")
        queries = await load(dsn, args.chunks)
        agent = f"{AGENT.namespace}/{AGENT.name}"
        async with QueryEmbeddings() as embeddings, \
                retrieval_server(work, dsn, embeddings.url,  # type: ignore[attr-defined]
                                 agent=agent) as server, \
                contextlib.AsyncExitStack() as stack:
            reference = None
            if args.reference_src is not None:
                (work / "reference").mkdir()
                reference = await stack.enter_async_context(retrieval_server(
                    work / "reference", dsn, embeddings.url,  # type: ignore[attr-defined]
                    agent=agent, env={"PYTHONPATH": str(args.reference_src.resolve())}))
            await measure(args, dsn, queries, embeddings, server, reference=reference)


async def measure(args: argparse.Namespace, dsn: str, queries: list[str],
                  embeddings: QueryEmbeddings, server: Any, *, reference: Any = None) -> None:
    value = carrier()
    identity = contract.decode_verified_identity([value], now=int(time.time()), agent=AGENT)
    vectors = {q: unit_vector(q) for q in queries}
    conn = await asyncpg.connect(dsn)
    cycle = iter(range(1 << 30))
    session = ClientSession(timeout=ClientTimeout(total=30), cookie_jar=DummyCookieJar(),
                            connector=TCPConnector(limit=64))
    try:
        def query() -> str:
            return queries[next(cycle) % len(queries)]

        async def direct() -> None:
            await prefilter.search(conn, identity, vectors[query()], 5)

        async def call(url: str = server.url) -> None:
            await post(session, url, rpc("tools/call", {
                "name": TOOL, "arguments": {"query": query(), "k": 5}}), headers(value))

        async def embed() -> None:
            async with session.post(embeddings.url, json={"input": [query()], "model": "m",
                                                          "encoding_format": "float"}) as r:
                await r.read()

        async def whole_session(url: str = server.url) -> None:
            await post(session, url, rpc("initialize", {
                "protocolVersion": VERSION, "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}), headers(value, version=False))
            await post(session, url, rpc("notifications/initialized"), headers(value))
            await post(session, url, rpc("tools/list"), headers(value))
            await call(url)

        steps: dict[str, Callable[[], Awaitable[None]]] = {"direct": direct, "call": call}
        if reference is not None:
            steps["before"] = lambda: call(reference.url)
        steps.update(embed=embed, session=whole_session)
        if reference is not None:
            steps["session before"] = lambda: whole_session(reference.url)
        figures: dict[str, list[float]] = {name: [] for name in steps}
        answering: dict[str, list[float]] = {name: [] for name in steps}
        for name in ("call", "before", "embed"):  # the stub's answer to every query, as asked
            if name in steps:
                await time_async(steps[name], len(queries), warmup=0)
        for step in steps.values():  # warm every path
            await time_async(step, 5, warmup=5)
        # Without a reference server there is nothing to swap with (02010be swapped anyway).
        swapped = [SWAP.get(name, name) if reference is not None else name for name in steps]
        for round_ in range(args.rounds):  # interleaved, one of each per round
            for name in (swapped if round_ % 2 else steps):
                held = embeddings.handler_seconds
                figures[name] += await time_async(steps[name], 1, warmup=0)
                answering[name].append(embeddings.handler_seconds - held)
        report(args, figures, answering)

        for name, served in (("", server), (" (reference)", reference)):
            if served is not None:
                banner(f"throughput{name}: {args.calls} calls from {args.clients} clients")
                await throughput(args, served, lambda url=served.url: call(url))

        banner("the MCP layer alone: before and after")
        await mcp_layer(identity, args.rounds)
    finally:
        await session.close()
        await conn.close()


def net(figures: dict[str, list[float]], answering: dict[str, list[float]],
        name: str) -> list[float]:
    """Each of ``name``'s samples less the stub's handler time within it (same round)."""
    return [took - stub for took, stub in zip(figures[name], answering[name], strict=True)]


def report(args: argparse.Namespace, figures: dict[str, list[float]],
           answering: dict[str, list[float]]) -> None:
    table = Table("Retrieval server, one tool call (k = 5), "
                  f"{args.chunks} clustered chunks, 10 % visible")
    table.add("prefilter.search, direct (baseline)", figures["direct"])
    added = table.add("tools/call through the server", figures["call"],
                      baseline=figures["direct"])
    table.add("  of which: the embeddings stub round trip", figures["embed"])
    table.add("  of which: the stub's handler (the provider's own time)", answering["call"])
    added_net = table.add("tools/call less the stub's handler time", net(figures, answering,
                                                                          "call"),
                          baseline=figures["direct"])
    table.add("whole session (initialize .. tools/call)", figures["session"],
              baseline=figures["direct"])
    before = (table.add(f"tools/call through the reference server ({args.reference_src})",
                        figures["before"], baseline=figures["direct"])
              if "before" in figures else None)
    before_net = (table.add("  the same less the stub's handler time",
                            net(figures, answering, "before"), baseline=figures["direct"])
                  if "before" in figures else None)
    if "session before" in figures:
        table.add("whole session through the reference server", figures["session before"],
                  baseline=figures["direct"])
    table.print()
    base = sorted(figures["direct"])[len(figures["direct"]) // 2]
    stub = sorted(answering["call"])[len(answering["call"]) // 2]
    print(f"added at p50: {(added.median - base) * 1e3:+.2f} ms (target <= +2 ms)")
    print(f"added at p50 net of the provider's own answer time (each call less the stub "
          f"handler's time in it, p50 {stub * 1e3:.3f} ms): "
          f"{(added_net.median - base) * 1e3:+.2f} ms")
    if before is not None and before_net is not None:
        print(f"added at p50 by the reference server: {(before.median - base) * 1e3:+.2f} ms; "
              f"net of the provider's own answer time: "
              f"{(before_net.median - base) * 1e3:+.2f} ms")


async def throughput(args: argparse.Namespace, server: Any,
                     call: Callable[[], Awaitable[None]]) -> None:
    pending = iter(range(args.calls))
    before, started = cpu_seconds(server.process.pid), time.perf_counter()

    async def client() -> None:
        for _ in pending:
            await call()

    await asyncio.gather(*(client() for _ in range(args.clients)))
    wall = time.perf_counter() - started
    used = cpu_seconds(server.process.pid) - before
    print(f"{args.calls / wall:.0f} calls/s wall; server CPU {used:.2f} s: "
          f"{args.calls / used:.0f} calls per CPU-second (per core)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--reference-src", type=Path, default=None,
                        help="the src directory of another checkout to run beside this one")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    for name, low, high in (("chunks", 100, 200_000), ("rounds", 10, 10_000),
                            ("calls", 10, 100_000), ("clients", 1, 64)):
        if not low <= getattr(args, name) <= high:
            parser.error(f"--{name} must be {low}..{high}")
    print(command_line())
    print(machine())
    with scratch_dir("retrieval-server", keep=args.keep) as work:
        asyncio.run(run(args, work))


if __name__ == "__main__":
    main()
