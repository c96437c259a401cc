"""Operator at scale: convergence of many MemoryScopes and RetrievalBindings against the raw API
write throughput of the same run, offboarding of a principal holding many scopes, and the
operator's resident memory.

    .venv/bin/python -m benchmarks.bench_scale [--scopes 1000] [--bindings 1000]
        [--offboard-scopes 100] [--entries 10] [--namespaces 10] [--threads 8] [--keep]

Starts its own etcd + kube-apiserver, PostgreSQL 18 + pgvector and the real
``fgentic-governance operator`` process (watching ``--namespaces`` namespaces plus one for the
offboarding; one more namespace is left unwatched for the baselines). Every object is created
from this process with one Python ``kubernetes`` client and ``--threads`` threads, as fast as
the API allows. Prints figures; never asserts timings.

(a) MemoryScopes: baseline = ``--scopes`` raw creates (MemoryScope + ConsentRecord) and then
    ``--scopes`` raw status patches, one per scope, in the unwatched namespace, same client,
    same threads. Measured: the same number of MemoryScope + ConsentRecord pairs created in the
    watched namespaces, from the first create to the last ``status.phase == Enabled`` seen by a
    cluster-wide watch. Throughput ratio = (scopes/s to Enabled) / (raw status patches/s).
    Target >= 50 %.
(b) RetrievalBindings (each for its own Agent; the example binding with a public route, so 13
    rendered objects are server-side applied per binding): the same, to condition
    ``Applied=True``; baseline = raw creates and raw status patches of bindings.
(c) Offboarding: a principal holding ``--offboard-scopes`` Enabled scopes, each with
    ``--entries`` entries saved through ``MemoryStore.save`` (768-dim embeddings); time from
    creating the PrincipalOffboarding to ``ReadyForDeactivation``. Baseline: the same flow
    (``offboarding.flow.offboard``) called directly on a store holding the same number of
    scopes and entries for another principal (no API server, no operator).
(d) Footprint: operator VmRSS and VmHWM (/proc/<pid>/status) idle, after (a), after a scope
    resync round, after (b) and after (c). Target <= 200 MiB with 1,000 scopes.

Content-free: entries are synthetic and never printed; only counts and times are.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import asyncpg
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from benchmarks.bench_webhook import cpu_seconds
from benchmarks.bench_webhook_soak import proc_memory
from benchmarks.common import (
    REPO_ROOT,
    OperatorProcess,
    StreamWatch,
    banner,
    command_line,
    local_control_plane,
    local_postgres,
    machine,
    scratch_dir,
)
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_governance.api.common import OriginKind, Principal
from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.cli.offboard import manifest
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord
from fgentic_governance.offboarding.flow import offboard

GROUP: Final = "governance.fgentic.dev"
VERSION: Final = "v1alpha1"
HOMESERVER: Final = "fgentic.local"
ALICE: Final = f"@alice:{HOMESERVER}"
BOB: Final = f"@bob:{HOMESERVER}"  # offboarded through the operator
CAROL: Final = f"@carol:{HOMESERVER}"  # offboarded directly on the store (baseline)
RAW_NS: Final = "scale-raw"  # not watched by the operator
OFFBOARD_NS: Final = "scale-offboard"
RETRIEVAL_NS: Final = "scale-retrieval"
DIM: Final = 768


# -- machine-wide CPU and the operator's process ---------------------------------------------------


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


@dataclass
class Usage:
    """Operator CPU and machine CPU over one phase."""

    pid: int
    wall: float = 0.0
    operator_cpu: float = 0.0
    machine: float = 0.0

    def __enter__(self) -> Usage:
        self._t = time.perf_counter()
        self._cpu = cpu_seconds(self.pid)
        self._busy = machine_busy()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self._t
        self.operator_cpu = (cpu_seconds(self.pid) - self._cpu) / self.wall
        busy, total = machine_busy()
        self.machine = (busy - self._busy[0]) / max(1, total - self._busy[1])

    def line(self) -> str:
        return (f"operator {self.operator_cpu:.0%} of one core, machine {self.machine:.0%} busy "
                f"(all {os.cpu_count()} CPUs) over {self.wall:.1f} s")


# -- the API server's own request counters ------------------------------------------------------

_WRITES: Final = {"POST", "PATCH", "PUT", "APPLY", "DELETE"}


def api_requests(plane: LocalControlPlane) -> dict[str, float]:
    """apiserver_request_total by 'VERB resource[/subresource]', plus the latency sum."""
    counts: dict[str, float] = {}
    for line in plane.kubectl("get", "--raw", "/metrics").splitlines():
        if line.startswith(("apiserver_request_total{",
                            "apiserver_request_duration_seconds_sum{",
                            "apiserver_request_duration_seconds_count{")):
            labels, _, value = line.rpartition(" ")
            fields = dict(part.split("=", 1) for part in
                          labels[labels.index("{") + 1:-1].replace('"', "").split(",")
                          if "=" in part)
            if fields.get("verb") in {"WATCH", "CONNECT"}:
                continue
            metric = labels[:labels.index("{")]
            name = (f"{fields.get('verb')} {fields.get('resource')}"
                    + (f"/{fields['subresource']}" if fields.get("subresource") else "")
                    if metric == "apiserver_request_total" else metric)
            counts[name] = counts.get(name, 0.0) + float(value)
    return counts


def request_figures(kind: str, before: dict[str, float], after: dict[str, float],
                    objects: int) -> list[Figure]:
    """What the API server served between two snapshots, per object brought to ready."""
    diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    writes = {k: v for k, v in diff.items() if k.split(" ")[0] in _WRITES and v > 0}
    reads = sum(v for k, v in diff.items()
                if k.split(" ")[0] in {"GET", "LIST"} and v > 0)
    top = ", ".join(f"{k} {v / objects:.1f}"
                    for k, v in sorted(writes.items(), key=lambda kv: -kv[1])[:8])
    count = diff.get("apiserver_request_duration_seconds_count", 0.0)
    mean = diff.get("apiserver_request_duration_seconds_sum", 0.0) / count if count else 0.0
    return [
        Figure(f"{kind}: API writes served per object during convergence (all clients)",
               f"{sum(writes.values()) / objects:.1f} ({top})"),
        Figure(f"{kind}: API reads (GET/LIST) per object; mean API latency (all requests)",
               f"{reads / objects:.1f}; {mean * 1000:.0f} ms over {count:,.0f} requests"),
    ]


# -- a cluster-wide watch: when each object first satisfied a predicate ----------------------------


class FirstSeen(StreamWatch):
    """Watches one plural cluster-wide and records when each object first satisfied ``done``."""

    def __init__(self, api: k8s.CustomObjectsApi, plural: str,
                 done: Callable[[dict[str, Any]], bool]) -> None:
        super().__init__(api.list_cluster_custom_object, GROUP, VERSION, plural)
        self._done = done
        self._seen: dict[str, float] = {}
        self._events: dict[str, int] = {}  # watch events per object: its writes, roughly

    def on_event(self, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        self._events[key] = self._events.get(key, 0) + 1
        if not self._done(obj):
            return
        with self.changed:
            if key not in self._seen:
                self._seen[key] = now
                self.changed.notify_all()

    def events(self, keys: Iterable[str]) -> float:
        """Mean number of watch events (creation and each write) per object of ``keys``."""
        counts = [self._events.get(key, 0) for key in keys]
        return sum(counts) / len(counts) if counts else 0.0

    def wait_all(self, keys: Iterable[str], timeout: float) -> dict[str, float]:
        """perf_counter() when each key was first seen done; missing keys are left out."""
        wanted = set(keys)
        deadline = time.monotonic() + timeout
        with self.changed:
            while not wanted <= self._seen.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(min(left, 5.0))
            return {k: self._seen[k] for k in wanted if k in self._seen}


def enabled(obj: dict[str, Any]) -> bool:
    return bool(obj.get("status", {}).get("phase") == "Enabled")


def key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def receipted(obj: dict[str, Any]) -> bool:
    return bool(obj.get("status", {}).get("receipt"))


def applied(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Applied" and c.get("status") == "True"
               for c in obj.get("status", {}).get("conditions", []) or [])


# -- objects ---------------------------------------------------------------------------------------


def scope(namespace: str, name: str, mxid: str = ALICE) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MemoryScope",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"subject": {"mxid": mxid, "originKind": "native-local"},
                 "agent": {"namespace": namespace, "name": "docs-agent"},
                 "controlRoom": f"!{namespace}-{name}:{HOMESERVER}",
                 "purpose": "personal-preferences", "policyVersion": "2026-11",
                 "profile": "demo", "posture": "enabled"},
    }


def consent(namespace: str, scope_name: str, mxid: str = ALICE) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ConsentRecord",
        "metadata": {"name": f"{scope_name}-grant", "namespace": namespace},
        "spec": {"scopeRef": {"name": scope_name},
                 "subject": {"mxid": mxid, "originKind": "native-local"},
                 "purpose": "personal-preferences", "policyVersion": "2026-11",
                 "decision": "granted"},
    }


def _example() -> tuple[dict[str, Any], str]:
    """The example RetrievalBinding and the example partner JWKS."""
    docs = list(yaml.safe_load_all((REPO_ROOT / "examples" / "30-retrievalbinding.yaml")
                                   .read_text()))
    binding = next(d for d in docs if d and d.get("kind") == "RetrievalBinding")
    jwks = next(d for d in docs if d and d.get("kind") == "ConfigMap")["data"]["jwks.json"]
    return binding, str(jwks)


EXAMPLE_BINDING, EXAMPLE_JWKS = _example()


def binding(namespace: str, name: str, agent: str) -> dict[str, Any]:
    """The example binding in ``namespace`` for its own Agent (one binding per Agent)."""
    obj = yaml.safe_load(yaml.safe_dump(EXAMPLE_BINDING))  # a deep copy
    obj["metadata"] = {"name": name, "namespace": namespace}
    spec = obj["spec"]
    spec["agent"] = {"namespace": namespace, "name": agent}
    spec["mcpServer"]["namespace"] = namespace
    spec["proxy"]["namespace"] = namespace
    spec["peers"]["embeddings"]["namespace"] = namespace
    spec["retrievalService"]["namespace"] = RETRIEVAL_NS
    spec["peers"]["database"]["namespace"] = RETRIEVAL_NS
    spec["peers"]["observability"] = []
    return dict(obj)


# -- the client ------------------------------------------------------------------------------------


def api_client(kubeconfig: Path, threads: int) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig),  # type: ignore[no-untyped-call]
                                client_configuration=cfg)
    cfg.connection_pool_maxsize = max(threads, 4) + 2  # the watches need their own
    return k8s.ApiClient(cfg)


def run_all(pool: ThreadPoolExecutor, calls: Sequence[Callable[[], object]]) -> float:
    """Run ``calls`` on the pool; seconds from the first start to the last finish."""
    start = time.perf_counter()
    for future in [pool.submit(call) for call in calls]:
        future.result()
    return time.perf_counter() - start


@dataclass
class Figure:
    name: str
    value: str
    target: str = "-"


@dataclass
class Convergence:
    """One kind brought to its ready state, against raw writes of the same kind."""

    kind: str
    count: int
    raw_create: float  # seconds for `count` raw creates (pairs for scopes)
    raw_patch: float  # seconds for `count` raw status patches
    creates: float  # seconds to create `count` objects in the watched namespaces
    converged: float  # seconds from the first create to the last ready object
    ready: int
    latencies: list[float]  # per object: ready - its create finished
    usage: Usage
    events: float  # watch events per object up to convergence (creation + writes)
    requests: list[Figure]  # what the API server served meanwhile

    def figures(self, target: str, writes_note: str = "") -> list[Figure]:
        patch_rate = self.count / self.raw_patch
        create_rate = self.count / self.raw_create
        rate = self.ready / self.converged if self.converged else 0.0
        lat = sorted(self.latencies) or [0.0]
        return [
            Figure(f"{self.kind}: raw creates (baseline, unwatched namespace)",
                   f"{create_rate:,.0f}/s ({self.count:,} in {self.raw_create:.1f} s)"),
            Figure(f"{self.kind}: raw status patches (baseline, same objects)",
                   f"{patch_rate:,.0f}/s ({self.count:,} in {self.raw_patch:.1f} s)"),
            Figure(f"{self.kind}: created in watched namespaces",
                   f"{self.count / self.creates:,.0f}/s ({self.count:,} in {self.creates:.1f} s)"),
            Figure(f"{self.kind}: first create -> last ready",
                   f"{self.ready:,}/{self.count:,} ready in {self.converged:.1f} s = "
                   f"{rate:,.1f}/s"),
            Figure(f"{self.kind}: convergence / raw status-patch throughput",
                   f"{rate / patch_rate:.1%}" + writes_note, target),
            Figure(f"{self.kind}: convergence / raw create throughput",
                   f"{rate / create_rate:.1%}"),
            Figure(f"{self.kind}: per object, create returned -> ready, p50 / p99 / max",
                   f"{lat[len(lat) // 2]:.2f} / {lat[min(len(lat) - 1, int(.99 * len(lat)))]:.2f}"
                   f" / {lat[-1]:.2f} s"),
            Figure(f"{self.kind}: watch events per object until converged (create + writes)",
                   f"{self.events:.1f}"),
            *self.requests,
            Figure(f"{self.kind}: CPU during convergence", self.usage.line()),
        ]


def converge(  # noqa: PLR0917
    plane: LocalControlPlane, api: k8s.CustomObjectsApi, pool: ThreadPoolExecutor,
    watch: FirstSeen, kind: str,
    raw_objects: list[list[tuple[str, dict[str, Any]]]], raw_patch: Callable[[int], object],
    objects: list[list[tuple[str, dict[str, Any]]]], pid: int, timeout: float,
) -> Convergence:
    """``raw_objects`` / ``objects``: per ready object, the (plural, body) creates it needs."""

    def creator(group: list[tuple[str, dict[str, Any]]],
                done: dict[str, float] | None = None) -> Callable[[], None]:
        def call() -> None:
            for plural, body in group:
                meta = body["metadata"]
                api.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], plural,
                                                    body)
            if done is not None:
                first = group[0][1]["metadata"]
                done[f"{first['namespace']}/{first['name']}"] = time.perf_counter()
        return call

    count = len(objects)
    raw_create = run_all(pool, [creator(g) for g in raw_objects])
    raw_patch_s = run_all(pool, [lambda i=i: raw_patch(i) for i in range(count)])  # type: ignore[misc]
    keys = [f"{g[0][1]['metadata']['namespace']}/{g[0][1]['metadata']['name']}" for g in objects]
    created: dict[str, float] = {}
    before = api_requests(plane)
    with Usage(pid) as usage:
        start = time.perf_counter()
        creates = run_all(pool, [creator(g, created) for g in objects])
        seen = watch.wait_all(keys, timeout)
    requests = request_figures(kind, before, api_requests(plane), count)
    converged = (max(seen.values()) - start) if seen else 0.0
    if len(seen) < count:
        print(f"  {count - len(seen)} of {count} {kind} not ready within {timeout:.0f} s",
              flush=True)
    return Convergence(kind, count, raw_create, raw_patch_s, creates, converged, len(seen),
                       [seen[k] - created[k] for k in seen], usage, watch.events(keys),
                       requests)


def memory_figure(label: str, pid: int, target: str = "-") -> Figure:
    rss, hwm = proc_memory(pid)
    return Figure(f"operator memory {label}", f"VmRSS {rss:.1f} MiB, VmHWM {hwm:.1f} MiB", target)


# -- (c) offboarding -------------------------------------------------------------------------------


def _vectors(count: int) -> list[list[float]]:
    rng = random.Random(23)
    return [[rng.uniform(-1.0, 1.0) for _ in range(DIM)] for _ in range(count)]


async def fill(store: MemoryStore, accesses: Sequence[Access], entries: int) -> None:
    """Save ``entries`` synthetic entries in each scope (content never printed)."""
    vectors = _vectors(entries)
    for access in accesses:
        for i in range(entries):
            await store.save(access, f"synthetic preference number {i}", embedding=vectors[i])


async def remaining(pool: Any, keys: Sequence[str]) -> int:
    async with pool.acquire() as conn:
        return int(await conn.fetchval(
            "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = ANY($1)", list(keys)))


async def direct_offboarding(dsn: str, scopes: int, entries: int) -> tuple[float, int, int]:
    """The same flow on the store alone: (seconds, scopes verified, rows left)."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        store = MemoryStore(pool)
        accesses = []
        for i in range(scopes):
            spec = MemoryScopeSpec.model_validate(scope("direct", f"carol-{i}", CAROL)["spec"])
            record = ScopeRecord.from_spec("direct", f"carol-{i}", spec)
            await store.ensure_scope(record)
            accesses.append(Access.for_scope(record, await store.grant(record.scope_key)))
        await fill(store, accesses, entries)
        start = time.perf_counter()
        outcomes = await offboard(store, Principal(mxid=CAROL,
                                                   origin_kind=OriginKind.NATIVE_LOCAL), [])
        elapsed = time.perf_counter() - start
        left = await remaining(pool, [a.scope_key for a in accesses])
        return elapsed, sum(o.verified for o in outcomes), left
    finally:
        await pool.close()


async def operator_offboarding(  # noqa: PLR0917
    dsn: str, api: k8s.CustomObjectsApi, pool: ThreadPoolExecutor, watch: FirstSeen,
    scopes: int, entries: int, pid: int,
) -> list[Figure]:
    names = [f"bob-{i}" for i in range(scopes)]
    keys = [f"{OFFBOARD_NS}/{n}" for n in names]

    def pair(name: str) -> Callable[[], None]:
        def call() -> None:
            api.create_namespaced_custom_object(GROUP, VERSION, OFFBOARD_NS, "memoryscopes",
                                                scope(OFFBOARD_NS, name, BOB))
            api.create_namespaced_custom_object(GROUP, VERSION, OFFBOARD_NS, "consentrecords",
                                                consent(OFFBOARD_NS, name, BOB))
        return call

    await asyncio.to_thread(run_all, pool, [pair(n) for n in names])
    seen = await asyncio.to_thread(watch.wait_all, keys, 600.0)
    if len(seen) < scopes:
        raise SystemExit(f"only {len(seen)} of {scopes} offboarding scopes reached Enabled")
    db = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        store = MemoryStore(db)
        accesses = []
        for name in names:
            obj = await asyncio.to_thread(api.get_namespaced_custom_object, GROUP, VERSION,
                                          OFFBOARD_NS, "memoryscopes", name)
            spec = MemoryScopeSpec.model_validate(obj["spec"])  # type: ignore[index]
            record = ScopeRecord.from_spec(OFFBOARD_NS, name, spec)
            accesses.append(Access.for_scope(record, obj["status"]["consentGeneration"]))  # type: ignore[index]
        await fill(store, accesses, entries)
        before = await remaining(db, keys)
        body = manifest(Principal(mxid=BOB, origin_kind=OriginKind.NATIVE_LOCAL))
        name = body["metadata"]["name"]
        with Usage(pid) as usage:
            start = time.perf_counter()
            await asyncio.to_thread(api.create_cluster_custom_object, GROUP, VERSION,
                                    "principaloffboardings", body)
            status: dict[str, Any] = {}
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                live: Any = await asyncio.to_thread(api.get_cluster_custom_object, GROUP,
                                                    VERSION, "principaloffboardings", name)
                status = dict(live.get("status") or {})
                if status.get("phase") == "ReadyForDeactivation":
                    break
                await asyncio.sleep(0.02)
            elapsed = time.perf_counter() - start
        left = await remaining(db, keys)
    finally:
        await db.close()
    direct, verified, direct_left = await direct_offboarding(dsn, scopes, entries)
    label = f"offboarding {scopes} scopes x {entries} entries"
    return [
        Figure(f"{label}: baseline, offboarding.flow.offboard on the store directly",
               f"{direct:.2f} s ({verified} verified, {direct_left} rows left)"),
        Figure(f"{label}: PrincipalOffboarding create -> {status.get('phase', '?')}",
               f"{elapsed:.2f} s = {elapsed / direct:.2f}x the direct flow "
               f"(found {status.get('scopesFound')}, erased {status.get('scopesErased')}, "
               f"failed {status.get('scopesFailed')}; rows {before} -> {left})"),
        Figure(f"{label}: CPU", usage.line()),
    ]


# -- main ------------------------------------------------------------------------------------------


def ensure_namespaces(plane: LocalControlPlane, core: k8s.CoreV1Api,
                      watched: Sequence[str]) -> None:
    for namespace in [*watched, RAW_NS, OFFBOARD_NS, RETRIEVAL_NS]:
        plane.ensure_namespace(namespace)
    for namespace in [*watched, RAW_NS]:  # the bindings' proxy namespace holds the JWKS
        core.create_namespaced_config_map(namespace, {  # type: ignore[arg-type]
            "metadata": {"name": "partner-jwks"}, "data": {"jwks.json": EXAMPLE_JWKS}})


def resync_env(args: argparse.Namespace) -> dict[str, str]:
    """Timer intervals for the operator; unset means the operator's defaults (30 s, 60 s)."""
    env = {}
    if args.scope_resync:
        env["FGENTIC_SCOPE_RESYNC_SECONDS"] = str(args.scope_resync)
    if args.binding_resync:
        env["FGENTIC_BINDING_RESYNC_SECONDS"] = str(args.binding_resync)
    return env


def bench(work: Path, args: argparse.Namespace) -> list[Figure]:  # noqa: PLR0915
    figures: list[Figure] = []
    watched = [f"scale-{i}" for i in range(args.namespaces)]
    with local_postgres(work / "postgres") as pg, \
            local_control_plane(work / "controlplane") as plane:
        dsn = asyncio.run(pg.create_database("bench_scale", extensions=("vector",)))
        client = api_client(plane.kubeconfig, args.threads)
        api = k8s.CustomObjectsApi(client)
        ensure_namespaces(plane, k8s.CoreV1Api(client), watched)
        operator = OperatorProcess(plane.kubeconfig, work / "operator",
                                   namespaces=[*watched, OFFBOARD_NS], dsn=dsn,
                                   local_homeserver=HOMESERVER, env=resync_env(args))
        scopes_seen = FirstSeen(api, "memoryscopes", enabled).start()
        bindings_seen = FirstSeen(api, "retrievalbindings", applied).start()
        consents_seen = FirstSeen(api, "consentrecords", receipted).start()
        pool = ThreadPoolExecutor(args.threads)
        try:
            with operator:
                operator.wait_for_log("content store ready")
                assert operator.proc is not None
                pid = operator.proc.pid
                time.sleep(2.0)
                figures.append(memory_figure("idle (no objects)", pid))
                # Warm-up: one scope and one binding through every path (not counted).
                api.create_namespaced_custom_object(GROUP, VERSION, watched[0], "memoryscopes",
                                                    scope(watched[0], "warmup"))
                api.create_namespaced_custom_object(GROUP, VERSION, watched[0],
                                                    "consentrecords", consent(watched[0],
                                                                              "warmup"))
                api.create_namespaced_custom_object(
                    GROUP, VERSION, watched[0], "retrievalbindings",
                    binding(watched[0], "warmup", "warmup-agent"))
                scopes_seen.wait_all([f"{watched[0]}/warmup"], 120)
                bindings_seen.wait_all([f"{watched[0]}/warmup"], 120)
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())

                if args.scopes:
                    banner(f"(a) {args.scopes:,} MemoryScopes + ConsentRecords -> Enabled")
                    raw = [[("memoryscopes", scope(RAW_NS, f"raw-{i}")),
                            ("consentrecords", consent(RAW_NS, f"raw-{i}"))]
                           for i in range(args.scopes)]
                    objs = [[("memoryscopes", scope(ns, f"s-{i}")),
                             ("consentrecords", consent(ns, f"s-{i}"))]
                            for i in range(args.scopes)
                            for ns in [watched[i % len(watched)]]]

                    def patch_scope(i: int) -> None:
                        api.patch_namespaced_custom_object_status(
                            GROUP, VERSION, RAW_NS, "memoryscopes", f"raw-{i}",
                            {"status": {"entryCount": 1 + i % 100}})

                    result = converge(plane, api, pool, scopes_seen, "MemoryScopes", raw,
                                      patch_scope, objs, pid, args.timeout)
                    figures += result.figures(">= 50 %", " (a pair of creates each)")
                    consent_keys = [key(g[1][1]) for g in objs]
                    figures.append(Figure(
                        "ConsentRecords: watch events per object until converged",
                        f"{consents_seen.events(consent_keys):.1f}"))
                    for figure in figures[-12:]:
                        print(f"  {figure.name}: {figure.value}", flush=True)
                    figures.append(memory_figure(f"after {args.scopes:,} scopes Enabled", pid,
                                                 "<= 200 MiB"))
                    with Usage(pid) as rest:
                        time.sleep(args.settle)
                    figures.append(memory_figure(
                        f"{args.settle:.0f} s later (a resync round of every scope)", pid,
                        "<= 200 MiB"))
                    figures.append(Figure(f"at rest with {args.scopes:,} scopes "
                                          "(timers only)", rest.line()))
                    for figure in figures[-3:]:
                        print(f"  {figure.name}: {figure.value}", flush=True)

                if args.bindings:
                    banner(f"(b) {args.bindings:,} RetrievalBindings -> Applied")
                    raw = [[("retrievalbindings", binding(RAW_NS, f"raw-{i}", f"raw-agent-{i}"))]
                           for i in range(args.bindings)]
                    objs = [[("retrievalbindings", binding(ns, f"b-{i}", f"agent-{i}"))]
                            for i in range(args.bindings)
                            for ns in [watched[i % len(watched)]]]

                    def patch_binding(i: int) -> None:
                        api.patch_namespaced_custom_object_status(
                            GROUP, VERSION, RAW_NS, "retrievalbindings", f"raw-{i}",
                            {"status": {"observedGeneration": 1 + i % 100}})

                    result = converge(plane, api, pool, bindings_seen, "RetrievalBindings", raw,
                                      patch_binding, objs, pid, args.timeout)
                    figures += result.figures("-", " (13 server-side applies + list/prune "
                                                   "+ status each)")
                    for figure in figures[-11:]:
                        print(f"  {figure.name}: {figure.value}", flush=True)
                    figures.append(memory_figure(
                        f"after {args.scopes:,} scopes and {args.bindings:,} bindings", pid,
                        "<= 200 MiB"))
                    with Usage(pid) as rest:
                        time.sleep(args.settle)
                    figures.append(Figure(f"at rest with {args.scopes:,} scopes and "
                                          f"{args.bindings:,} bindings (timers only)",
                                          rest.line()))
                    figures.append(memory_figure(f"{args.settle:.0f} s later", pid,
                                                 "<= 200 MiB"))
                    for figure in figures[-3:]:
                        print(f"  {figure.name}: {figure.value}", flush=True)

                if args.offboard_scopes:
                    banner(f"(c) offboarding a principal holding {args.offboard_scopes} scopes")
                    off = asyncio.run(operator_offboarding(
                        dsn, api, pool, scopes_seen, args.offboard_scopes, args.entries, pid))
                    figures += off
                    for figure in off:
                        print(f"  {figure.name}: {figure.value}", flush=True)
                    figures.append(memory_figure("at the end", pid, "<= 200 MiB"))
                figures.append(Figure("load average before (a) / at the end",
                                      f"{load} / "
                                      + " ".join(f"{x:.2f}" for x in os.getloadavg())))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            scopes_seen.stop()
            bindings_seen.stop()
            consents_seen.stop()
            client.close()  # type: ignore[no-untyped-call]
    return figures


def render(figures: Sequence[Figure]) -> str:
    header = ("figure", "value", "target")
    rows = [(f.name, f.value, f.target) for f in figures]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [header, tuple("-" * w for w in widths), *rows]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scopes", type=int, default=1000)
    parser.add_argument("--bindings", type=int, default=1000)
    parser.add_argument("--offboard-scopes", type=int, default=100)
    parser.add_argument("--entries", type=int, default=10,
                        help="entries saved per offboarded scope (the scope cap is 100)")
    parser.add_argument("--namespaces", type=int, default=10, help="watched namespaces")
    parser.add_argument("--threads", type=int, default=8, help="client threads for creates")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds to wait after (a) before sampling memory again")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds to wait for convergence of each kind")
    parser.add_argument("--scope-resync", type=float, default=0.0,
                        help="FGENTIC_SCOPE_RESYNC_SECONDS for the operator (default: its own)")
    parser.add_argument("--binding-resync", type=float, default=0.0,
                        help="FGENTIC_BINDING_RESYNC_SECONDS for the operator (default: its own)")
    parser.add_argument("--keep", action="store_true", help="keep logs and server state")
    args = parser.parse_args(argv)
    if not 1 <= args.entries <= 100:
        parser.error("--entries must be 1..100 (the scope's entry cap)")
    print(f"command: {command_line()}")
    print(f"machine: {machine()}; run {uuid.uuid4().hex[:8]}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with scratch_dir("scale", keep=args.keep) as work:
        figures = bench(work, args)
    banner("summary (figures only; nothing is asserted)")
    print(render(figures))
    print(f"command: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
