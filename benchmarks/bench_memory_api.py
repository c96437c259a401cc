"""Governed memory API: added latency over the fenced store, pass-through, saves per core.

    .venv/bin/python -m benchmarks.bench_memory_api [--rounds 40] [--subjects 25]
        [--saves 1200] [--clients 16] [--keep]

Starts its own PostgreSQL 18 + pgvector and etcd + kube-apiserver (identity is real: a
ServiceAccount, a memory-enabled kagent Agent and a TokenRequest token of audience ``kagent``,
checked by TokenReview). Prints figures; never asserts timings. Request bodies have kagent
v0.9.11's shapes (RUNTIME.md): ``{agent_name, user_id, content, vector[768]}`` for a save and
``{agent_name, user_id, vector, limit: 5, min_score: 0.3}`` for a search, with the runtime's
headers (``Authorization: Bearer``, ``X-Agent-Name`` = the Agent's app name, ``X-User-Id``).

1. Memory API versus the same fenced store calls made directly. The API is served in this
   process on loopback, built from the package as ``memory-api`` builds it (``MemoryApi`` over
   ``DelegatedStore`` on a delegate-role pool, ``make_handler``, ``serving.serve``); the
   baseline calls that very ``DelegatedStore`` (``admit`` + ``save``/``search``) on the same
   pool. Three routes: a single save (``/api/memories/sessions``, an explicit operation: the
   sender bucket applies), the batch route with one item (automatic save) and a search of a
   scope holding 20 facts (five hits above 0.3). Identity is *warm*: the TokenReview + Agent
   list cache is set to an hour for this figure (shipped: 10 s per token), and what one cache
   miss costs is reported on its own. Bodies are encoded before the clock starts (the
   runtime's JSON encoding is not the API's cost); the API's parsing is timed. The client
   shares the API's event loop, so the added time includes the client's share of an HTTP
   round trip (figure 2's direct stub call shows what a bare round trip costs). The two
   sides hand PostgreSQL the vector as each has it: the direct caller holds 768 floats and
   formats them (``vector_literal``, ~0.4-0.5 ms); the API holds the request body, and
   ``wire`` keeps every number as the token it read (no double is parsed: a vector is its
   768 tokens joined, ``VectorText``, checked within float4 on the text), so it neither parses
   nor formats floats. Variants run
   interleaved in batches, one call per subject per variant per batch, in a rotating order;
   between batches (untimed) the owner clears the hourly ledger, the sender buckets and the
   saved rows (a scope allows 60 units an hour, 3 explicit tokens and 100 entries), and
   re-opens the leases before their 540 s ceiling. Targets: <= 1.5 ms added at p50 and
   <= 1.5x at p99.
2. Pass-through of kagent's session calls (``GET /api/sessions/<id>`` answering ~1 KB of
   JSON, ``POST /api/sessions/<id>/events`` with a ~1 KB event echoed with 201) through the
   API to a stub controller in this process, versus the same calls to the stub directly,
   interleaved with figure 1. Target <= 1 ms added at p50.
3. Saves per second per core: the real ``fgentic-governance memory-api`` process (shipped
   settings: pool of 8, INFO request log, 10 s identity cache) takes ``--saves`` single saves
   from ``--clients`` concurrent clients in this process, in waves of three saves per subject
   (the sender bucket's burst) with the untimed reset in between. Figure: saves per second of
   wall time, divided by ``os.cpu_count()`` (API, PostgreSQL and the load generator share this
   machine's cores), and the CPU each save cost in the API process, PostgreSQL and this
   client (from /proc). Baseline: the same admit + save calls made from this process
   directly with the same concurrency and pool size, in interleaved waves.

Also printed, to explain the figures: what one identity cache miss costs, the CPU pieces of
one API call (body parsing, ``check_fact``), and ``DelegatedStore``'s search statement on a
runtime connection under a custom and a generic plan (PostgreSQL switches a prepared
statement to a generic plan after five executions; asyncpg prepares every statement).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import asyncpg
from aiohttp import web
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from benchmarks.common import (
    Table,
    banner,
    command_line,
    fmt_ms,
    local_control_plane,
    local_postgres,
    machine,
    scratch_dir,
    time_async,
    time_sync,
)
from fgentic_devenv import free_port, terminate, wait_until
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_devenv.postgres import LocalPostgres
from fgentic_devenv.up import port_open, spawn_cli
from fgentic_governance.api.kagent import app_name
from fgentic_governance.memory import Access, MemoryStore, Operation, ScopeRecord, bounds, migrate
from fgentic_governance.memory.delegated import (
    _ENTER,
    _SEARCH,
    Caller,
    DelegatedStore,
    Fact,
    check_fact,
)
from fgentic_governance.memory.model import Sighting, vector_literal
from fgentic_governance.memoryapi import proxy
from fgentic_governance.memoryapi.http import make_handler
from fgentic_governance.memoryapi.server import POOL_SIZE
from fgentic_governance.memoryapi.service import AUTOMATIC_SAVE, TOOL_SAVE, MemoryApi
from fgentic_governance.memoryapi.wire import parse_save, parse_search
from fgentic_governance.memoryapi.workloads import KubeIdentity
from fgentic_governance.serving import http as serving

HOMESERVER: Final = "fgentic.local"
NS: Final = "bench-memapi"
AGENT: Final = "helper"
DIM: Final = 768
CORPUS: Final = 20
"""Facts in each searched scope (all five hits of a search score about 0.5)."""
BURST: Final = 3
"""The sender bucket's maximum burst (sql/0001 CHECK; api/memory.py): explicit saves per
subject between two resets."""
LEASE_SECONDS: Final = 540
RENEW_AFTER: Final = 420.0
# What the memory API's pool connects as (tests/support/store.py): the runtime role plus
# delegation (sql/0010).
DELEGATE_SETTINGS: Final = {"role": "fgentic_memory_delegate",
                           "search_path": "fgentic_memory, public"}
SAVE: Final = "/api/memories/sessions"
BATCH: Final = "/api/memories/sessions/batch"
SEARCH: Final = "/api/memories/search"
SESSION_ID: Final = "6f1d2c3b-4a5e-4f60-8a71-92b3c4d5e6f7"


# -- fixtures: scopes, vectors, bodies -----------------------------------------------------------


def _subject(kind: str, i: int) -> str:
    return f"@bench-{kind}-{i}:{HOMESERVER}"


def _record(kind: str, i: int) -> ScopeRecord:
    # The largest bounds the model and the database allow (sql/0001 CHECKs, api/memory.py).
    return ScopeRecord(scope_key=f"bench/{kind}-{i}", subject_mxid=_subject(kind, i),
                       origin_kind="native-local", agent_namespace=NS, agent_name=AGENT,
                       control_room=f"!{kind}-{i}:{HOMESERVER}", entry_cap=100,
                       max_fact_bytes=512, max_retention_days=7, hourly_operation_ceiling=60,
                       explicit_per_minute=6, explicit_burst=BURST)


def _vector(rng: random.Random, base: Sequence[float] | None = None) -> list[float]:
    noise = [rng.uniform(-1.0, 1.0) for _ in range(DIM)]
    raw = noise if base is None else [b + n for b, n in zip(base, noise, strict=True)]
    norm = math.sqrt(sum(v * v for v in raw))
    return [v / norm for v in raw]


@dataclass
class Subject:
    """One subject's scope with the benchmark Agent, its runtime headers and its caller."""

    kind: str
    index: int
    access: Access
    caller: Caller
    headers: dict[str, str]


class Scopes:
    """Scopes ensured, granted and leased by the owner; leases re-opened before they end."""

    def __init__(self, owner_store: MemoryStore, notes: DelegatedStore, token: str) -> None:
        self.owner_store = owner_store
        self.notes = notes
        self.token = token
        self.subjects: dict[str, list[Subject]] = {}
        self._leased_at = 0.0

    async def add(self, kind: str, count: int) -> list[Subject]:
        made = []
        for i in range(count):
            record = _record(kind, i)
            await self.owner_store.ensure_scope(record)
            access = Access.for_scope(record, await self.owner_store.grant(record.scope_key))
            await self._lease(access)
            made.append(Subject(kind, i, access, Caller(record.subject_mxid, NS, AGENT),
                                {"Authorization": f"Bearer {self.token}",
                                 "X-Agent-Name": app_name(NS, AGENT),
                                 "X-User-Id": record.subject_mxid}))
        self.subjects[kind] = made
        self._leased_at = self._leased_at or time.monotonic()
        return made

    async def renew_leases(self) -> None:
        """A lease lasts at most 540 s: open fresh ones in time (two live leases of one
        scope are fine; two scopes of one (subject, Agent) would not be)."""
        if time.monotonic() - self._leased_at < RENEW_AFTER:
            return
        for subjects in self.subjects.values():
            for subject in subjects:
                await self._lease(subject.access)
        self._leased_at = time.monotonic()

    async def _lease(self, access: Access) -> None:
        """A lease naming the session's context, and that context in progress, as the memory
        API notes it from the runtime's session call: the memory calls are bound to it
        (sql/0021)."""
        await self.owner_store.open_lease(access, LEASE_SECONDS, context_id=SESSION_ID)
        await self.notes.note_context(NS, AGENT, access.subject_mxid, Sighting(SESSION_ID))


async def reset(owner: Any, keep: Sequence[str]) -> None:
    """Untimed, as the owner: clear the hourly ledger, the sender buckets, the leases' recall
    counts and the automatic-save cadence (issue 26's bounds: eight searches per lease, one
    automatic save per five turns; a batch here is not a user turn), and delete every saved
    row except the searched scopes' corpora (``keep``)."""
    async with owner.acquire() as conn:
        await conn.execute("DELETE FROM fgentic_memory.op_ledger")
        await conn.execute("UPDATE fgentic_memory.delegation_lease SET recalls = 0")
        await conn.execute("UPDATE fgentic_memory.summary_cadence"
                           " SET leases = 1000000, summaries = 0, reserved = 0")
        await conn.execute("DELETE FROM fgentic_memory.rate_bucket")
        await conn.execute("DELETE FROM fgentic_memory.memory WHERE scope_key <> ALL($1::text[])",
                           list(keep))
        await conn.execute("VACUUM fgentic_memory.memory")


class Bodies:
    """kagent-shaped request bodies, encoded ahead of the timed calls."""

    def __init__(self, seed: int = 5) -> None:
        rng = random.Random(seed)
        self.save_vectors = [_vector(rng) for _ in range(64)]
        self._save_json = [json.dumps(v) for v in self.save_vectors]
        self.topic = [rng.uniform(-1.0, 1.0) for _ in range(DIM)]  # as large as the noise
        self.corpus = [_vector(rng, self.topic) for _ in range(CORPUS)]
        self.queries = [_vector(rng, self.topic) for _ in range(64)]
        self._query_json = [json.dumps(v) for v in self.queries]
        self.counter = 0
        self.agent = json.dumps(app_name(NS, AGENT))

    def fact(self) -> tuple[str, int]:
        self.counter += 1
        return (f"Alice prefers green tea in the morning, note {self.counter}.",
                self.counter % len(self.save_vectors))

    def item(self, subject: str, content: str, vec: int) -> str:
        return (f'{{"agent_name":{self.agent},"user_id":{json.dumps(subject)},'
                f'"content":{json.dumps(content)},"vector":{self._save_json[vec]}}}')

    def save(self, subject: str, content: str, vec: int) -> bytes:
        return self.item(subject, content, vec).encode()

    def batch(self, subject: str, content: str, vec: int) -> bytes:
        return f'{{"items":[{self.item(subject, content, vec)}]}}'.encode()

    def search(self, subject: str, query: int) -> bytes:
        return (f'{{"agent_name":{self.agent},"user_id":{json.dumps(subject)},'
                f'"vector":{self._query_json[query]},"limit":5,"min_score":0.3}}').encode()


# -- the stub controller and the Agent's identity ------------------------------------------------


def _session_json() -> bytes:
    events = [{"id": f"evt-{i}", "author": "user" if i % 2 else "helper",
               "timestamp": 1_780_000_000 + i, "data": "x" * 60} for i in range(6)]
    body = json.dumps({"data": {"session": {"id": SESSION_ID, "user_id": _subject("w", 0),
                                            "agent_ref": app_name(NS, AGENT)},
                                "events": events}, "message": "Successfully got session"})
    return body.encode()


SESSION_BODY: Final = _session_json()
EVENT_BODY: Final = json.dumps({"id": "evt-new", "data": json.dumps(
    {"invocation_id": "e-" + "0" * 32, "author": "helper",
     "content": {"parts": [{"text": "y" * 700}], "role": "model"}})}).encode()


async def stub_controller() -> tuple[web.AppRunner, str]:
    """kagent's controller for sessions: a fixed ~1 KB session, events echoed with 201."""
    async def get_session(_: web.Request) -> web.Response:
        return web.Response(body=SESSION_BODY, content_type="application/json")

    async def post_event(request: web.Request) -> web.Response:
        return web.Response(status=201, body=await request.read(),
                            content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/sessions/{id}", get_session)
    app.router.add_post("/api/sessions/{id}/events", post_event)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def agent_token(api: k8s.ApiClient) -> str:
    """A memory-enabled kagent Agent running as its own ServiceAccount, and that account's
    token of audience ``kagent`` from TokenRequest (as kubelet projects it into the Pod)."""
    k8s.CoreV1Api(api).create_namespaced_service_account(
        NS, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=AGENT)))
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "kagent.dev", "v1alpha2", NS, "agents",
        {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
         "metadata": {"name": AGENT, "namespace": NS},
         "spec": {"type": "Declarative", "declarative": {
             "modelConfig": "default-model-config", "systemMessage": "You help.",
             "memory": {"modelConfig": "embedding-model-config", "ttlDays": 3}}}})
    answer = k8s.CoreV1Api(api).create_namespaced_service_account_token(
        AGENT, NS, k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(
            audiences=["kagent"], expiration_seconds=3600)))
    if answer.status is None:
        raise SystemExit("TokenRequest returned no token")
    return str(answer.status.token)


# -- 1 + 2. latency through the API versus direct ------------------------------------------------


async def _post(http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str],
                expect: int) -> bytes:
    async with http.post(url, data=body, headers=headers) as response:
        answer = await response.read()
        if response.status != expect:
            raise SystemExit(f"POST {url}: {response.status} {answer[:200]!r}")
        return answer


async def _get(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> bytes:
    async with http.get(url, headers=headers) as response:
        answer = await response.read()
        if response.status != 200:
            raise SystemExit(f"GET {url}: {response.status}")
        return answer


Call = Callable[[int], Awaitable[object]]


@dataclass
class Bench:
    """What every figure uses: the client, the store, the owner pool, the servers."""

    http: aiohttp.ClientSession
    store: DelegatedStore
    runtime: Any
    """The delegate-role pool under ``store`` (the API's pool)."""
    owner: Any
    pg: LocalPostgres
    scopes: Scopes
    bodies: Bodies
    stub_url: str

    @property
    def keep(self) -> list[str]:
        """The searched scopes, whose corpus every reset keeps."""
        return [s.access.scope_key for s in self.scopes.subjects["s"]]


def _latency_variants(b: Bench, api_url: str) -> tuple[dict[str, Call], Callable[[], None]]:
    """The ten timed calls (index = subject) and the untimed preparation of a batch."""
    http, store, bodies, stub_url = b.http, b.store, b.bodies, b.stub_url
    writers, readers = b.scopes.subjects["w"], b.scopes.subjects["s"]
    batch = len(writers)
    prepared: dict[str, list[Any]] = {}

    def prepare() -> None:
        """This batch's bodies and facts, one per subject (untimed)."""
        for name in ("api save", "api batch", "direct save", "direct batch"):
            facts = [bodies.fact() for _ in writers]
            if name.startswith("api"):
                encode = bodies.save if name == "api save" else bodies.batch
                prepared[name] = [encode(s.caller.subject, content, vec)
                                  for s, (content, vec) in zip(writers, facts, strict=True)]
            else:
                prepared[name] = [Fact(content, bodies.save_vectors[vec])
                                  for content, vec in facts]
        queries = [bodies.counter * 7 + i for i in range(batch)]
        prepared["api search"] = [bodies.search(s.caller.subject, q % len(bodies.queries))
                                  for s, q in zip(readers, queries, strict=True)]
        prepared["direct search"] = [bodies.queries[q % len(bodies.queries)] for q in queries]

    async def api_save(i: int) -> object:
        return await _post(http, api_url + SAVE, prepared["api save"][i], writers[i].headers,
                           201)

    async def api_batch(i: int) -> object:
        return await _post(http, api_url + BATCH, prepared["api batch"][i], writers[i].headers,
                           201)

    async def api_search(i: int) -> object:
        found = json.loads(await _post(http, api_url + SEARCH, prepared["api search"][i],
                                       readers[i].headers, 200))
        if len(found) != 5:
            raise SystemExit(f"search found {len(found)}, expected 5")
        return found

    async def direct_save(i: int) -> object:
        caller = writers[i].caller
        await store.admit(caller, {Operation.SAVE: 1, Operation.EMBEDDING: 1}, explicit=True)
        return await store.save(caller, [prepared["direct save"][i]], TOOL_SAVE)

    async def direct_batch(i: int) -> object:
        caller = writers[i].caller
        await store.admit(caller, {Operation.SUMMARIZE: 1, Operation.SAVE: 1,
                                   Operation.EMBEDDING: 1})
        return await store.save(caller, [prepared["direct batch"][i]], AUTOMATIC_SAVE)

    async def direct_search(i: int) -> object:
        caller = readers[i].caller
        await store.admit(caller, {Operation.LOAD: 1, Operation.EMBEDDING: 1})
        found = await store.search(caller, prepared["direct search"][i], limit=5,
                                   min_score=0.3)
        if len(found) != 5:
            raise SystemExit(f"search found {len(found)}, expected 5")
        return found

    session_path = f"/api/sessions/{SESSION_ID}"
    query = "?user_id=%40bench-w-0%3Afgentic.local"
    get_path = session_path + query + "&order=asc&limit=-1"
    events_path = session_path + "/events" + query
    runtime_headers = writers[0].headers

    def get_session(base: str) -> Call:
        async def call(_: int) -> object:
            return await _get(http, base + get_path, runtime_headers)
        return call

    def post_event(base: str) -> Call:
        async def call(_: int) -> object:
            return await _post(http, base + events_path, EVENT_BODY, runtime_headers, 201)
        return call

    return {
        "api save": api_save, "direct save": direct_save,
        "api batch": api_batch, "direct batch": direct_batch,
        "api search": api_search, "direct search": direct_search,
        "api GET session": get_session(api_url), "direct GET session": get_session(stub_url),
        "api POST event": post_event(api_url), "direct POST event": post_event(stub_url),
    }, prepare


async def bench_latency(b: Bench, api_url: str, rounds: int) -> tuple[Table, Table]:
    variants, prepare = _latency_variants(b, api_url)
    batch = len(b.scopes.subjects["w"])
    samples: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for round_ in range(rounds + 1):  # round 0 warms every path up and is not counted
        await reset(b.owner, b.keep)
        prepare()
        for name in order[round_ % len(order):] + order[:round_ % len(order)]:
            func = variants[name]
            for i in range(batch):
                start = time.perf_counter()
                await func(i)
                elapsed = time.perf_counter() - start
                if round_:
                    samples[name].append(elapsed)
        await b.scopes.renew_leases()
    return _latency_tables(samples, rounds * batch, batch)


def _latency_tables(samples: dict[str, list[float]], n: int, batch: int) -> tuple[Table, Table]:
    memory = Table(f"memory API vs the fenced store called directly ({n} calls per variant, "
                   f"interleaved in batches of {batch}; warm identity)")
    for route, label in (("save", "single save (explicit)"), ("batch", "batch route, 1 item"),
                         ("search", "search, 5 hits of 20")):
        direct = samples[f"direct {route}"]
        memory.add(f"baseline: DelegatedStore admit + {route if route != 'batch' else 'save'}"
                   f", {label}", direct)
        memory.add(f"memory API {route.replace('batch', 'batch save')} over HTTP, {label}",
                   samples[f"api {route}"], baseline=direct,
                   target="+1.5 ms p50, 1.5x p99")
    passed = Table(f"pass-through to the stub controller ({n} calls per variant, interleaved)")
    for call in ("GET session", "POST event"):
        direct = samples[f"direct {call}"]
        passed.add(f"baseline: stub controller directly, {call}", direct)
        passed.add(f"through the memory API, {call}", samples[f"api {call}"],
                   baseline=direct, target="+1 ms p50")
    return memory, passed


def print_added(samples_of: Table) -> None:
    """Added ms at p50 and the p99 ratio of every row that has a baseline."""
    for row in samples_of.rows:
        if row.baseline is None:
            continue
        print(f"  {row.name}: +{fmt_ms(row.stats.median - row.baseline.median)} ms at p50, "
              f"p99 {row.stats.p99 / row.baseline.p99:.2f}x "
              f"({fmt_ms(row.stats.p99)} vs {fmt_ms(row.baseline.p99)} ms)", flush=True)


async def bench_identity(kube: k8s.ApiClient, token: str, rounds: int = 20) -> Table:
    """What the warm figures leave out: one TokenReview + Agent list per token per 10 s."""
    warm = KubeIdentity(kube)
    await warm.agent_for(token)

    async def cold() -> None:
        await KubeIdentity(kube).agent_for(token)

    table = Table(f"identity ({rounds} calls each; shipped cache: 10 s per token)")
    hit = await time_async(lambda: warm.agent_for(token), rounds * 10)
    table.add("identify, cache hit", hit)
    table.add("identify, cache miss: TokenReview + Agent list", await time_async(cold, rounds),
              baseline=hit)
    return table


def bench_components(bodies: Bodies, rounds: int = 300) -> Table:
    """Pure CPU pieces of one API call (each runs on the event loop)."""
    content, vec = bodies.fact()
    save_body = bodies.save(_subject("w", 0), content, vec)
    search_body = bodies.search(_subject("s", 0), 0)
    fact = Fact(content, bodies.save_vectors[vec])
    table = Table(f"CPU pieces of one API call (median of {rounds} calls each)")
    table.add(f"parse a save body ({len(save_body):,} bytes, wire.parse_save)",
              time_sync(lambda: parse_save(save_body), rounds))
    item = parse_save(save_body)
    received = Fact(content, item.embedding)  # what the API checks: the body's own digits
    table.add("check_fact (write policy + vector literal), once per fact",
              time_sync(lambda: check_fact(fact), rounds))
    table.add(f"  of which vector_literal, {DIM} floats",
              time_sync(lambda: vector_literal(fact.vector), rounds))
    table.add("check_fact of a parsed item (the API's: VectorText, no formatting)",
              time_sync(lambda: check_fact(received), rounds))
    table.add(f"parse a search body ({len(search_body):,} bytes)",
              time_sync(lambda: parse_search(search_body), rounds))
    return table


async def bench_search_plans(b: Bench, rounds: int = 30) -> Table:
    """``DelegatedStore``'s search statement alone, inside an entered lease, under a custom
    and a generic plan (what a pooled connection runs after its fifth execution)."""
    reader = b.scopes.subjects["s"][0]
    literal = vector_literal(b.bodies.queries[0])
    samples: dict[str, list[float]] = {}
    async with b.runtime.acquire() as conn:
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            samples[mode] = []
            for _ in range(rounds + 1):
                async with conn.transaction(readonly=True):
                    await conn.fetchrow(_ENTER, *reader.caller.params(), "recall")
                    start = time.perf_counter()
                    await conn.fetch(_SEARCH, literal, 5, 0.3)
                    samples[mode].append(time.perf_counter() - start)
        await conn.execute("RESET plan_cache_mode")
    table = Table(f"search statement alone, scope of {CORPUS} facts ({rounds} executions each)")
    custom = samples["force_custom_plan"][1:]
    table.add("custom plan (what the first five executions on a connection get)", custom)
    table.add("generic plan (plan_cache_mode auto picks it from the 6th on)",
              samples["force_generic_plan"][1:], baseline=custom)
    return table


# -- 3. saves per second per core ----------------------------------------------------------------


def _cpu(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a process (and of its reaped children) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _postgres_cpu(pg: LocalPostgres) -> float:
    """CPU seconds of the postmaster, its live backends and its reaped ones."""
    assert pg.datadir is not None
    postmaster = int((pg.datadir / "postmaster.pid").read_text().split()[0])
    total = _cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == postmaster:
            total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return total


@dataclass
class Wave:
    saves: int
    seconds: float
    client_cpu: float
    postgres_cpu: float
    api_cpu: float = 0.0


async def _wave(work: Sequence[Callable[[], Awaitable[object]]], clients: int,
                pg: LocalPostgres, api_pid: int | None) -> Wave:
    """Run every callable once with ``clients`` concurrent workers; wall and CPU time."""
    queue = iter(work)

    async def worker() -> None:
        for call in queue:  # shared iterator: each call is taken once
            await call()

    cpu0, pg0 = time.process_time(), _postgres_cpu(pg)
    api0 = _cpu(api_pid) if api_pid else 0.0
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    seconds = time.perf_counter() - start
    return Wave(len(work), seconds, time.process_time() - cpu0, _postgres_cpu(pg) - pg0,
                (_cpu(api_pid) - api0) if api_pid else 0.0)


def start_api_process(work: Path, dsn: str, kubeconfig: Path, upstream: str) -> tuple[Any, str]:
    """The real ``fgentic-governance memory-api`` command on a loopback port."""
    work.mkdir(parents=True, exist_ok=True)
    dsn_file = work / "store-dsn"
    dsn_file.touch(mode=0o600)
    dsn_file.write_text(dsn)
    port = free_port()
    log = work / "memory-api.log"
    proc = spawn_cli(["memory-api", "--kubeconfig", str(kubeconfig), "--store-dsn-file",
                      str(dsn_file), "--upstream", upstream, "--local-homeserver", HOMESERVER,
                      "--host", "127.0.0.1", "--port", str(port)], log)
    wait_until(lambda: port_open(port), proc, what="memory-api", log=log, timeout=60.0)
    return proc, f"http://127.0.0.1:{port}"


async def bench_throughput(b: Bench, api_url: str, api_pid: int, total: int, clients: int
                           ) -> list[str]:
    http, store, owner, pg, scopes, bodies = b.http, b.store, b.owner, b.pg, b.scopes, b.bodies
    subjects = scopes.subjects["t"]
    keep = b.keep
    per_wave = BURST * len(subjects)
    waves = max(1, total // per_wave)

    def api_work(repeat: int) -> list[Callable[[], Awaitable[object]]]:
        calls: list[Callable[[], Awaitable[object]]] = []
        for _ in range(repeat):
            for s in subjects:
                body = bodies.save(s.caller.subject, *bodies.fact())

                async def call(body: bytes = body, headers: dict[str, str] = s.headers
                               ) -> object:
                    return await _post(http, api_url + SAVE, body, headers, 201)
                calls.append(call)
        return calls

    def direct_work(repeat: int) -> list[Callable[[], Awaitable[object]]]:
        calls: list[Callable[[], Awaitable[object]]] = []
        for _ in range(repeat):
            for s in subjects:
                content, vec = bodies.fact()
                fact = Fact(content, bodies.save_vectors[vec])

                async def call(caller: Caller = s.caller, fact: Fact = fact) -> object:
                    await store.admit(caller, {Operation.SAVE: 1, Operation.EMBEDDING: 1},
                                      explicit=True)
                    return await store.save(caller, [fact], TOOL_SAVE)
                calls.append(call)
        return calls

    # Warm-up (not counted): the API process opens its pool and reviews the token.
    await _wave(api_work(1), clients, pg, api_pid)
    await _wave(direct_work(1), clients, pg, None)
    await reset(owner, keep)
    through: list[Wave] = []
    direct: list[Wave] = []
    for _ in range(waves):
        through.append(await _wave(api_work(BURST), clients, pg, api_pid))
        await reset(owner, keep)
        direct.append(await _wave(direct_work(BURST), clients, pg, None))
        await reset(owner, keep)
        await scopes.renew_leases()
    return _throughput_lines(through, direct, clients)


def _throughput_lines(through: list[Wave], direct: list[Wave], clients: int) -> list[str]:
    cores = os.cpu_count() or 1
    lines = [f"saves per second ({sum(w.saves for w in through)} single saves each way, "
             f"{clients} concurrent clients, {len(through)} interleaved waves; "
             f"os.cpu_count() = {cores})"]

    def line(label: str, waves: list[Wave], api: bool) -> float:
        saves = sum(w.saves for w in waves)
        seconds = sum(w.seconds for w in waves)
        rate = saves / seconds
        per_wave = sorted(w.saves / w.seconds for w in waves)
        cpu = (f"CPU ms per save: API process {1e3 * sum(w.api_cpu for w in waves) / saves:.2f}, "
               if api else "CPU ms per save: ")
        cpu += (f"PostgreSQL {1e3 * sum(w.postgres_cpu for w in waves) / saves:.2f}, "
                f"this process {1e3 * sum(w.client_cpu for w in waves) / saves:.2f}")
        lines.append(f"  {label}: {rate:,.0f} saves/s = {rate / cores:,.0f} saves/s per core "
                     f"(waves {per_wave[0]:,.0f}-{per_wave[-1]:,.0f}/s); {cpu}")
        return rate

    api_rate = line("memory-api process, POST /api/memories/sessions", through, True)
    direct_rate = line("baseline: DelegatedStore admit + save from this process", direct, False)
    lines.append(f"  ratio: {api_rate / direct_rate:.2f}x of the direct store's rate")
    return lines


# -- main ----------------------------------------------------------------------------------------


async def run(pg: LocalPostgres, plane: LocalControlPlane, work: Path,
              args: argparse.Namespace) -> tuple[list[Table], list[str]]:
    dsn = await pg.create_database("bench_memory_api", extensions=("vector",))
    owner = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    async with owner.acquire() as conn:
        await migrate(conn)  # creates the runtime role too
    kwargs = bounds.pool_kwargs(min_size=2, max_size=POOL_SIZE)
    kwargs["server_settings"] = {**kwargs["server_settings"], **DELEGATE_SETTINGS}
    runtime = await asyncpg.create_pool(dsn, **kwargs)
    kube = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(plane.kubeconfig))
    plane.ensure_namespace(NS)
    token = await asyncio.to_thread(agent_token, kube)
    scopes = Scopes(MemoryStore(owner), DelegatedStore(owner), token)
    bodies = Bodies()
    store = DelegatedStore(runtime)
    stub, stub_url = await stub_controller()
    upstream = proxy.Upstreams()
    identity = KubeIdentity(kube, cache_seconds=3600.0)  # warm figures; the miss is below
    port = free_port()
    server = await serving.serve(
        make_handler(MemoryApi(store, HOMESERVER), identity.agent_for, upstream, stub_url),
        "127.0.0.1", port)
    api_proc = None
    try:
        await scopes.add("w", args.subjects)
        readers = await scopes.add("s", args.subjects)
        for reader in readers:  # the searched corpus, written once through the lease
            await store.save(reader.caller, [Fact(f"Alice's note {i}: she likes tea {i}.", v)
                                             for i, v in enumerate(bodies.corpus)],
                             AUTOMATIC_SAVE)
        async with aiohttp.ClientSession() as http:
            banner("latency: memory API vs direct store calls, pass-through vs direct")
            bench = Bench(http, store, runtime, owner, pg, scopes, bodies, stub_url)
            memory, passed = await bench_latency(bench, f"http://127.0.0.1:{port}",
                                                 args.rounds)
            for table in (memory, passed):
                table.print()
                print_added(table)
            tables = [memory, passed, await bench_identity(kube, token),
                      bench_components(bodies), await bench_search_plans(bench)]
            for table in tables[2:]:
                table.print()

            banner("saves per second per core")
            await scopes.add("t", max(1, args.saves // BURST // 4))
            api_proc, api_url = await asyncio.to_thread(
                start_api_process, work / "memory-api", dsn, plane.kubeconfig, stub_url)
            lines = await bench_throughput(bench, api_url, api_proc.pid, args.saves,
                                           args.clients)
            print("\n".join(lines), flush=True)
        return tables, lines
    finally:
        terminate(api_proc)
        await server.cleanup()
        await upstream.close()
        await stub.cleanup()
        await runtime.close()
        await owner.close()
        kube.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=40,
                        help="timed batches per latency variant (plus one warm-up)")
    parser.add_argument("--subjects", type=int, default=25,
                        help="subjects (scopes) per latency batch: calls per variant per batch")
    parser.add_argument("--saves", type=int, default=1200,
                        help="timed saves for the throughput figure (each way)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--keep", action="store_true", help="keep logs and server state")
    args = parser.parse_args(argv)
    for name in ("rounds", "subjects", "clients"):
        if not 1 <= getattr(args, name) <= 1000:
            parser.error(f"--{name} must be 1..1000")
    if not BURST * 4 <= args.saves <= 100_000:
        parser.error("--saves must be 12..100000")

    print(f"command: {command_line()}")
    print(f"machine: {machine()}; run {uuid.uuid4().hex[:8]}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    with scratch_dir("memory-api", keep=args.keep) as work, \
            local_postgres(work / "postgres") as pg, \
            local_control_plane(work / "controlplane") as plane:
        tables, lines = asyncio.run(run(pg, plane, work, args))
    banner("summary (figures only; nothing is asserted)")
    for table in tables:
        table.print()
        if table is tables[0] or table is tables[1]:
            print_added(table)
        print()
    print("\n".join(lines))
    print(f"\ncommand: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
