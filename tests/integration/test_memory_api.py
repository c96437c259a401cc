"""The governed memory API (issue 17 §1) over real PostgreSQL and the real API server.

The API is served in-process on loopback exactly as ``memory-api`` serves it; identities are
real service-account tokens from TokenRequest (audience ``kagent``) checked by TokenReview;
kagent's controller is a recording stub (its session/task store is outside our system). Every
request is shaped as kagent v0.9.11's runtime sends it (RUNTIME.md).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import math
import struct
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from kubernetes import client
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from fgentic_devenv import free_port
from fgentic_governance.api.kagent import app_name
from fgentic_governance.memory import Access, MemoryStore
from fgentic_governance.memory.readiness import StoreReadiness
from fgentic_governance.memoryapi.activity import SLACK_FRACTION
from fgentic_governance.memoryapi.login import LoginReadiness
from fgentic_governance.memoryapi.model_requests import SUMMARY_HEAD, SUMMARY_TAIL
from fgentic_governance.memoryapi.server import DELEGATE_ROLE
from fgentic_governance.reasons import Reason
from fgentic_governance.serving.http import health_handler, scrub_library_logs, serve
from tests.support.appservice import puppet, telegram
from tests.support.kagent import ControllerStub, EmbeddingStub
from tests.support.memory_api import LOCAL, agent_token, headers, memory_api, routed_pod, token
from tests.support.store import ALICE, leased_turn, past_turns, scope_record
from tests.support.stubs import loopback_app

pytestmark = pytest.mark.integration

BOB = "@bob:example.org"
AGENT = "helper"
SENTINEL = "SENTINEL-memory-api-5c2e"


def vector(text: str) -> list[float]:
    seed = hashlib.sha256(text.encode()).digest()
    raw = [((seed[i % 32] + i * 41) % 253) / 253.0 - 0.5 for i in range(768)]
    norm = math.sqrt(sum(v * v for v in raw))
    return [v / norm for v in raw]


@dataclass
class Env:
    ns: str
    url: str
    token: str
    store: MemoryStore
    pool: asyncpg.Pool
    http: aiohttp.ClientSession
    controller: ControllerStub
    kube: client.ApiClient

    def item(self, content: str, *, user: str = ALICE, agent: str = AGENT,
             **extra: Any) -> dict[str, Any]:
        return {"agent_name": app_name(self.ns, agent), "user_id": user, "content": content,
                "vector": vector(content), **extra}

    def query(self, text: str, *, user: str = ALICE, **extra: Any) -> dict[str, Any]:
        return {"agent_name": app_name(self.ns, AGENT), "user_id": user, "vector": vector(text),
                "limit": 5, "min_score": 0.3, **extra}

    async def call(self, path: str, body: Any = None, *, method: str = "POST",
                   user: str | None = ALICE, agent: str = AGENT, token_: str | None = None,
                   extra_headers: dict[str, str] | None = None) -> tuple[int, Any]:
        sent = headers(token_ or self.token, self.ns, agent, user)
        sent.update(extra_headers or {})
        data = None if body is None else (body if isinstance(body, bytes)
                                           else json.dumps(body).encode())
        async with self.http.request(method, self.url + path, data=data,
                                     headers=sent) as response:
            text = await response.text()
            return response.status, (json.loads(text) if text else None)


@pytest.fixture
async def env(control_plane: Any, k8s_client: client.ApiClient, pool: asyncpg.Pool,
              delegate_pool: asyncpg.Pool, store: MemoryStore) -> AsyncIterator[Env]:
    ns = f"memapi-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    agent_token_ = await agent_token(k8s_client, ns, AGENT)
    controller = ControllerStub()
    await controller.start()
    async with memory_api(delegate_pool, k8s_client, controller.base_url,
                          appservice=telegram(LOCAL)) as url, \
            aiohttp.ClientSession(auto_decompress=False) as http:
        yield Env(ns, url, agent_token_, store, pool, http, controller, k8s_client)
    await controller.stop()


async def scope(env: Env, *, subject: str = ALICE, name: str = "alice", lease: bool = True,
                **bounds: Any) -> Access:
    record = scope_record(f"{env.ns}/{name}", subject_mxid=subject, agent_namespace=env.ns,
                          agent_name=AGENT, control_room=f"!{name}-control:example.org",
                          **bounds)
    await env.store.ensure_scope(record)
    access = Access.for_scope(record, await env.store.grant(record.scope_key))
    if lease:
        await leased_turn(env.store, env.pool, access, 120)
    return access


async def rows(env: Env) -> int:
    return int(await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.memory"))


# -- the three routes -----------------------------------------------------------------------


async def test_no_lease_means_a_refusal_never_an_empty_answer(env: Env) -> None:
    await scope(env, lease=False)  # consent granted, no delegation open
    assert await env.call("/api/memories/sessions", env.item("Alice likes tea.")) == (
        403, {"error": "LEASE_MISSING"})
    assert await env.call("/api/memories/search", env.query("tea")) == (
        403, {"error": "LEASE_MISSING"})
    assert await env.call("/api/memories/sessions/batch",
                          {"items": [env.item("Alice likes tea.")]}) == (
        403, {"error": "LEASE_MISSING"})
    assert await rows(env) == 0
    assert env.controller.memory_calls() == []  # nothing reached kagent's own table


async def test_inside_a_lease_saves_and_searches_speak_kagents_shapes(env: Env) -> None:
    access = await scope(env)
    await past_turns(env.store, access, 4)  # the fifth turn may save automatically
    status, body = await env.call("/api/memories/sessions", env.item("Alice likes tea."))
    assert status == 201 and set(body) == {"id"}
    status, body = await env.call("/api/memories/sessions/batch", {"items": [
        env.item("Alice cycles to work."), env.item("Alice lives in Lisbon.", ttl_days=2)]})
    assert (status, body) == (201, {"count": 2})
    status, found = await env.call("/api/memories/search", env.query("Alice likes tea."))
    assert status == 200
    assert [f["content"] for f in found][:1] == ["Alice likes tea."]
    assert set(found[0]) == {"id", "content", "score", "metadata", "created_at"}
    assert found[0]["score"] == pytest.approx(1.0, abs=1e-4) and found[0]["metadata"] == {}
    stored = await env.pool.fetch(
        "SELECT content, source_kind, expires_at - created_at AS kept, consent_generation"
        " FROM fgentic_memory.memory WHERE scope_key = $1", access.scope_key)
    by_content = {r["content"]: r for r in stored}
    assert by_content["Alice likes tea."]["source_kind"] == "save_memory_tool"
    assert by_content["Alice cycles to work."]["source_kind"] == "automatic_summary"
    assert by_content["Alice lives in Lisbon."]["kept"] == pytest.approx(
        timedelta(days=2), abs=timedelta(seconds=5))
    assert by_content["Alice cycles to work."]["kept"] == pytest.approx(
        timedelta(days=7), abs=timedelta(seconds=5))  # the scope's retention, not kagent's 15
    assert {r["consent_generation"] for r in stored} == {access.generation}
    assert env.controller.memory_calls() == []
    # The body's own digits were stored (wire.VectorText): each component is the float4
    # nearest to the number sent, as if the floats had been formatted and parsed again.
    kept = await env.pool.fetchval(
        "SELECT embedding::real[] FROM fgentic_memory.memory WHERE scope_key = $1"
        " AND content = 'Alice likes tea.'", access.scope_key)
    sent = vector("Alice likes tea.")
    assert list(kept) == [struct.unpack("f", struct.pack("f", v))[0] for v in sent]


async def test_each_subject_finds_only_its_own_facts(env: Env) -> None:
    await scope(env)
    await scope(env, subject=BOB, name="bob")
    await env.call("/api/memories/sessions", env.item("Alice likes tea."))
    await env.call("/api/memories/sessions", env.item("Bob likes coffee.", user=BOB), user=BOB)
    _, alice = await env.call("/api/memories/search", env.query("x", min_score=-1.0))
    _, bob = await env.call("/api/memories/search", env.query("x", user=BOB, min_score=-1.0),
                            user=BOB)
    assert [f["content"] for f in alice] == ["Alice likes tea."]
    assert [f["content"] for f in bob] == ["Bob likes coffee."]


# -- identity ---------------------------------------------------------------------------------


async def test_the_caller_is_the_tokens_agent_and_the_headers_user(env: Env) -> None:
    await scope(env)
    other = await agent_token(env.kube, env.ns, "other-agent")
    plain = await agent_token(env.kube, env.ns, "no-memory", memory=False)
    wrong_audience = await asyncio.to_thread(token, env.kube, env.ns, AGENT, "api")
    fact = env.item("Alice likes tea.")
    cases = [
        ({"token_": "not-a-token"}, fact, 401, "UNAUTHENTICATED"),
        ({"token_": wrong_audience}, fact, 401, "UNAUTHENTICATED"),
        ({"token_": other}, fact, 403, "AGENT_MISMATCH"),  # another Agent's token
        ({"token_": other, "agent": "other-agent"}, fact, 403, "AGENT_MISMATCH"),  # its body
        ({"token_": plain, "agent": "no-memory"}, fact, 403, "AGENT_UNRESOLVED"),
        ({"extra_headers": {"X-Agent-Name": app_name(env.ns, "other-agent")}}, fact, 403,
         "AGENT_MISMATCH"),
        ({}, env.item("x", agent="other-agent"), 403, "AGENT_MISMATCH"),
        ({"user": None}, fact, 403, "USER_MISSING"),
        ({"user": BOB}, fact, 403, "USER_MISMATCH"),
        ({"user": "@alice:elsewhere.org"}, env.item("x", user="@alice:elsewhere.org"), 403,
         "FEDERATION_DENIED"),
    ]
    for kwargs, body, status, code in cases:
        assert await env.call("/api/memories/sessions", body, **kwargs) == (
            status, {"error": code}), (kwargs, code)
    assert await rows(env) == 0
    # Without the Authorization header at all.
    async with env.http.post(env.url + "/api/memories/search",
                             json=env.query("x")) as response:
        assert (response.status, await response.json()) == (401, {"error": "UNAUTHENTICATED"})


async def test_a_bridged_puppet_is_refused_even_with_a_scope_and_a_lease(env: Env) -> None:
    """ADR 0023 §31: a Telegram puppet (an MXID in the configured appservice namespace) whose
    scope declared it native-local and who holds a live lease - what a scope that got past
    admission would give it - is refused APPSERVICE_IDENTITY_DENIED on every memory route;
    nothing is stored and nothing reaches kagent's own table. A native user beside it works."""
    bridged = puppet(LOCAL)
    await scope(env, subject=bridged, name="puppet")
    calls = [("/api/memories/sessions", env.item("x", user=bridged)),
             ("/api/memories/search", env.query("x", user=bridged)),
             ("/api/memories/sessions/batch", {"items": [env.item("x", user=bridged)]})]
    for path, body in calls:
        assert await env.call(path, body, user=bridged) == (
            403, {"error": "APPSERVICE_IDENTITY_DENIED"}), path
    assert await rows(env) == 0
    assert env.controller.memory_calls() == []
    await scope(env)
    assert (await env.call("/api/memories/sessions", env.item("Alice likes tea.")))[0] == 201


async def test_a_shared_service_account_resolves_no_agent(env: Env) -> None:
    await agent_token(env.kube, env.ns, "first", service_account="shared")
    shared = await agent_token(env.kube, env.ns, "second", service_account="shared")
    assert await env.call("/api/memories/search", env.query("x"), token_=shared,
                          agent="first") == (403, {"error": "AGENT_UNRESOLVED"})


# -- bounds and cost -------------------------------------------------------------------------


async def test_kagent_input_rules_and_our_bounds_hold(env: Env) -> None:
    access = await scope(env)
    await past_turns(env.store, access, 4)
    short = {**env.item("x"), "vector": [0.1] * 767}
    cases = [
        ("/api/memories/sessions", short, 400, "REQUEST_MALFORMED"),
        ("/api/memories/sessions/batch", {"items": [env.item(str(i)) for i in range(51)]}, 400,
         "REQUEST_MALFORMED"),
        ("/api/memories/sessions/batch", {"items": []}, 400, "REQUEST_MALFORMED"),
        # ADR 0023 §43: an automatic save carries at most ten facts, refused before any cost.
        ("/api/memories/sessions/batch", {"items": [env.item(f"fact {i}") for i in range(11)]},
         400, "SUMMARY_TOO_LARGE"),
        ("/api/memories/sessions", env.item("x" * 513), 400, "FACT_TOO_LARGE"),
        ("/api/memories/sessions", env.item("my password: hunter2hunter2"), 403,
         "CREDENTIAL_CONTENT"),
        ("/api/memories/sessions", env.item("x", metadata={"note": SENTINEL}), 400,
         "REQUEST_MALFORMED"),
        ("/api/memories/sessions", env.item("x", ttl_days=-1), 400, "REQUEST_MALFORMED"),
        ("/api/memories/sessions", env.item("x", unknown=1), 400, "REQUEST_MALFORMED"),
        ("/api/memories/search", env.query("x", limit=51), 400, "REQUEST_MALFORMED"),
        ("/api/memories/sessions", b'{"agent_name": "a", "agent_name": "b"}', 400,
         "REQUEST_MALFORMED"),
    ]
    for path, body, status, code in cases:
        assert await env.call(path, body) == (status, {"error": code}), code
    assert await rows(env) == 0
    assert await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.op_ledger") == 0
    batch = {"items": [env.item(f"fact {i}") for i in range(10)]}  # ten facts are fine
    assert await env.call("/api/memories/sessions/batch", batch) == (201, {"count": 10})


async def test_a_lease_admits_eight_searches(env: Env) -> None:
    """ADR 0023 §43: a lease is one turn, and one turn's prefetch issues at most eight
    searches; load_memory in the same turn takes one of them (429 RECALL_LIMIT_REACHED)."""
    await scope(env)
    answers = [await env.call("/api/memories/search", env.query(f"q{i}")) for i in range(9)]
    assert [status for status, _ in answers] == [200] * 8 + [429]
    assert answers[-1][1] == {"error": "RECALL_LIMIT_REACHED"}


async def test_cost_is_admitted_before_the_write_and_the_ceilings_are_hard(env: Env) -> None:
    access = await scope(env, hourly_operation_ceiling=8, explicit_burst=3)
    await past_turns(env.store, access, 4)
    for i in range(3):  # the explicit bucket: burst 3
        assert (await env.call("/api/memories/sessions", env.item(f"fact {i}")))[0] == 201
    assert await env.call("/api/memories/sessions", env.item("fact 3")) == (
        429, {"error": "RATE_LIMITED"})
    # 6 units spent (save + embedding each); a batch of one needs 3 more: over the ceiling.
    assert await env.call("/api/memories/sessions/batch", {"items": [env.item("b")]}) == (
        429, {"error": "COST_CEILING_REACHED"})
    assert await env.call("/api/memories/search", env.query("x")) == (200, [])  # 2 units fit
    assert await env.call("/api/memories/search", env.query("x")) == (
        429, {"error": "COST_CEILING_REACHED"})
    assert await env.pool.fetchval(
        "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1", access.scope_key) == 3


async def test_a_refused_write_still_spends_its_admission(env: Env) -> None:
    access = await scope(env, entry_cap=1)
    await past_turns(env.store, access, 9)  # ten turns: two automatic saves
    assert (await env.call("/api/memories/sessions/batch", {"items": [env.item("a")]}))[0] == 201
    assert await env.call("/api/memories/sessions/batch", {"items": [env.item("b")]}) == (
        403, {"error": "ENTRY_CAP_REACHED"})
    spent = await env.pool.fetchval(
        "SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger WHERE scope_key = $1",
        access.scope_key)
    assert spent == 6  # summarize + save + embedding, twice: the embedding work was done


# -- what is not ours ------------------------------------------------------------------------


async def test_whole_store_list_and_delete_are_refused_and_never_forwarded(env: Env) -> None:
    query = f"?agent_name={app_name(env.ns, AGENT)}&user_id={ALICE}"
    for method in ("GET", "DELETE"):
        assert await env.call("/api/memories" + query, method=method) == (
            403, {"error": "ERASURE_NOT_HERE"})
    for path in ("/api/memories/other", "/api//memories/search", "/api/%6demories",
                 "/api/memories/../memories", "/API/Memories", "/api/memories/"):
        status, body = await env.call(path, {}, method="POST")
        assert status in (403, 405) and body["error"] in (
            "PATH_REFUSED", "METHOD_NOT_ALLOWED", "ERASURE_NOT_HERE"), path
    assert await env.call("/api/memories/search", method="GET") == (
        405, {"error": "METHOD_NOT_ALLOWED"})
    assert env.controller.memory_calls() == []
    assert env.controller.requests == []


async def test_sessions_and_tasks_pass_through_byte_for_byte(env: Env) -> None:
    sid = uuid.uuid4().hex
    body = json.dumps({"user_id": ALICE, "agent_ref": app_name(env.ns, AGENT), "id": sid,
                       "name": "s"}, indent=1).encode()  # odd spacing must survive
    sent = headers(env.token, env.ns, AGENT, ALICE) | {"X-Custom": "kept",
                                                       "Content-Type": "application/json"}
    target = URL(f"{env.url}/api/sessions?user_id=%40alice%3Aexample.org", encoded=True)
    async with env.http.post(target, data=body, headers=sent) as response:
        created = (response.status, await response.read(), response.headers)
    [seen] = env.controller.calls("POST", "/api/sessions")
    assert seen.body == body
    assert seen.query == "user_id=%40alice%3Aexample.org"  # raw, as sent
    assert seen.header("x-custom") == "kept" and seen.header("x-user-id") == ALICE
    assert seen.header("authorization") == f"Bearer {env.token}"
    assert created[0] == 201
    path = f"/api/sessions/{sid}?user_id=x&limit=-1"
    async with env.http.get(env.url + path, headers=sent) as response:
        proxied = (response.status, await response.read())
    async with env.http.get(env.controller.base_url + path, headers=sent) as response:
        direct = (response.status, await response.read())
    assert proxied == direct and direct[0] == 200 and sid.encode() in direct[1]
    async with env.http.get(f"{env.url}/api/sessions/missing", headers=sent) as response:
        assert response.status == 404  # the upstream's status, not ours
    await env.controller.stop()  # the controller is gone: 502 with a bare code
    async with env.http.get(f"{env.url}/api/tasks/x", headers=sent) as response:
        assert (response.status, await response.json()) == (502, {"error": "UPSTREAM_UNAVAILABLE"})
    await env.controller.start()


# -- content-free -----------------------------------------------------------------------------


async def test_no_fact_query_or_header_reaches_a_log_metric_or_error(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    undo = scrub_library_logs()
    caplog.set_level(logging.DEBUG)
    try:
        await scope(env)
        answers = [
            await env.call("/api/memories/sessions", env.item(f"Alice {SENTINEL} tea")),
            await env.call("/api/memories/search", env.query(SENTINEL)),
            await env.call("/api/memories/sessions", env.item(f"password: {SENTINEL}hunter2")),
            await env.call("/api/memories/sessions", env.item(SENTINEL * 40)),
            await env.call("/api/memories/sessions", env.item(SENTINEL, user=BOB), user=BOB),
            await env.call("/api/memories/search", env.query(SENTINEL),
                           extra_headers={"X-Agent-Name": SENTINEL}),
            await env.call("/api/memories/search", env.query(SENTINEL), user=SENTINEL),
            await env.call("/api/memories/search", {"vector": SENTINEL}),
        ]
    finally:
        undo()
    logged = caplog.text + "".join(logging.Formatter().format(r) for r in caplog.records)
    assert "memory-api action=" in logged  # the check below looks at real log lines
    assert SENTINEL not in logged
    assert SENTINEL not in generate_latest(REGISTRY).decode()
    errors = [json.dumps(body) for status, body in answers if status >= 400]
    assert len(errors) == 6 and not any(SENTINEL in e for e in errors)


async def test_two_replicas_share_leases_and_counters(
        env: Env, delegate_pool: asyncpg.Pool) -> None:
    await scope(env, hourly_operation_ceiling=4)
    async with memory_api(delegate_pool, env.kube, env.controller.base_url) as second:
        first = env.url
        assert (await env.call("/api/memories/search", env.query("x")))[0] == 200
        env.url = second
        assert (await env.call("/api/memories/search", env.query("x")))[0] == 200
        assert await env.call("/api/memories/search", env.query("x")) == (
            429, {"error": "COST_CEILING_REACHED"})
        env.url = first
        assert await env.call("/api/memories/search", env.query("x")) == (
            429, {"error": "COST_CEILING_REACHED"})


async def test_the_memory_api_serves_on_a_login_that_holds_only_the_delegate_role(
        env: Env, pg_dsn: str) -> None:
    """memoryApi.dsnSecret (docs/install.md): on its own login the memory API serves as on
    the operator's, cannot leave the role it assumes, and is ready only there when a
    least-privilege login is required; the operator's login is reported and refused."""
    login = f"api_{uuid.uuid4().hex[:12]}"
    await env.pool.execute(f"CREATE ROLE {login} LOGIN IN ROLE fgentic_memory_delegate")
    own = await asyncpg.create_pool(pg_dsn, user=login, min_size=1, max_size=4,
                                    server_settings={"role": DELEGATE_ROLE})  # as the server
    log = logging.getLogger("test.login")
    try:
        assert await LoginReadiness(StoreReadiness(own, log), own, log, require=True)() is \
            Reason.OK
        assert await LoginReadiness(StoreReadiness(env.pool, log), env.pool, log,
                                    require=True)() is Reason.STORE_LOGIN_PRIVILEGED
        async with own.acquire() as conn:
            await conn.execute("SET ROLE NONE")  # back to the login itself
            assert await conn.fetchval("SELECT current_user") == login
            # Only what the delegate role holds: no content outside the fenced view, not the
            # owner's role, not the fence's triggers.
            for sql in ("SELECT content FROM fgentic_memory.memory",
                        f"SET ROLE {await env.pool.fetchval('SELECT current_user')}",
                        "ALTER TABLE fgentic_memory.memory DISABLE TRIGGER USER"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(sql)
            await conn.execute(f"SET ROLE {DELEGATE_ROLE}")
        await scope(env)
        async with memory_api(own, env.kube, env.controller.base_url) as url:
            env.url = url
            assert (await env.call("/api/memories/sessions", env.item("Alice likes tea.")))[
                0] == 201
            status, found = await env.call("/api/memories/search",
                                           env.query("Alice likes tea."))
            assert status == 200 and [f["content"] for f in found] == ["Alice likes tea."]
    finally:
        await own.close()
        await env.pool.execute(f"DROP OWNED BY {login}; DROP ROLE {login}")


async def test_passed_through_bodies_reach_no_sink_of_ours(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """ADR 0023 §44: controller response bodies (here a session whose name carries a
    sentinel, and the controller's own error text) pass through unchanged and are logged,
    counted and echoed nowhere by us."""
    undo = scrub_library_logs()
    caplog.set_level(logging.DEBUG)
    sent = headers(env.token, env.ns, AGENT, ALICE)
    try:
        created = {"user_id": ALICE, "agent_ref": app_name(env.ns, AGENT), "id": "s-1",
                   "name": SENTINEL}
        async with env.http.post(env.url + "/api/sessions", json=created,
                                 headers=sent) as response:
            assert response.status == 201
        async with env.http.get(env.url + "/api/sessions/s-1", headers=sent) as response:
            assert SENTINEL in await response.text()  # it did pass through us
        async with env.http.get(env.url + f"/api/sessions/{SENTINEL}",
                                headers=sent) as response:
            assert response.status == 404
    finally:
        undo()
    logged = caplog.text + "".join(logging.Formatter().format(r) for r in caplog.records)
    assert SENTINEL not in logged
    assert SENTINEL not in generate_latest(REGISTRY).decode()


# -- embeddings admitted per Agent before the provider (ADR 0023 §42) -------------------------


EMBEDDING_BODY = {"input": ["Alice likes tea."], "model": "m", "dimensions": 768,
                  "encoding_format": "base64"}
EMBEDDING_LEDGER = ("SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger"
                    " WHERE scope_key = $1 AND operation = 'embedding'")


async def routed_address(env: Env) -> str:
    """A loopback address of its own, where a routed Pod of the Agent runs."""
    address = f"127.0.{uuid.uuid4().int % 250 + 1}.{uuid.uuid4().int % 250 + 1}"
    await asyncio.to_thread(routed_pod, env.kube, env.ns, AGENT, address)
    return address


async def test_embeddings_are_charged_to_the_one_user_whose_turn_they_serve(
        env: Env, delegate_pool: asyncpg.Pool) -> None:
    """The runtime embeds before it saves or searches, naming no user; it fetched the turn's
    session (naming the user) just before. Through /v1/embeddings the work is charged to the
    one user the Agent's Pod served within the activity window, if that user holds a live
    delegation; refused with none seen, several seen, or no lease of theirs (sql/0016)."""
    address = await routed_address(env)
    provider = EmbeddingStub()
    await provider.start()
    body, ledger = EMBEDDING_BODY, EMBEDDING_LEDGER
    window = 2.0  # a turn is recent this long; each check below follows its turn directly
    past = window * (1 + SLACK_FRACTION) + 0.3  # beyond every replica's notes too (sql/0019)
    try:
        async with memory_api(delegate_pool, env.kube, env.controller.base_url,
                              embeddings_url=provider.url + "/embeddings",
                              activity_seconds=window) as url, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                    local_addr=(address, 0))) as pod, aiohttp.ClientSession() as stranger:

            async def embed(session: aiohttp.ClientSession) -> tuple[int, Any]:
                async with session.post(url + "/v1/embeddings", json=body,
                                        headers={"Authorization": "Bearer provider-key"}) as r:
                    return r.status, await r.json()

            async def turn_of(user: str) -> None:
                """The runtime's first call of a turn, passed through to the controller (the
                stub knows no session: its 404 is the controller's answer, passed back)."""
                async with pod.get(url + "/api/sessions/ctx-1", params={
                        "user_id": user, "order": "asc", "limit": "-1"},
                        headers=headers(env.token, env.ns, AGENT, None)) as r:
                    assert r.status == 404

            alice = await scope(env, lease=False)
            assert await embed(pod) == (403, {"error": "LEASE_MISSING"})  # no turn seen
            await turn_of(ALICE)
            assert await embed(pod) == (403, {"error": "LEASE_MISSING"})  # no lease of hers
            assert provider.requests == []  # nothing was embedded
            alice_turn = await leased_turn(env.store, env.pool, alice, 60)
            await turn_of(ALICE)  # recent again, whatever the lease's opening took
            status, answer = await embed(pod)
            assert status == 200 and len(answer["data"]) == 1
            [seen] = provider.requests
            assert json.loads(seen.body) == body  # forwarded unchanged
            assert seen.header("authorization") == "Bearer provider-key"
            assert await env.pool.fetchval(ledger, alice.scope_key) == 1
            bob = await scope(env, subject=BOB, name="bob")  # a second leased user
            await turn_of(ALICE)
            await turn_of(BOB)  # while Alice's turn is recent: whose embedding is it?
            assert await embed(pod) == (403, {"error": "SCOPE_AMBIGUOUS"})
            await asyncio.sleep(past)
            await turn_of(BOB)  # only Bob's turn is recent, but Alice's is still leased
            assert await embed(pod) == (403, {"error": "SCOPE_AMBIGUOUS"})  # sql/0018
            assert await env.store.close_lease(alice.scope_key, alice_turn.id)
            await turn_of(BOB)  # recent again; Alice's is past the window
            assert (await embed(pod))[0] == 200  # Bob's turn alone: his, not Alice's
            assert await env.pool.fetchval(ledger, bob.scope_key) == 1
            await asyncio.sleep(past)
            await turn_of("@carol:fgentic.local")  # consented to nothing, while Bob is leased
            assert await embed(pod) == (403, {"error": "LEASE_MISSING"})
            assert await env.pool.fetchval(ledger, alice.scope_key) == 1  # never charged
            assert await env.pool.fetchval(ledger, bob.scope_key) == 1  # for another's turn
            # Any other address (no routed Pod there) is no Agent at all.
            assert await embed(stranger) == (403, {"error": "AGENT_UNRESOLVED"})
            assert len(provider.requests) == 2  # only the attributable ones were embedded
    finally:
        await provider.stop()


async def test_a_pod_is_attributed_at_every_replica(
        env: Env, delegate_pool: asyncpg.Pool) -> None:
    """sql/0019: each replica notes the users it sees in the store, so a Pod whose turn
    began at one replica is attributed at another (its replica restarted, or the Service
    rebalanced: before, LEASE_MISSING until its next session call), and two replicas that
    each saw one user refuse as one replica that saw both would."""
    address = await routed_address(env)
    provider = EmbeddingStub()
    await provider.start()
    body, ledger = EMBEDDING_BODY, EMBEDDING_LEDGER
    replica = functools.partial(memory_api, delegate_pool, env.kube, env.controller.base_url,
                                embeddings_url=provider.url + "/embeddings")
    try:
        async with replica() as one, replica() as other, aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(local_addr=(address, 0))) as pod:

            async def embed(url: str) -> tuple[int, Any]:
                async with pod.post(url + "/v1/embeddings", json=body,
                                    headers={"Authorization": "Bearer provider-key"}) as r:
                    return r.status, await r.json()

            async def turn_of(url: str, user: str) -> None:
                async with pod.get(url + "/api/sessions/ctx-1", params={"user_id": user},
                                   headers=headers(env.token, env.ns, AGENT, None)) as r:
                    assert r.status == 404  # the controller stub's answer, passed back

            alice = await scope(env)
            await turn_of(one, ALICE)
            assert (await embed(other))[0] == 200  # the Pod moved: still Alice's turn
            assert (await embed(one))[0] == 200
            assert await env.pool.fetchval(ledger, alice.scope_key) == 2
            # Bob (no lease, so sql/0018 does not refuse) is seen only by the other replica;
            # this one saw only Alice, and alone would charge her.
            await turn_of(other, BOB)
            assert await embed(one) == (403, {"error": "SCOPE_AMBIGUOUS"})
            assert await embed(other) == (403, {"error": "SCOPE_AMBIGUOUS"})
            assert await env.pool.fetchval(ledger, alice.scope_key) == 2
            assert len(provider.requests) == 2
    finally:
        await provider.stop()


async def test_a_streamed_answer_passes_through_as_it_is_written(
        env: Env, delegate_pool: asyncpg.Pool) -> None:
    """Streaming bodies are relayed chunk by chunk, not buffered: the client reads the first
    chunk while the controller has not yet written the second."""
    release = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        await asyncio.wait_for(release.wait(), timeout=10)
        await response.write(b"data: second\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/api/stream", stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with memory_api(delegate_pool, env.kube, f"http://127.0.0.1:{port}") as url, \
                env.http.get(url + "/api/stream") as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), timeout=5)
            assert first == b"data: first\n\n"
            release.set()
            assert await asyncio.wait_for(response.content.read(), timeout=5) == \
                b"data: second\n\n"
    finally:
        release.set()
        await runner.cleanup()


# -- what is charged and counted (issue 36 R4-8, §5 Metering) ----------------------------------


OPERATIONS_LEDGER = ("SELECT operation, sum(units)::int FROM fgentic_memory.op_ledger"
                     " WHERE scope_key = $1 GROUP BY operation")
PROMPT = SUMMARY_HEAD + "Alice: I take my tea green." + SUMMARY_TAIL
SYSTEM = {"role": "system", "content": "You are helpful."}
TOOLS = [{"type": "function", "function": {"name": "load_memory", "parameters": {}}}]


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "stub-chat", "messages": list(messages), **fields}


def user(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


SUMMARY = chat(user(PROMPT))
"""kagent-adk 0.9.11's own request (``_summarize_session_content_async``)."""
VARIANTS = {
    "system message": chat(SYSTEM, user(PROMPT)),
    "tools list": chat(user(PROMPT), tools=TOOLS, tool_choice="auto"),
    "streamed": chat(user(PROMPT), stream=True),
    "trailing space": chat(user(PROMPT + " ")),
    "role User": chat(user(PROMPT, "User")),
}
"""The same work in the shapes the review sent uncharged (issue 36 R4-8)."""
TURN = chat(SYSTEM, user("What tea do I like?"), tools=TOOLS, tool_choice="auto")
"""A memory-enabled Agent's turn: its instruction first, its memory tools."""


class Model:
    """The Agent's model: records each request's body and answers every one."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    async def complete(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        return web.json_response({"id": "c", "object": "chat.completion", "choices": [{
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": '["Alice likes green tea."]'}}]})


@asynccontextmanager
async def routed(env: Env, delegate_pool: asyncpg.Pool
                 ) -> AsyncIterator[tuple[str, Model, aiohttp.ClientSession]]:
    """The memory API with both provider routes, the model's stub, and a session from the
    address of a routed Pod of the Agent: (the API's URL, the model, the Pod's session)."""
    model, provider = Model(), EmbeddingStub()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", model.complete)
    await provider.start()
    address = await routed_address(env)
    try:
        async with loopback_app(app) as port, memory_api(
                delegate_pool, env.kube, env.controller.base_url,
                embeddings_url=provider.url + "/embeddings",
                model_url=f"http://127.0.0.1:{port}/v1/chat/completions") as url, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                    local_addr=(address, 0))) as pod:
            yield url, model, pod
    finally:
        await provider.stop()


def poster(url: str, pod: aiohttp.ClientSession) -> Callable[..., Any]:
    async def post(path: str, body: Any, **sent: str) -> tuple[int, Any]:
        async with pod.post(url + path, data=json.dumps(body).encode(), headers={
                "Content-Type": "application/json", **sent}) as r:
            return r.status, await r.json(content_type=None)
    return post


async def turn_of(env: Env, url: str, pod: aiohttp.ClientSession) -> None:
    """The runtime's first call of Alice's turn, which names her (the controller stub's 404
    is passed back): the provider requests that follow are charged to her."""
    async with pod.get(url + "/api/sessions/ctx-1", params={"user_id": ALICE},
                       headers=headers(env.token, env.ns, AGENT, None)) as r:
        assert r.status == 404


async def test_every_shape_of_kagents_summarisation_is_charged_or_refused(
        env: Env, delegate_pool: asyncpg.Pool) -> None:
    """R4-8: kagent's prompt with a system message, a tools list, ``stream: true``, a
    trailing space or role "User" is no Agent turn: without a lease each is refused before
    the model works (before: passed on, uncharged); within a lease and the cadence each is
    charged one summarisation. The Agent's turns still pass, uncharged."""
    async with routed(env, delegate_pool) as (url, model, pod):
        post = poster(url, pod)
        key = "Bearer provider-key"
        alice = await scope(env, lease=False)
        await turn_of(env, url, pod)
        for name, body in VARIANTS.items():
            assert await post("/v1/chat/completions", body, Authorization=key) == (
                403, {"error": "LEASE_MISSING"}), name
        assert model.bodies == []  # nothing reached the model
        assert (await post("/v1/chat/completions", TURN, Authorization=key))[0] == 200
        assert model.bodies == [TURN]  # a turn is passed on as it is, charged nothing
        assert dict(await env.pool.fetch(OPERATIONS_LEDGER, alice.scope_key)) == {}
        for charged, (name, body) in enumerate(VARIANTS.items(), start=1):
            await past_turns(env.store, alice, 4)  # the cadence: one summary per five turns
            lease = await leased_turn(env.store, env.pool, alice, 60)  # the fifth
            await turn_of(env, url, pod)
            assert (await post("/v1/chat/completions", body, Authorization=key))[0] == 200, name
            assert model.bodies[-1] == body
            assert dict(await env.pool.fetch(OPERATIONS_LEDGER, alice.scope_key)) == {
                "summarize": charged}, name
            # A second one in the same turn: refused by the cadence, before the model.
            assert await post("/v1/chat/completions", body, Authorization=key) == (
                429, {"error": "SUMMARY_CADENCE_REACHED"}), name
            assert await env.store.close_lease(alice.scope_key, lease.id)
        assert len(model.bodies) == 1 + len(VARIANTS)


async def scrape(port: int) -> dict[str, float]:
    """``fgentic_memory_admitted_units`` by operation, from the /metrics port."""
    async with aiohttp.ClientSession() as http, \
            http.get(f"http://127.0.0.1:{port}/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return {sample.labels["operation"]: sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "fgentic_memory_admitted_units"
            for sample in family.samples if sample.name.endswith("_total")}


async def test_every_admitted_unit_is_counted_by_operation(
        env: Env, delegate_pool: asyncpg.Pool) -> None:
    """§5 Metering: ``fgentic_memory_admitted_units`` counts, per operation, exactly the
    units the store's ledger was charged through the memory API (before: nothing on this
    path): embeddings at the provider route, a summarisation at the model route (not again
    at the automatic save that takes its reservation), explicit saves, searches and batches.
    A refused admission counts nothing."""
    runner = await serve(health_handler(), "127.0.0.1", metrics := free_port())
    try:
        async with routed(env, delegate_pool) as (url, _, pod):
            post = poster(url, pod)
            memory = headers(env.token, env.ns, AGENT, ALICE)
            alice = await scope(env, lease=False)
            await past_turns(env.store, alice, 4)
            await leased_turn(env.store, env.pool, alice, 120)  # the fifth turn is running
            before = await scrape(metrics)
            await turn_of(env, url, pod)
            answers = [
                await post("/v1/embeddings", EMBEDDING_BODY, Authorization="Bearer key"),
                await post("/api/memories/sessions", env.item("Alice likes tea."), **memory),
                await post("/api/memories/search", env.query("tea"), **memory),
                await post("/v1/chat/completions", SUMMARY, Authorization="Bearer key"),
                await post("/api/memories/sessions/batch", {"items": [
                    env.item("Alice cycles."), env.item("Alice reads.")]}, **memory)]
            assert [status for status, _ in answers] == [200, 201, 200, 200, 201]
            assert (await post("/v1/chat/completions", SUMMARY, Authorization="Bearer key"))[
                1] == {"error": "SUMMARY_CADENCE_REACHED"}  # refused: counts nothing
            after = await scrape(metrics)
        ledger = dict(await env.pool.fetch(OPERATIONS_LEDGER, alice.scope_key))
        assert ledger == {"embedding": 5, "save": 3, "load": 1, "summarize": 1}
        assert {op: after.get(op, 0) - before.get(op, 0) for op in after
                if after.get(op, 0) != before.get(op, 0)} == ledger
    finally:
        await runner.cleanup()
