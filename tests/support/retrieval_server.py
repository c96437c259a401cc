"""The retrieval server as a process (``fgentic-governance retrieval-server``, the real
CLI) over a real corpus, with an embeddings stub standing for the provider.

``QueryEmbeddings`` answers ``POST /v1/embeddings`` with ``unit_vector(text)`` (float lists, as
the server asks), so a chunk stored with the vector of its own text ranks first for a query of
that text. ``fail`` makes it answer 500 with a body that quotes the input (what a provider's
error may do); ``vector`` makes it answer one chosen vector for every text. ``load_corpus``
writes chunks whose ACL metadata the caller chooses.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import ClientSession, ClientTimeout, DummyCookieJar, web
from multidict import CIMultiDict

from fgentic_devenv import free_port, http_ok, log_tail, terminate, wait_until
from fgentic_devenv.postgres import LocalPostgres
from fgentic_devenv.up import spawn_cli
from fgentic_governance.retrieval.search import corpus, ingest
from tests.support.stubs import LoopbackServer
from tests.support.vectors import DIMENSIONS, unit_vector

TOOL = "search_knowledge"
ANSWERS_KEPT = 1024
"""Distinct inputs whose answers the embeddings stub keeps (17 KB each at 768 dimensions)."""


class QueryEmbeddings(LoopbackServer):
    def __init__(self, dimensions: int = DIMENSIONS) -> None:
        super().__init__()
        self.dimensions = dimensions
        self.fail = False
        self.trickle = False
        """Answer in 512-byte pieces (a provider's answer arrives in many reads)."""
        self.vector: list[float] | None = None
        """Answer every text with this vector instead (a provider's wrong answer)."""
        self.answers: OrderedDict[tuple[int, str, tuple[str, ...]], bytes] = OrderedDict()
        """Each distinct input's serialised answer, most recently used last (at most
        ``ANSWERS_KEPT``): a provider's answer time is not the server's, so the stub builds the
        768 floats and their JSON once per input and serves the bytes afterwards."""
        self.handler_seconds = 0.0
        """Time spent in the handler so far (reading the request, finding or building the
        answer): the provider's own answer time, which a benchmark may take out of its figure."""

    @property
    def url(self) -> str:
        return self.base_url + "/v1/embeddings"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self._embeddings)

    async def _embeddings(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await self._answer(request)
        finally:
            self.handler_seconds += time.perf_counter() - started

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if self.fail:  # a provider error that quotes the input
            return web.json_response({"error": {"message": f"cannot embed {texts[0]!r}"}},
                                     status=500)
        answer = web.Response(body=self._serialised(body.get("model"), texts),
                              content_type="application/json", charset="utf-8")
        if not self.trickle:
            return answer
        assert isinstance(answer.body, bytes)
        stream = web.StreamResponse(headers={"Content-Type": "application/json"})
        await stream.prepare(request)
        for start in range(0, len(answer.body), 512):
            await stream.write(answer.body[start:start + 512])
            await asyncio.sleep(0)
        await stream.write_eof()
        return stream  # type: ignore[return-value]

    def _serialised(self, model: Any, texts: list[Any]) -> bytes:
        """The answer's bytes, exactly as ``web.json_response`` wrote them before the cache."""
        if self.vector is not None:  # a chosen wrong answer: tests change it, never kept
            return self._build(model, texts)
        key = (self.dimensions, json.dumps(model), tuple(str(text) for text in texts))
        if (kept := self.answers.get(key)) is not None:
            self.answers.move_to_end(key)
            return kept
        answer = self.answers[key] = self._build(model, texts)
        if len(self.answers) > ANSWERS_KEPT:
            self.answers.popitem(last=False)
        return answer

    def _build(self, model: Any, texts: list[Any]) -> bytes:
        return json.dumps({"object": "list", "model": model, "data": [
            {"object": "embedding", "index": i,
             "embedding": self.vector or unit_vector(str(text), self.dimensions)}
            for i, text in enumerate(texts)]}).encode()


def _method(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message.get("method") if isinstance(message, dict) else None


class HeaderTap(LoopbackServer):
    """A recording hop in front of the real server, for tests only: every request it receives
    (every header line, repeats kept) is recorded, then sent on unchanged (hop-by-hop headers
    aside) to ``target``, whose answer is returned as it came. It shows what the gateway
    delivered to the MCP endpoint, which the server, by design, never reports."""

    HOP = frozenset({"host", "content-length", "transfer-encoding", "connection"})
    # The tap must not be the limit it measures: aiohttp's default field bound is 8,190 bytes,
    # below an 8,192-byte carrier.
    handler_args = {"max_field_size": 65536, "max_line_size": 65536}

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.answers: list[tuple[str | None, int, bytes]] = []  # (JSON-RPC method, status, body)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._forward)

    async def _forward(self, request: web.Request) -> web.Response:
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in self.HOP)
        async with ClientSession(timeout=ClientTimeout(total=30),
                                 cookie_jar=DummyCookieJar(), auto_decompress=False) as http, \
                http.request(request.method, self.target + request.raw_path, headers=headers,
                             data=await request.read(), skip_auto_headers=["User-Agent"],
                             allow_redirects=False) as answer:
            body = await answer.read()
            self.answers.append((_method(await request.read()), answer.status, body))
            kept = {k: v for k, v in answer.headers.items() if k.lower() == "content-type"}
            return web.Response(status=answer.status, body=body, headers=kept)

    def mcp_requests(self, since: int = 0) -> list[tuple[str, Any]]:
        """(JSON-RPC method, recorded request) of every MCP POST from the ``since``-th request
        received on (an index into ``requests``, GETs included), in arrival order."""
        found = []
        for r in self.requests[since:]:
            if r.method == "POST" and r.body:
                found.append((json.loads(r.body).get("method"), r))
        return found


@dataclass(frozen=True)
class Chunk:
    id: int
    text: str
    source: str
    metadata: Mapping[str, Any]


async def load_corpus(dsn: str, chunks: Sequence[Chunk], *,
                      dimensions: int = DIMENSIONS) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await corpus.create_chunks_table(conn, dimensions=dimensions)
        await conn.executemany(
            "INSERT INTO chunks (id, content, source, embedding, metadata)"
            " VALUES ($1, $2, $3, $4::text::vector, $5::jsonb)",
            [(c.id, c.text, c.source,
              corpus.vector_text(unit_vector(c.text, dimensions), dimensions),
              json.dumps(c.metadata)) for c in chunks])
        await conn.execute("ANALYZE chunks")
    finally:
        await conn.close()


async def reingest(dsn: str, rows: Sequence[Mapping[str, Any]], *,
                   dimensions: int = DIMENSIONS) -> None:
    """Load ``rows`` (the ingestion contract's JSON Lines objects) as ``corpus load`` does:
    parsed by its rules and upserted by chunk id, each with the vector of its own text. A
    re-load of a chunk is how an operator changes its ACL or classification."""
    parsed = [ingest.parse_row(json.dumps(row), dimensions) for row in rows]
    conn = await asyncpg.connect(dsn)
    try:
        loaded = await ingest.load(conn, parsed, [unit_vector(r.text, dimensions) for r in parsed],
                                   dimensions=dimensions)
    finally:
        await conn.close()
    assert loaded.written == {r.id for r in parsed}, loaded


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path
    path: str = "/mcp"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # loopback only
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()


@asynccontextmanager
async def retrieval_server(workdir: Path, dsn: str, embeddings_url: str, *, agent: str = "",
                           tool: str = TOOL, config: Path | None = None,
                           dimensions: int = DIMENSIONS,
                           env: Mapping[str, str | None] | None = None,
                           ) -> AsyncIterator[RunningServer]:
    """The server process, configured by ``config`` (the file the operator renders from a
    binding) or else by ``agent`` (NAMESPACE/NAME) and ``tool``; ``env`` as ``spawn_cli``'s
    (a benchmark runs a previous commit's server with its ``PYTHONPATH``)."""
    dsn_file = workdir / "corpus.dsn"
    dsn_file.write_text(dsn)
    port, metrics_port = free_port(), free_port()
    log = workdir / "retrieval-server.log"
    binding = (["--config", str(config)] if config is not None
               else ["--agent", agent, "--tool", tool])
    process = spawn_cli(["retrieval-server", *binding, "--dimensions", str(dimensions),
                         "--store-dsn-file", str(dsn_file), "--embeddings-url", embeddings_url,
                         "--embeddings-model", "stub-embedding", "--host", "127.0.0.1",
                         "--port", str(port), "--metrics-port", str(metrics_port)], log,
                        env=env)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{metrics_port}/healthz"), process,
                   what="retrieval-server", log=log, timeout=30)
        yield RunningServer(process, port, metrics_port, log)
    finally:
        terminate(process)


@dataclass
class ServedCorpus:
    """A corpus database, the embeddings stub, the server over them and a tap before it."""

    server: RunningServer
    tap: HeaderTap
    embeddings: QueryEmbeddings
    dsn: str


@asynccontextmanager
async def served_corpus(postgres: LocalPostgres, workdir: Path, chunks: Sequence[Chunk], *,
                        agent: str) -> AsyncIterator[ServedCorpus]:
    """``chunks`` in a fresh database served by the real server for ``agent``
    (NAMESPACE/NAME), a ``HeaderTap`` in front of it; everything removed on exit."""
    name = f"t_served_{uuid.uuid4().hex[:12]}"
    dsn = await postgres.create_database(name, extensions=("vector",))
    embeddings = QueryEmbeddings()
    await embeddings.start()
    try:
        await load_corpus(dsn, chunks)
        async with retrieval_server(workdir, dsn, embeddings.url, agent=agent) as server:
            tap = HeaderTap(f"http://127.0.0.1:{server.port}")
            await tap.start()
            try:
                yield ServedCorpus(server, tap, embeddings, dsn)
            finally:
                await tap.stop()
    finally:
        await embeddings.stop()
        await postgres.drop_database(name)


__all__ = ["TOOL", "Chunk", "HeaderTap", "QueryEmbeddings", "RunningServer", "ServedCorpus",
           "load_corpus", "log_tail", "reingest", "retrieval_server", "served_corpus"]
