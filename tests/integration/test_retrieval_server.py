"""The retrieval server as shipped (``fgentic-governance retrieval-server``) over a real
PostgreSQL + pgvector corpus, spoken to by the real `mcp` client and by raw HTTP for every
refusal: MCP 2025-11-25 only, one tool, exactly one identity carrier per request, the database
prefilter before ranking, structured results, content-free refusals, logs and metrics."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx2
import pytest
from aiohttp import ClientSession, ClientTimeout, DummyCookieJar
from mcp import ClientSession as McpSession
from mcp.client.streamable_http import streamable_http_client

from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance import contract
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.retrieval.server_config import dump_config, server_config
from fgentic_governance.serving import strict_json
from tests.support.objects import example
from tests.support.polling import until_async
from tests.support.projector import AGENT, ALICE, room_context
from tests.support.retrieval_server import (
    TOOL,
    Chunk,
    QueryEmbeddings,
    RunningServer,
    load_corpus,
    retrieval_server,
)
from tests.support.vectors import DIMENSIONS

pytestmark = pytest.mark.integration

VERSION = "2025-11-25"
ALICE_KEY = {"kind": "matrix", "principal": ALICE}
BOB_KEY = {"kind": "matrix", "principal": "@bob:org-a.example"}
SENTINEL = "sentinel-7f3a9c-knowledge"


def acl(principals: list[dict[str, str]], classification: str = "public") -> dict[str, Any]:
    return {"classification": classification, "allowed_principals": principals}


CORPUS = [
    Chunk(1, "retention policy for chat logs", "docs/retention.md", acl([ALICE_KEY])),
    Chunk(2, "retention policy for chat logs, partner copy", "docs/partner.md", acl([BOB_KEY])),
    Chunk(3, "retention policy for chat logs, restricted", "docs/secret.md",
          acl([ALICE_KEY], "restricted")),
    Chunk(4, "retention policy for chat logs, internal", "docs/internal.md",
          acl([ALICE_KEY], "approved_non_public")),
    Chunk(5, "how to rotate the gateway keys", "docs/keys.md", acl([ALICE_KEY])),
    Chunk(6, f"{SENTINEL} stored text", "docs/sentinel.md", acl([ALICE_KEY])),
]
VISIBLE = {1, 5, 6}  # alice's public chunks; the projection allows "public" only


def carrier(*, iat: int | None = None, agent: contract.AgentRef = AGENT) -> str:
    stamped = contract.stamp_matrix(room_context(), agent=agent,
                                    iat=int(time.time()) if iat is None else iat)
    return contract.encode_identity(stamped)


@pytest.fixture(scope="module")
async def embeddings() -> AsyncIterator[QueryEmbeddings]:
    async with QueryEmbeddings() as stub:
        yield stub  # type: ignore[misc]


@pytest.fixture(scope="module")
async def server(postgres: LocalPostgres, embeddings: QueryEmbeddings,
                 tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningServer]:
    name = f"t_knowledge_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(name, extensions=("vector",))
    await load_corpus(dsn, CORPUS)
    async with retrieval_server(tmp_path_factory.mktemp("knowledge"), dsn, embeddings.url,
                                agent=f"{AGENT.namespace}/{AGENT.name}") as running:
        await until_async(lambda: running.get("/readyz")[0], "the server ready", 15,
                          holds=lambda status: status == 200)
        yield running
    await postgres.drop_database(name)


@pytest.fixture(scope="module")
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession(timeout=ClientTimeout(total=20),
                             cookie_jar=DummyCookieJar()) as session:
        yield session


_ids = itertools.count(1)


def body(method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
    if params is not None:
        message["params"] = params
    return message


INIT_PARAMS = {"protocolVersion": VERSION, "capabilities": {},
               "clientInfo": {"name": "it", "version": "1"}}


def headers(*, carriers: list[str] | None = None, version: str | None = VERSION,
            extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    out = [("accept", "application/json, text/event-stream"),
           ("content-type", "application/json")]
    out += [("x-fgentic-identity", v) for v in (carrier(),) if carriers is None]
    out += [("x-fgentic-identity", v) for v in carriers or []]
    if version is not None:
        out.append(("mcp-protocol-version", version))
    return out + (extra or [])


async def post(http: ClientSession, server: RunningServer, message: Any,
               hdrs: list[tuple[str, str]], *, url: str | None = None,
               ) -> tuple[int, dict[str, Any] | None]:
    async with http.post(url or server.url, data=json.dumps(message), headers=hdrs) as answer:
        text = await answer.text()
        return answer.status, (json.loads(text) if text else None)


async def call(http: ClientSession, server: RunningServer, arguments: Any, *,
               name: str = TOOL, hdrs: list[tuple[str, str]] | None = None,
               ) -> dict[str, Any]:
    status, reply = await post(http, server, body("tools/call",
                                                  {"name": name, "arguments": arguments}),
                               hdrs or headers())
    assert status == 200 and reply is not None, (status, reply)
    result: dict[str, Any] = reply["result"]
    return result


# -- the real mcp client ----------------------------------------------------------------------


async def test_the_mcp_client_negotiates_2025_11_25_and_calls_the_one_tool(
    server: RunningServer,
) -> None:
    client = httpx2.AsyncClient(headers={"X-Fgentic-Identity": carrier()}, timeout=20)
    async with client, streamable_http_client(server.url, http_client=client) as streams, \
            McpSession(streams[0], streams[1]) as session:
        init = await session.initialize()
        assert init.protocol_version == VERSION
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == [TOOL]
        schema = listed.tools[0].input_schema
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["required"] == ["query"] and schema["additionalProperties"] is False
        assert listed.tools[0].output_schema is not None
        result = await session.call_tool(TOOL, {"query": CORPUS[0].text, "k": 10})
    assert not result.is_error
    chunks = result.structured_content["chunks"]
    assert {int(c["chunk_id"]) for c in chunks} == VISIBLE  # the prefilter, before ranking
    assert chunks[0] == {"chunk_id": "1", "source": "docs/retention.md",
                         "text": CORPUS[0].text, "score": pytest.approx(1.0, abs=1e-5)}
    scores = [c["score"] for c in chunks]
    assert scores == sorted(scores, reverse=True)
    assert json.loads(result.content[0].text) == result.structured_content


async def test_k_bounds_the_answer(server: RunningServer, http: ClientSession) -> None:
    result = await call(http, server, {"query": CORPUS[4].text, "k": 1})
    assert [c["chunk_id"] for c in result["structuredContent"]["chunks"]] == ["5"]


# -- refusals before the SDK -------------------------------------------------------------------


# (id, message, headers made when the test runs (a carrier stamped at collection may have
# expired by then: a CI run collects, then spends minutes on the cluster tier), status, code)
Headers = Callable[[], list[tuple[str, str]]]
REFUSALS: list[tuple[str, Any, Headers, int, str]] = [
    ("no-carrier", body("tools/list"), lambda: headers(carriers=[]), 403, "HEADER_MISSING"),
    ("two-carriers", body("tools/list"), lambda: headers(carriers=[carrier(), carrier()]),
     403, "HEADER_DUPLICATE"),
    ("other-agent", body("tools/list"), lambda: headers(carriers=[carrier(
        agent=contract.AgentRef(namespace=AGENT.namespace, name="other"))]),
     403, "AGENT_MISMATCH"),
    ("expired", body("tools/list"),
     lambda: headers(carriers=[carrier(iat=int(time.time()) - 601)]), 403, "EXPIRED"),
    ("8193-bytes", body("tools/list"), lambda: headers(carriers=["A" * 8193]), 403,
     "HEADER_TOO_LARGE"),
    ("initialize-older", body("initialize", {**INIT_PARAMS, "protocolVersion": "2025-06-18"}),
     lambda: headers(version=None), 400, "PROTOCOL_VERSION_REFUSED"),
    ("initialize-newer", body("initialize", {**INIT_PARAMS, "protocolVersion": "2026-07-28"}),
     lambda: headers(version=None), 400, "PROTOCOL_VERSION_REFUSED"),
    ("no-version", body("tools/list"), lambda: headers(version=None), 400,
     "PROTOCOL_VERSION_REFUSED"),
    ("older-version", body("tools/list"), lambda: headers(version="2025-06-18"), 400,
     "PROTOCOL_VERSION_REFUSED"),
    ("modern-version", body("server/discover"), lambda: headers(version="2026-07-28"), 400,
     "METHOD_REFUSED"),
    ("resources", body("resources/list"), headers, 400, "METHOD_REFUSED"),
    ("prompts", body("prompts/list"), headers, 400, "METHOD_REFUSED"),
    ("batch", [body("tools/list")], headers, 400, "REQUEST_MALFORMED"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_refusals_before_the_sdk(server: RunningServer, http: ClientSession,
                                       case: tuple[str, Any, Headers, int, str]) -> None:
    _, message, make_headers, status, code = case
    got_status, reply = await post(http, server, message, make_headers())
    assert got_status == status
    assert reply is not None and reply["error"]["message"] == code


async def test_what_the_sdk_would_echo_never_leaves_and_nesting_is_not_a_crash(
    server: RunningServer, http: ClientSession,
) -> None:
    status, reply = await post(http, server, body("tools/call", f"{SENTINEL} as params"),
                               headers())
    assert status == 400 and reply is not None
    assert reply["error"]["message"] == "REQUEST_MALFORMED"
    assert SENTINEL not in json.dumps(reply)
    async with http.post(server.url, data=b"[" * 60000, headers=headers()) as answer:
        assert answer.status == 400  # refused, not a 500 from a second parser
        assert (await answer.json())["error"]["message"] == "REQUEST_MALFORMED"


async def test_an_embeddings_answer_in_many_pieces_is_read_whole(
    server: RunningServer, http: ClientSession, embeddings: QueryEmbeddings,
) -> None:
    embeddings.trickle = True
    try:
        result = await call(http, server, {"query": CORPUS[0].text})
    finally:
        embeddings.trickle = False
    assert result["structuredContent"]["chunks"][0]["chunk_id"] == "1"


async def test_the_8192_byte_carrier_is_judged_by_the_contract_not_the_transport(
    server: RunningServer, http: ClientSession,
) -> None:
    status, reply = await post(http, server, body("tools/list"), headers(carriers=["A" * 8192]))
    assert status == 403 and reply is not None
    assert reply["error"]["message"] not in {"HEADER_TOO_LARGE", "HTTP_REQUEST_REJECTED"}


async def test_only_post_on_the_one_path(server: RunningServer, http: ClientSession) -> None:
    async with http.get(server.url, headers=headers()) as answer:
        assert answer.status == 405
    async with http.delete(server.url, headers=headers()) as answer:
        assert answer.status == 405
    status, _ = await post(http, server, body("tools/list"), headers(),
                           url=server.url.replace("/mcp", "/other"))
    assert status == 404
    status, _ = await post(http, server, body("tools/list"), headers(), url=server.url + "?x=1")
    assert status == 404


# -- tool refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "arguments", "code"), [
    ("delete_corpus", {"query": "x"}, "TOOL_UNKNOWN"),
    (TOOL, {"query": "x" * 513}, "QUERY_TOO_LARGE"),
    (TOOL, {"query": "x", "k": 11}, "K_INVALID"),
    (TOOL, {"query": "x", "where": "1=1"}, "ARGUMENTS_INVALID"),
    (TOOL, {"query": ""}, "QUERY_INVALID"),
])
async def test_tool_refusals_are_a_code_and_no_chunks(
    server: RunningServer, http: ClientSession, name: str, arguments: Any, code: str,
) -> None:
    result = await call(http, server, arguments, name=name)
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": code}]
    assert "structuredContent" not in result or not result["structuredContent"]


@pytest.mark.parametrize("vector", [
    [0.0] * DIMENSIONS,  # no direction: every cosine distance is NaN
    [1e39] + [0.01] * (DIMENSIONS - 1),  # beyond float4: the store cannot take it
], ids=["all-zero", "beyond-float4"])
async def test_a_vector_the_store_cannot_rank_is_the_providers_fault(
    server: RunningServer, http: ClientSession, embeddings: QueryEmbeddings,
    vector: list[float],
) -> None:
    """It used to answer ``"score": NaN`` (not JSON) for an all-zero query vector, and
    STORE_UNAVAILABLE for a 1e39 component: the provider's answer is what is wrong."""
    embeddings.vector = vector
    try:
        async with http.post(server.url, headers=headers(), data=json.dumps(body(
                "tools/call", {"name": TOOL, "arguments": {"query": CORPUS[0].text}}))) as answer:
            raw = await answer.read()
    finally:
        embeddings.vector = None
    result = strict_json.loads(raw)["result"]  # strict: NaN or Infinity would be refused
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "EMBEDDINGS_UNAVAILABLE"}]


async def test_a_stored_chunk_without_a_direction_is_never_scored_nan(
    server: RunningServer, http: ClientSession,
) -> None:
    """A chunk written outside ``corpus load`` (which refuses it) with an all-zero vector has a
    NaN distance to any query: it is left out of the answer, which stays strict JSON."""
    conn = await asyncpg.connect((server.log.parent / "corpus.dsn").read_text())
    try:
        await conn.execute(
            "INSERT INTO chunks (id, content, source, embedding, metadata)"
            " VALUES (99, 'zero', 'docs/zero.md', $1::text::vector, $2::jsonb)",
            "[" + ",".join(["0"] * DIMENSIONS) + "]", json.dumps(acl([ALICE_KEY])))
        async with http.post(server.url, headers=headers(), data=json.dumps(body(
                "tools/call", {"name": TOOL, "arguments": {"query": CORPUS[0].text,
                                                           "k": 10}}))) as answer:
            raw = await answer.read()
    finally:
        await conn.execute("DELETE FROM chunks WHERE id = 99")
        await conn.close()
    result = strict_json.loads(raw)["result"]
    assert {c["chunk_id"] for c in result["structuredContent"]["chunks"]} == {
        str(i) for i in VISIBLE}
    # The text block is JSON too (it used to carry "score":NaN).
    assert strict_json.loads(result["content"][0]["text"].encode()) == result["structuredContent"]


async def test_credentials_and_other_reserved_headers_are_ignored(
    server: RunningServer, http: ClientSession,
) -> None:
    plain = await call(http, server, {"query": CORPUS[0].text})
    noisy = await call(http, server, {"query": CORPUS[0].text}, hdrs=headers(extra=[
        ("authorization", "Bearer agent-key"), ("cookie", "session=1"),
        ("x-fgentic-room-context", "x"), ("mcp-session-id", "s-1")]))
    assert noisy["structuredContent"] == plain["structuredContent"]


# -- content-free ------------------------------------------------------------------------------


async def test_no_query_chunk_or_provider_body_reaches_logs_metrics_or_errors(
    server: RunningServer, http: ClientSession, embeddings: QueryEmbeddings,
) -> None:
    found = await call(http, server, {"query": f"{SENTINEL} stored text"})
    assert found["structuredContent"]["chunks"][0]["chunk_id"] == "6"
    embeddings.fail = True
    try:
        failed = await call(http, server, {"query": f"{SENTINEL} again"})
    finally:
        embeddings.fail = False
    assert failed["content"] == [{"type": "text", "text": "EMBEDDINGS_UNAVAILABLE"}]
    status, reply = await post(http, server, body("resources/read", {"uri": SENTINEL}), headers())
    assert status == 400 and SENTINEL not in json.dumps(reply)
    _, metrics = server.get("/metrics")
    assert 'fgentic_knowledge_tool_calls_total{outcome="EMBEDDINGS_UNAVAILABLE"}' in metrics
    for text in (server.log_text(), metrics):
        assert SENTINEL not in text
    labels = set(re.findall(r'method="([^"]*)"', metrics))
    assert labels <= {"initialize", "notifications/initialized", "ping", "tools/list",
                      "tools/call", "other"}


async def test_readiness_follows_the_embeddings_endpoint(
    server: RunningServer, embeddings: QueryEmbeddings,
) -> None:
    assert server.get("/readyz")[0] == 200
    port = embeddings.port
    await embeddings.stop()
    try:
        await until_async(lambda: server.get("/readyz")[0], "the server not ready", 20,
                          interval=0.25, holds=lambda status: status != 200)
        assert server.get("/readyz")[0] == 503
        assert "readiness EMBEDDINGS_UNAVAILABLE" in server.log_text()
    finally:
        await embeddings.start(port)


async def test_a_store_down_at_start_up_is_not_ready_and_says_why(
    embeddings: QueryEmbeddings, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 37: the corpus database unreachable at start-up is no start-up error (it can come
    back): the server runs, is not ready, and its log says why from the first probe on."""
    async with retrieval_server(tmp_path_factory.mktemp("store-down"),
                                "postgresql://fgentic@127.0.0.1:1/none", embeddings.url,
                                agent=f"{AGENT.namespace}/{AGENT.name}") as running:
        await until_async(lambda: "readiness " in running.log_text(),
                          "the first readiness probe logged", 20, interval=0.25)
        assert "readiness STORE_UNAVAILABLE" in running.log_text()
        assert running.get("/readyz")[0] == 503 and running.get("/healthz")[0] == 200


async def test_the_server_takes_its_binding_from_the_rendered_configuration(
    postgres: LocalPostgres, embeddings: QueryEmbeddings, http: ClientSession,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``--config``: the ConfigMap the operator renders from the RetrievalBinding names the
    Agent, the tool and the path (here a binding whose tool and path differ from the flags')."""
    spec = RetrievalBindingSpec.model_validate({
        **example("RetrievalBinding")["spec"],
        "mcpServer": {**example("RetrievalBinding")["spec"]["mcpServer"], "tool": "find_docs"},
        "retrievalService": {**example("RetrievalBinding")["spec"]["retrievalService"],
                             "mcpPath": "/knowledge"}})
    work = tmp_path_factory.mktemp("knowledge-config")
    (work / "retrieval-server.json").write_text(dump_config(server_config(spec)))
    name = f"t_knowledge_cfg_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(name, extensions=("vector",))
    await load_corpus(dsn, CORPUS)
    try:
        async with retrieval_server(work, dsn, embeddings.url,
                                    config=work / "retrieval-server.json") as configured:
            assert configured.url.endswith("/mcp")  # the support's default path: not served
            url = configured.url.removesuffix("/mcp") + "/knowledge"
            status, reply = await post(http, configured, body("tools/list"), headers(), url=url)
            assert status == 200 and reply is not None
            assert [t["name"] for t in reply["result"]["tools"]] == ["find_docs"]
            status, _ = await post(http, configured, body("tools/list"), headers())
            assert status == 404
    finally:
        await postgres.drop_database(name)


async def test_a_1024_dimension_corpus_is_served_and_a_mismatch_is_not_ready(
    postgres: LocalPostgres, http: ClientSession, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``--dimensions 1024`` serves a 1,024-dimension corpus; a server whose dimension differs
    from the table's never becomes ready (every search would fail)."""
    name = f"t_knowledge_1024_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(name, extensions=("vector",))
    await load_corpus(dsn, CORPUS, dimensions=1024)
    try:
        async with QueryEmbeddings(dimensions=1024) as wide:
            work = tmp_path_factory.mktemp("knowledge-1024")
            async with retrieval_server(work, dsn, wide.url,  # type: ignore[attr-defined]
                                        agent=f"{AGENT.namespace}/{AGENT.name}",
                                        dimensions=1024) as served:
                result = await call(http, served, {"query": CORPUS[0].text})
                assert result["structuredContent"]["chunks"][0]["chunk_id"] == "1"
            other = tmp_path_factory.mktemp("knowledge-768")
            async with retrieval_server(other, dsn, wide.url,  # type: ignore[attr-defined]
                                        agent=f"{AGENT.namespace}/{AGENT.name}") as mismatched:
                await asyncio.sleep(1.0)  # past the first probe
                assert mismatched.get("/readyz")[0] == 503
                assert "readiness ready" not in mismatched.log_text()
    finally:
        await postgres.drop_database(name)
