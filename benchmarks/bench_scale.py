"""Operator at scale: convergence of many MemoryScopes and RetrievalBindings against the raw API
write throughput of the same run, offboarding of a principal holding many scopes, and the
operator's resident memory.

    .venv/bin/python -m benchmarks.bench_scale [--scopes 1000] [--bindings 1000]
        [--offboard-scopes 100] [--burst-offboardings 3] [--entries 10] [--namespaces 10]
        [--erasure-process]
        [--threads 8] [--restart] [--keep]

    # issue 39's run (docs/scale.md): every figure of its table, in one run
    .venv/bin/python -m benchmarks.bench_scale --scopes 10000 --bindings 10 --offboard-scopes 10

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
    During (a)'s creation burst, ``--burst-offboardings`` N more principals (3; 0: none) with
    as many scopes are offboarded through the operator, one after another (never two at once),
    the first once half of (a)'s pairs are created; their scopes and entries are made before
    (a) (``@burst-op-<i>``). Each is set against the same baseline: an offboarding must not
    wait behind the queue. Their few writes, and the plain API writes below, count in (a)'s
    while within it. That ratio mixes the operator's queueing with the machine the burst
    saturates, so each is also set against the same flow *under the same load*: N + 1 more
    principals with as many scopes and entries (made before (a), on the store alone:
    ``@burst-direct-<i>``) are offboarded directly, one before each operator offboarding and
    one after the last (direct, op 1, direct, op 2, ..., op N, direct), and the mean of the two
    right before and right after an offboarding is its under-load baseline. Sequential, not
    concurrent: run beside it, the direct flow would compete with the operator's own erasure
    for the same two cores and the same database, slowing both and changing the at-rest ratio's
    meaning; bracketing it samples the same phase of the burst on both sides and leaves it
    alone. The direct flow runs in a process of its own (its pool connected before (a)), as the
    operator does: in this process it would wait for the GIL behind the client threads creating
    the burst. Printed per offboarding: its seconds, both ratios, the split a client can see
    (the create's own round trip, until ``create_cluster_custom_object`` returned, and create
    returned -> Ready seen by the watch) and the round trip of one plain API write that is not
    the operator's (a merge-patch of an annotation on a ConfigMap in the unwatched namespace)
    right before and right after it: how long the API server alone takes to answer a write
    under that load (the offboarding writes its Ready status with one PATCH); printed only, in
    no ratio. Then the medians over the offboardings within the burst (seconds, both ratios;
    min/max beside; the plain write's median): one sample swings widely with the burst's phase.
    The burst ends when (a) converges (or its ``--timeout`` passes); an offboarding whose
    direct flow right after ended later still runs, is printed "after the burst" and is left
    out of the medians, whose line says how many were within. The issue table's row gives the
    medians.
(d) Footprint: operator VmRSS and VmHWM (/proc/<pid>/status) idle, after (a), after a scope
    resync round, after (b) and after (c), each with its erasure process's own pages added
    (Private_Clean + Private_Dirty of /proc/<child>/smaps_rollup; the pages it shares are the
    operator's, counted once). Target <= 200 MiB with 1,000 scopes.
(e) Writes at rest: while nothing changes a scope's spec or consent (``--settle`` seconds after
    (a), and while (b)'s bindings converge) the MemoryScope status patches and patches, the
    ConsentRecord status patches (``apiserver_request_total``), the new Events by involved kind
    (a paged LIST of Events before and after) and the store's rows written (inserted or
    updated) in the window, read from each row's ``xmin`` (the transaction that wrote its live
    version) against the next transaction id at the window's start: exact at both edges, where
    ``pg_stat_user_tables.n_tup_upd`` is published by each backend 1-10 s late and so blurred
    the convergence into the window.
(r) Restart (``--restart``, off by default), after everything above: the operator holding every
    scope is stopped with SIGTERM (its exit timed, SIGKILL after ``EXIT_BOUND``) and a fresh
    process started with the same settings plus a metrics port. Measured: start -> every scope
    reconciled once, read from its ``/metrics``: the memoryscopes work queue's runs started
    (``fgentic_workqueue_queue_duration_seconds_count``) >= the scopes held, with nothing queued
    or running; the writes from the SIGTERM to the end of a ``--settle`` window after that (API
    writes per scope by cause from the watches, store rows by ``xmin``, as in (e)); the new
    process's VmRSS after that window and its CPU over it. An unchanged pair writes nothing.

The run ends with one block, "issue 39 table", whose rows are exactly those of issue 39's table
(docs/scale.md pastes it); ``tests/integration/test_benchmarks_run.py`` runs the benchmark small
and checks that block's rows and counts, never a time.

Content-free: entries are synthetic and never printed; only counts and times are.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import random
import re
import signal
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import asyncpg
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

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
from fgentic_devenv import child_pids, free_port, terminate
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
WRITE_PROBE: Final = "write-probe"  # a ConfigMap in RAW_NS: the plain API write under load
OFFBOARD_NS: Final = "scale-offboard"
RETRIEVAL_NS: Final = "scale-retrieval"
DIM: Final = 768


# -- machine-wide CPU and the operator's process ---------------------------------------------------


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def tree_cpu_seconds(pid: int) -> float:
    """The operator's CPU seconds with its children's (the erasure process's)."""
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in child_pids(pid))


@dataclass
class Usage:
    """Operator CPU (its erasure process's included) and machine CPU over one phase."""

    pid: int
    wall: float = 0.0
    operator_cpu: float = 0.0
    machine: float = 0.0

    def __enter__(self) -> Usage:
        self._t = time.perf_counter()
        self._cpu = tree_cpu_seconds(self.pid)
        self._busy = machine_busy()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self._t
        self.operator_cpu = (tree_cpu_seconds(self.pid) - self._cpu) / self.wall
        busy, total = machine_busy()
        self.machine = (busy - self._busy[0]) / max(1, total - self._busy[1])

    def line(self) -> str:
        return (f"operator {self.operator_cpu:.0%} of one core, machine {self.machine:.0%} busy "
                f"(all {os.cpu_count()} CPUs) over {self.wall:.1f} s")


# -- the API server's own request counters ------------------------------------------------------

_WRITES: Final = {"POST", "PATCH", "PUT", "APPLY", "DELETE"}
_CONFLICT: Final = "CONFLICT"  # key prefix: answers 409/422 (Kopf's conflict retries)


def api_requests(plane: LocalControlPlane) -> dict[str, float]:
    """apiserver_request_total by 'VERB resource[/subresource]', plus the latency sum; the
    409/422 answers once more under 'CONFLICT VERB resource[/subresource]'."""
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
            if metric == "apiserver_request_total" and fields.get("code") in {"409", "422"}:
                counts[f"{_CONFLICT} {name}"] = (counts.get(f"{_CONFLICT} {name}", 0.0)
                                                 + float(value))
    return counts


def _diff(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


@dataclass(frozen=True)
class WriteSplit:
    """API writes split as issue 39 counts them."""

    events: float  # POST/PATCH events (any involved kind)
    status: float  # PATCH/PUT/APPLY of a /status subresource
    patches: float  # PATCH/PUT/APPLY of an object itself
    creates: float  # POST of anything but events (the benchmark's own creates among them)
    other: float  # DELETE and the rest
    conflicts: float  # of all requests, answered 409/422

    @classmethod
    def of(cls, diff: dict[str, float]) -> WriteSplit:
        parts = dict.fromkeys(("events", "status", "patches", "creates", "other"), 0.0)
        for name, value in diff.items():
            verb, _, resource = name.partition(" ")
            if verb not in _WRITES or value <= 0:
                continue
            part = ("events" if resource.split("/")[0] == "events"
                    else "status" if resource.endswith("/status") and verb != "POST"
                    else "creates" if verb == "POST"
                    else "other" if verb == "DELETE" else "patches")
            parts[part] += value
        conflicts = sum(v for k, v in diff.items() if k.startswith(_CONFLICT) and v > 0)
        return cls(**parts, conflicts=conflicts)

    @property
    def total(self) -> float:
        return self.events + self.status + self.patches + self.creates + self.other

    def per(self, objects: int) -> str:
        n = max(1, objects)
        return (f"{self.total / n:.1f} ({self.events / n:.1f} events, {self.status / n:.1f} "
                f"status patches, {self.patches / n:.1f} patches, {self.creates / n:.1f} creates"
                + (f", {self.other / n:.1f} other" if self.other else "")
                + f"; {self.conflicts / n:.2f} conflicts answered 409/422)")


def request_figures(kind: str, before: dict[str, float], after: dict[str, float],
                    objects: int) -> list[Figure]:
    """What the API server served between two snapshots, per object brought to ready."""
    diff = _diff(before, after)
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
        Figure(f"{kind}: API writes per object, split", WriteSplit.of(diff).per(objects)),
        Figure(f"{kind}: API reads (GET/LIST) per object; mean API latency (all requests)",
               f"{reads / objects:.1f}; {mean * 1000:.0f} ms over {count:,.0f} requests"),
    ]


# -- writes at rest: the API server's counters, Events by involved kind, the store's rows -------


def event_uids(core: k8s.CoreV1Api) -> dict[str, frozenset[str]]:
    """The uids of all Events by ``involvedObject.kind`` (paged; Kopf posts each Event as a new
    object with a generated name, so new uids are new Events)."""
    kinds: dict[str, set[str]] = {}
    token: str | None = None
    while True:
        answer: Any = core.list_event_for_all_namespaces(limit=500, _continue=token,
                                                         _preload_content=False)
        page = json.loads(answer.data)
        answer.release_conn()
        for item in page.get("items") or []:
            kind = str((item.get("involvedObject") or {}).get("kind") or "?")
            kinds.setdefault(kind, set()).add(item["metadata"]["uid"])
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return {kind: frozenset(uids) for kind, uids in kinds.items()}


@dataclass(frozen=True)
class Rows:
    """The store's rows at one moment: the next transaction id, and per table of
    ``fgentic_memory`` how many live rows each transaction wrote (``xmin``)."""

    next_xid: int
    writers: dict[str, dict[int, int]]

    def written_since(self, before: Rows) -> dict[str, int]:
        """Per table, the rows whose live version a transaction begun after ``before`` wrote
        (inserted or updated; a row written twice counts once, a deleted one not at all).
        The store is fresh, so its 32-bit transaction ids have not wrapped around."""
        return {table: sum(n for xid, n in by_xid.items() if xid >= before.next_xid)
                for table, by_xid in self.writers.items()}


_TABLES: Final = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                  " WHERE n.nspname = 'fgentic_memory' AND c.relkind IN ('r', 'p')"
                  " AND NOT c.relispartition")


async def row_versions(dsn: str) -> Rows:
    """Who wrote every live row of the content store, read now (exact, unlike the cumulative
    statistics, which each backend publishes only every 1-10 s)."""
    conn = await asyncpg.connect(dsn)
    try:
        # The first transaction id not yet assigned: rows with an xmin from here on are new.
        next_xid = int(await conn.fetchval(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"))
        writers = {}
        for table in [str(r["relname"]) for r in await conn.fetch(_TABLES)]:
            quoted = '"' + table.replace('"', '""') + '"'
            rows = await conn.fetch(f"SELECT xmin::text::bigint AS xid, count(*) AS n "
                                    f"FROM fgentic_memory.{quoted} GROUP BY 1")
            writers[table] = {int(r["xid"]): int(r["n"]) for r in rows}
    finally:
        await conn.close()
    return Rows(next_xid, writers)


@dataclass(frozen=True)
class Snapshot:
    """What had been written by one moment: API requests, Events, store row updates."""

    at: float
    requests: dict[str, float]
    events: dict[str, frozenset[str]]
    rows: Rows


@dataclass(frozen=True)
class Probe:
    plane: LocalControlPlane
    core: k8s.CoreV1Api
    dsn: str

    def __call__(self) -> Snapshot:
        return Snapshot(time.perf_counter(), api_requests(self.plane), event_uids(self.core),
                        asyncio.run(row_versions(self.dsn)))


@dataclass(frozen=True)
class Writes:
    """Writes concerning MemoryScopes between two snapshots (a window of no spec or consent
    change when measured at rest)."""

    seconds: float
    scope_status: float  # PATCH memoryscopes/status
    scope_patches: float  # PATCH memoryscopes (annotations, finalizers)
    consent_status: float  # PATCH consentrecords/status
    api_writes: dict[str, float]  # every write the API server served (any resource but
    # Leases), by 'VERB resource[/subresource]'
    events: dict[str, int]  # new Events by involved kind
    scope_rows: int  # rows of fgentic_memory.scope written (inserted or updated)
    rows: int  # rows of every fgentic_memory table written

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> Writes:
        diff = _diff(before.requests, after.requests)

        def writes(resource: str) -> float:
            return sum(diff.get(f"{verb} {resource}", 0.0) for verb in ("PATCH", "PUT", "APPLY"))

        events = {kind: len(uids - before.events.get(kind, frozenset()))
                  for kind, uids in after.events.items()}
        rows = after.rows.written_since(before.rows)
        # Not the API server's own identity Lease, renewed every 10 s (the operator runs
        # without one here).
        every = {k: v for k, v in diff.items()
                 if k.split(" ")[0] in _WRITES and k.split(" ")[1] != "leases" and v > 0}
        return cls(after.at - before.at, writes("memoryscopes/status"), writes("memoryscopes"),
                   writes("consentrecords/status"), every,
                   {k: v for k, v in events.items() if v},
                   rows.get("scope", 0), sum(rows.values()))

    def _which(self) -> str:
        """What the writes were, when few (at rest: each one is worth a look)."""
        if not self.api_writes or sum(self.api_writes.values()) > 20:
            return ""
        return " (" + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(self.api_writes.items())) + ")"

    def text(self) -> str:
        seconds = max(self.seconds, 1e-9)
        events = sum(self.events.values())
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(self.events.items(),
                                                          key=lambda kv: -kv[1]))
        return (f"{self.scope_status:,.0f} MemoryScope status patches and {events:,} Events "
                f"(~{self.scope_status / seconds:.1f}/s and ~{events / seconds:.1f}/s"
                + (f"; Events on {kinds}" if kinds else "")
                + f"; {self.scope_patches:,.0f} MemoryScope patches, "
                f"{self.consent_status:,.0f} ConsentRecord status patches, "
                f"{sum(self.api_writes.values()):,.0f} API writes in all{self._which()}; "
                "store rows written "
                f"{self.scope_rows:,} of fgentic_memory.scope, {self.rows:,} in all)")


# -- a cluster-wide watch: when each object first satisfied a predicate ----------------------------


Shape = tuple[Any, tuple[str, ...], dict[str, int], int, int]
"""What `what_changed` compares of one object version: generation, finalizers, annotation
key -> hash of its value, hash of the status without Kopf's part, hash of Kopf's part."""


def shape(obj: dict[str, Any]) -> Shape:
    meta, status = obj["metadata"], dict(obj.get("status") or {})
    kopf_part = status.pop("kopf", None)
    return (meta.get("generation"), tuple(meta.get("finalizers") or ()),
            {k: hash(v) for k, v in (meta.get("annotations") or {}).items()},
            hash(json.dumps(status, sort_keys=True)), hash(json.dumps(kopf_part, sort_keys=True)))


def what_changed(before: Shape, after: Shape) -> str:
    """The cause of one write as the watch shows it, by name only (content-free): ``spec``,
    ``finalizers``, each annotation key set or changed (``-key``: removed), ``status`` and
    ``status.kopf`` (Kopf's progress storage); "+"-joined when one version changed several (one
    write, or several the watch missed while it reconnected)."""
    parts = ["spec"] if before[0] != after[0] else []
    parts += ["finalizers"] if before[1] != after[1] else []
    parts += [k if k in after[2] else f"-{k}" for k in sorted(before[2].keys() | after[2].keys())
              if before[2].get(k) != after[2].get(k)]
    parts += ["status"] if before[3] != after[3] else []
    parts += ["status.kopf"] if before[4] != after[4] else []
    return "+".join(parts) or "nothing seen"


class FirstSeen(StreamWatch):
    """Watches one plural cluster-wide and records when each object first satisfied ``done``,
    and what each new version of each object changed (`what_changed`; not in ``RAW_NS``)."""

    def __init__(self, api: k8s.CustomObjectsApi, plural: str,
                 done: Callable[[dict[str, Any]], bool]) -> None:
        super().__init__(api.list_cluster_custom_object, GROUP, VERSION, plural)
        self._done = done
        self._seen: dict[str, float] = {}
        self._events: dict[str, int] = {}  # watch events per object: its writes, roughly
        self._shapes: dict[str, Shape] = {}
        self._versions: dict[str, str] = {}
        self._causes: dict[str, int] = {}

    def causes(self) -> dict[str, int]:
        """Writes seen so far by `what_changed` (a copy: diff two of them for a window)."""
        with self.changed:
            return dict(self._causes)

    def _note(self, key: str, obj: dict[str, Any]) -> None:
        version = str(obj["metadata"].get("resourceVersion"))
        if self._versions.get(key) == version:
            return  # the same version again (the watch re-listed after a reconnect): no write
        self._versions[key] = version
        before, after = self._shapes.get(key), shape(obj)
        self._shapes[key] = after
        if before is not None and not key.startswith(f"{RAW_NS}/"):
            cause = what_changed(before, after)
            self._causes[cause] = self._causes.get(cause, 0) + 1

    def on_event(self, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        self._events[key] = self._events.get(key, 0) + 1
        with self.changed:
            self._note(key, obj)
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
    # the three watches and the offboarding's poll need their own connections
    cfg.connection_pool_maxsize = max(threads, 4) + 6
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
    window: tuple[Snapshot, Snapshot]  # from the first create to convergence

    @property
    def p50(self) -> float:
        lat = sorted(self.latencies) or [0.0]
        return lat[len(lat) // 2]

    @property
    def split(self) -> WriteSplit:
        return WriteSplit.of(_diff(self.window[0].requests, self.window[1].requests))

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
    probe: Probe, api: k8s.CustomObjectsApi, pool: ThreadPoolExecutor,
    watch: FirstSeen, kind: str,
    raw_objects: list[list[tuple[str, dict[str, Any]]]], raw_patch: Callable[[int], object],
    objects: list[list[tuple[str, dict[str, Any]]]], pid: int, timeout: float,
    during: Callable[[threading.Event], object] | None = None, during_bound: float = 0.0,
) -> Convergence:
    """``raw_objects`` / ``objects``: per ready object, the (plural, body) creates it needs.
    ``during`` runs on its own thread once half of ``objects`` are created (in the burst),
    given an event set when the burst ends (every object ready, or ``timeout``); it gets
    ``during_bound`` seconds more to finish, and what it raises is raised here."""
    half, over = threading.Event(), threading.Event()
    failed: list[BaseException] = []

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
                if len(done) >= max(1, len(objects) // 2):
                    half.set()
        return call

    count = len(objects)
    raw_create = run_all(pool, [creator(g) for g in raw_objects])
    raw_patch_s = run_all(pool, [lambda i=i: raw_patch(i) for i in range(count)])  # type: ignore[misc]
    keys = [f"{g[0][1]['metadata']['namespace']}/{g[0][1]['metadata']['name']}" for g in objects]
    created: dict[str, float] = {}

    def side_task() -> None:
        if during is None or not half.wait(timeout):
            return
        try:
            during(over)
        except BaseException as exc:  # raised in the caller's thread, after the join
            failed.append(exc)

    side = threading.Thread(target=side_task, daemon=True)
    before = probe()
    with Usage(pid) as usage:
        start = time.perf_counter()
        side.start()
        creates = run_all(pool, [creator(g, created) for g in objects])
        seen = watch.wait_all(keys, timeout)
        over.set()
    after = probe()
    side.join(timeout + during_bound)  # every wait of ``during`` is bounded
    if side.is_alive():
        raise SystemExit(f"the work during the burst did not end within {during_bound:.0f} s "
                         "of it")
    if failed:
        raise failed[0]
    requests = request_figures(kind, before.requests, after.requests, count)
    converged = (max(seen.values()) - start) if seen else 0.0
    if len(seen) < count:
        print(f"  {count - len(seen)} of {count} {kind} not ready within {timeout:.0f} s",
              flush=True)
    return Convergence(kind, count, raw_create, raw_patch_s, creates, converged, len(seen),
                       [seen[k] - created[k] for k in seen], usage, watch.events(keys),
                       requests, (before, after))


def cause_figure(kind: str, before: dict[str, int], after: dict[str, int],
                 objects: int) -> Figure:
    """Writes per object by what they changed (`what_changed`), from the first create to a
    little after convergence: what each PATCH of the object or its status carried."""
    diff = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    n = max(1, objects)
    return Figure(f"{kind}: writes per object by what they changed (watch; spec, finalizers, "
                  "annotation keys, status, status.kopf)",
                  ", ".join(f"{k} {v / n:.2f}" for k, v in
                            sorted(diff.items(), key=lambda kv: -kv[1])) or "-")


def children_private(pid: int) -> float:
    """The MiB that the operator's child processes (its erasure process) hold alone."""
    total = 0
    for child in child_pids(pid):
        for line in Path(f"/proc/{child}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in {"Private_Clean", "Private_Dirty"}:
                total += int(rest.split()[0])
    return total / 1024


def operator_memory(pid: int) -> tuple[float, float, float]:
    """(VmRSS, VmHWM) of the operator in MiB, its children's own pages added to each, and
    those pages apart."""
    rss, hwm = proc_memory(pid)
    private = children_private(pid)
    return rss + private, hwm + private, private


def memory_figure(label: str, pid: int, target: str = "-") -> Figure:
    rss, hwm, private = operator_memory(pid)
    return Figure(f"operator memory {label}", f"VmRSS {rss:.1f} MiB, VmHWM {hwm:.1f} MiB "
                  f"(the erasure process's own {private:.1f} MiB included)", target)


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


async def direct_principal(store: MemoryStore, mxid: str, scopes: int,
                           entries: int) -> list[str]:
    """``scopes`` scopes of ``mxid`` on the store alone (no API server), ``entries`` entries
    saved in each; their scope keys."""
    prefix = mxid[1:].split(":", 1)[0]
    accesses = []
    for i in range(scopes):
        spec = MemoryScopeSpec.model_validate(scope("direct", f"{prefix}-{i}", mxid)["spec"])
        record = ScopeRecord.from_spec("direct", f"{prefix}-{i}", spec)
        await store.ensure_scope(record)
        accesses.append(Access.for_scope(record, await store.grant(record.scope_key)))
    await fill(store, accesses, entries)
    return [a.scope_key for a in accesses]


async def timed_offboard(store: MemoryStore, pool: Any, mxid: str,
                         keys: Sequence[str]) -> tuple[float, int, int]:
    """``offboarding.flow.offboard`` of ``mxid`` on the store: (seconds, verified, rows left)."""
    start = time.perf_counter()
    outcomes = await offboard(store, Principal(mxid=mxid, origin_kind=OriginKind.NATIVE_LOCAL),
                              [])
    elapsed = time.perf_counter() - start
    return elapsed, sum(o.verified for o in outcomes), await remaining(pool, keys)


async def direct_offboarding(dsn: str, scopes: int, entries: int) -> tuple[float, int, int]:
    """The same flow on the store alone: (seconds, scopes verified, rows left)."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        store = MemoryStore(pool)
        keys = await direct_principal(store, CAROL, scopes, entries)
        return await timed_offboard(store, pool, CAROL, keys)
    finally:
        await pool.close()


WORKER_IDLE: Final = 3600.0  # seconds the direct-flow worker waits for its next command
DIRECT_BOUND: Final = 600.0  # seconds the direct-flow worker gets to answer one command
OFFBOARD_BOUND: Final = 600.0  # seconds an operator offboarding is polled for Ready
WATCH_JOIN: Final = 10.0  # seconds its watch gets after the poll saw Ready
WRITE_BOUND: Final = 60.0  # seconds one plain API write may take (the client's timeout)


async def _serve_direct(dsn: str, conn: Connection) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    store = MemoryStore(pool)
    keys: dict[str, list[str]] = {}
    try:
        # Blocking poll on purpose: between commands this loop has nothing else to run.
        while conn.poll(WORKER_IDLE):
            command = conn.recv()
            if command[0] == "prepare":
                keys[command[1]] = await direct_principal(store, *command[1:])
                conn.send(len(keys[command[1]]))
            elif command[0] == "offboard":
                conn.send(await timed_offboard(store, pool, command[1], keys[command[1]]))
            else:
                break
    finally:
        await pool.close()


def direct_worker(dsn: str, conn: Connection) -> None:
    """The direct flow on command, in a process of its own: ``("prepare", mxid, scopes,
    entries)`` makes a principal's scopes and entries, ``("offboard", mxid)`` answers (seconds,
    verified, rows left), anything else (or no command for ``WORKER_IDLE`` s) ends it."""
    asyncio.run(_serve_direct(dsn, conn))


class DirectFlow:
    """The parent's end of :func:`direct_worker` (spawned: this process runs threads)."""

    def __init__(self, dsn: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=direct_worker, args=(dsn, child), daemon=True)
        self._proc.start()
        child.close()

    def ask(self, *command: object, timeout: float = DIRECT_BOUND) -> Any:
        self._conn.send(command)
        if not self._conn.poll(timeout):
            raise SystemExit(f"the direct-flow worker did not answer {command[0]!r} within "
                             f"{timeout:.0f} s")
        return self._conn.recv()

    def close(self) -> None:
        with suppress(OSError):
            self._conn.send(("stop",))
        self._proc.join(10.0)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10.0)
        self._conn.close()


async def enabled_principal(  # noqa: PLR0917
    dsn: str, api: k8s.CustomObjectsApi, pool: ThreadPoolExecutor, watch: FirstSeen,
    mxid: str, scopes: int, entries: int,
) -> list[str]:
    """``scopes`` Enabled MemoryScopes of ``mxid`` in the offboarding namespace, ``entries``
    entries saved in each; their keys."""
    prefix = mxid[1:].split(":", 1)[0]
    names = [f"{prefix}-{i}" for i in range(scopes)]
    keys = [f"{OFFBOARD_NS}/{n}" for n in names]

    def pair(name: str) -> Callable[[], None]:
        def call() -> None:
            api.create_namespaced_custom_object(GROUP, VERSION, OFFBOARD_NS, "memoryscopes",
                                                scope(OFFBOARD_NS, name, mxid))
            api.create_namespaced_custom_object(GROUP, VERSION, OFFBOARD_NS, "consentrecords",
                                                consent(OFFBOARD_NS, name, mxid))
        return call

    await asyncio.to_thread(run_all, pool, [pair(n) for n in names])
    seen = await asyncio.to_thread(watch.wait_all, keys, 600.0)
    if len(seen) < scopes:
        raise SystemExit(f"only {len(seen)} of {scopes} offboarding scopes reached Enabled")
    db = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        accesses = []
        for name in names:
            obj = await asyncio.to_thread(api.get_namespaced_custom_object, GROUP, VERSION,
                                          OFFBOARD_NS, "memoryscopes", name)
            spec = MemoryScopeSpec.model_validate(obj["spec"])  # type: ignore[index]
            record = ScopeRecord.from_spec(OFFBOARD_NS, name, spec)
            accesses.append(Access.for_scope(record, obj["status"]["consentGeneration"]))  # type: ignore[index]
        await fill(MemoryStore(db), accesses, entries)
    finally:
        await db.close()
    return keys


DirectRun = tuple[float, int, int]
"""One direct flow: (seconds, scopes verified, rows left)."""


@dataclass(frozen=True)
class Offboarding:
    """One PrincipalOffboarding through the operator, against the direct flow."""

    seconds: float
    """Create -> the first watch event showing ReadyForDeactivation (what any watcher sees)."""
    direct: float
    status: dict[str, Any]
    rows_before: int
    rows_left: int
    usage: Usage
    polled: float
    """Create -> a GET showing it, polled every 20 ms (up to a poll interval and a GET late)."""
    created: float
    """The create's own round trip: until ``create_cluster_custom_object`` returned."""
    loaded: tuple[DirectRun, DirectRun] | None = None
    """The direct flow under the same load, right before and right after; set for the
    offboardings during (a)'s burst."""
    writes: tuple[float, float] | None = None
    """A plain API write's round trip (seconds) right before and right after; burst only."""
    after_burst: bool = False
    """(a)'s burst had ended when its direct flow right after did: left out of the medians."""
    stages: tuple[float, float] | None = None
    """The operator's own time for this run (its ``fgentic_offboarding_stage_seconds``):
    the erasure in the store, then the Ready status write."""

    @property
    def ratio(self) -> float:
        return self.seconds / self.direct if self.direct else 0.0

    @property
    def loaded_flow(self) -> float:
        """The under-load baseline: the mean of the direct flows right before and after."""
        return 0.0 if self.loaded is None else (self.loaded[0][0] + self.loaded[1][0]) / 2

    @property
    def loaded_ratio(self) -> float:
        return self.seconds / self.loaded_flow if self.loaded_flow else 0.0

    def split(self) -> str:
        """What a client sees of the time, and the operator's own split of its run (its
        metrics): the rest is the watch event's way to the handler and Ready's to the client.
        The Ready write ends when the operator has read the PATCH's answer, which can be after
        the watch delivered Ready (its thread waiting for the interpreter): the rest is then
        negative."""
        return (f"create's own round trip {self.created:.2f} s, create returned -> Ready seen "
                f"by the watch {self.seconds - self.created:.2f} s ({self.stages_text()})")

    def stages_text(self) -> str:
        if self.stages is None:
            return "the operator's split not read"
        erasure, write = self.stages
        rest = self.seconds - self.created - erasure - write
        return (f"in the operator: erasure {1000 * erasure:.0f} ms, Ready write "
                f"{1000 * write:.0f} ms, the rest {1000 * rest:.0f} ms")

    def under_load(self) -> str:
        if self.loaded is None:
            return "-"
        (before, v0, l0), (after, v1, l1) = self.loaded
        return (f"{self.loaded_ratio:.2f}x the flow under the same load ({self.loaded_flow:.2f} s: "
                f"{before:.2f} s right before, {after:.2f} s right after; {v0} + {v1} verified, "
                f"{l0 + l1} rows left)")

    def burst_text(self) -> str:
        """One offboarding during the burst: against the flow at rest (the issue's figure) and
        against the flow under the same load, with the split a client sees."""
        return (f"{self.seconds:.2f} s ({self.ratio:.2f}x the flow at rest; "
                f"{self.under_load()}; {self.split()}; {self.counts()})")

    def counts(self) -> str:
        return (f"found {self.status.get('scopesFound')}, erased {self.status.get('scopesErased')}"
                f", failed {self.status.get('scopesFailed')}; rows {self.rows_before} -> "
                f"{self.rows_left}; polled every 20 ms: {self.polled:.2f} s")

    def text(self) -> str:
        return (f"{self.seconds:.2f} s = {self.ratio:.2f}x the direct flow "
                f"({self.status.get('phase', '?')}; {self.stages_text()}; {self.counts()})")


def watch_ready(api: k8s.CustomObjectsApi, name: str, since: str, seen: list[float]) -> None:
    """Append perf_counter() when a watch from resourceVersion ``since`` first shows the
    offboarding ``name`` ReadyForDeactivation: no event after ``since`` is missed, however
    late the stream connects (bounded by the server-side timeout)."""
    watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
    for event in watch.stream(  # type: ignore[no-untyped-call]
            api.list_cluster_custom_object, GROUP, VERSION, "principaloffboardings",
            resource_version=since, field_selector=f"metadata.name={name}",
            timeout_seconds=600):
        if (event["object"].get("status") or {}).get("phase") == "ReadyForDeactivation":
            seen.append(time.perf_counter())
            watch.stop()  # type: ignore[no-untyped-call]


async def operator_offboarding(dsn: str, api: k8s.CustomObjectsApi, mxid: str,
                               keys: Sequence[str], *, direct: float, pid: int,
                               metrics_port: int) -> Offboarding:
    """Create the PrincipalOffboarding of ``mxid`` (whose scopes are ``keys``) and time it to
    ``ReadyForDeactivation``: seen by a watch (from before the create), and by a GET every
    20 ms (bounded; the watch's figure falls back to it). The operator's own split of its run
    is read from its ``/metrics`` before and after (``stage_sums``)."""
    db = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        before = await remaining(db, keys)
        stages_before = await asyncio.to_thread(stage_sums, metrics_port)
        body = manifest(Principal(mxid=mxid, origin_kind=OriginKind.NATIVE_LOCAL))
        name = body["metadata"]["name"]
        listed: Any = await asyncio.to_thread(api.list_cluster_custom_object, GROUP, VERSION,
                                              "principaloffboardings")
        seen: list[float] = []
        watcher = threading.Thread(target=watch_ready, daemon=True, args=(
            api, name, str(listed["metadata"]["resourceVersion"]), seen))
        watcher.start()
        with Usage(pid) as usage:
            start = time.perf_counter()
            await asyncio.to_thread(api.create_cluster_custom_object, GROUP, VERSION,
                                    "principaloffboardings", body)
            created = time.perf_counter() - start
            status: dict[str, Any] = {}
            deadline = time.monotonic() + OFFBOARD_BOUND
            while time.monotonic() < deadline:
                live: Any = await asyncio.to_thread(api.get_cluster_custom_object, GROUP,
                                                    VERSION, "principaloffboardings", name)
                status = dict(live.get("status") or {})
                if status.get("phase") == "ReadyForDeactivation":
                    break
                await asyncio.sleep(0.02)
            polled = time.perf_counter() - start
        await asyncio.to_thread(watcher.join, WATCH_JOIN)  # bounded: its event is due by now
        left = await remaining(db, keys)
        stages_after = await asyncio.to_thread(stage_sums, metrics_port)
    finally:
        await db.close()
    watched = seen[0] - start if seen else polled
    stages = tuple(stages_after.get(stage, 0.0) - stages_before.get(stage, 0.0)
                   for stage in OFFBOARDING_STAGES)
    return Offboarding(watched, direct, status, before, left, usage, polled, created,
                       stages=(stages[0], stages[1]))


OFFBOARDING_STAGES: Final = ("erasure", "ready_write")
"""The stages of ``fgentic_offboarding_stage_seconds``, in order."""
_STAGE_SUM: Final = re.compile(
    r'^fgentic_offboarding_stage_seconds_sum\{stage="(\w+)"\} (\S+)$', re.M)


def stage_sums(port: int) -> dict[str, float]:
    """``fgentic_offboarding_stage_seconds_sum`` by stage on the operator's ``/metrics``
    (empty before its first offboarding labels them)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {stage: float(value) for stage, value in _STAGE_SUM.findall(text)}


# -- (c) during (a)'s burst: offboardings in sequence, each between two direct flows ---------------


def burst_schedule(n: int) -> list[tuple[str, str, str]]:
    """The ``n`` offboardings through the operator during the burst, in order, each as (direct
    flow right before, the operator's principal, direct flow right after). Neighbours share a
    bracket: direct 0, op 1, direct 1, op 2, ..., op n, direct n (n + 1 direct principals)."""
    def mxid(role: str, i: int) -> str:
        return f"@burst-{role}-{i}:{HOMESERVER}"

    return [(mxid("direct", i - 1), mxid("op", i), mxid("direct", i)) for i in range(1, n + 1)]


def burst_bound(n: int) -> float:
    """Seconds ``n`` bracketed offboardings may take at most, every wait at its bound."""
    return n * (2 * WRITE_BOUND + OFFBOARD_BOUND + WATCH_JOIN + DIRECT_BOUND) + DIRECT_BOUND


def plain_write(core: k8s.CoreV1Api, serial: int) -> float:
    """Seconds for one API write that is not the operator's: a merge-patch of an annotation on
    the ``WRITE_PROBE`` ConfigMap in the unwatched namespace (its value a counter)."""
    body = {"metadata": {"annotations": {"bench.fgentic.dev/serial": str(serial)}}}
    start = time.perf_counter()
    core.patch_namespaced_config_map(WRITE_PROBE, RAW_NS, body,
                                     _content_type="application/merge-patch+json",
                                     _request_timeout=WRITE_BOUND)
    return time.perf_counter() - start


def run_burst(
    schedule: Sequence[tuple[str, str, str]], direct: Callable[[str], DirectRun],
    operator: Callable[[str], Offboarding], write: Callable[[], float], over: threading.Event,
) -> list[Offboarding]:
    """Run ``schedule`` in sequence, never two at once: the direct flow, then per offboarding a
    plain API write, the operator's offboarding, a plain API write and the next direct flow.
    A sample is after the burst if ``over`` was set when its direct flow right after ended
    (the remaining ones still run: the count of those within is printed)."""
    samples: list[Offboarding] = []
    if not schedule:
        return samples
    before = direct(schedule[0][0])
    for _, mxid, next_direct in schedule:
        ahead = write()
        sample = operator(mxid)
        behind = write()
        after = direct(next_direct)
        samples.append(replace(sample, loaded=(before, after), writes=(ahead, behind),
                               after_burst=over.is_set()))
        before = after
    return samples


def _spread(values: Sequence[float], unit: str) -> str:
    return f"{min(values):.2f}/{max(values):.2f}{unit}"


@dataclass(frozen=True)
class BurstOffboardings:
    """The offboardings through the operator during (a)'s burst; the medians are over those
    whose whole bracket (direct flow, offboarding, direct flow) ran within the burst."""

    samples: tuple[Offboarding, ...]

    @property
    def within(self) -> list[Offboarding]:
        return [s for s in self.samples if not s.after_burst]

    def writes_ms(self) -> list[float]:
        """The plain API writes around the offboardings within the burst, in ms."""
        return [1000 * w for s in self.within if s.writes is not None for w in s.writes]

    def api_write(self) -> str:
        writes = self.writes_ms()
        if not writes:
            return "none within the burst"
        return (f"{statistics.median(writes):.0f} ms median ({len(writes)} writes, min/max "
                f"{min(writes):.0f}/{max(writes):.0f} ms)")

    def counts(self) -> str:
        """Every sample's erasure, within the burst or after it, and its direct flows'."""
        def total(field: str) -> int:
            return sum(int(s.status.get(field) or 0) for s in self.samples)

        brackets = [s.loaded for s in self.samples if s.loaded is not None]
        # each direct flow once: a shared bracket is one sample's after and the next's before
        runs = [brackets[0][0], *(after for _, after in brackets)] if brackets else []
        verified = sum(run[1] for run in runs)
        left = sum(run[2] for run in runs)
        return (f"all {len(self.samples)}: found {total('scopesFound')}, erased "
                f"{total('scopesErased')}, failed {total('scopesFailed')}; rows "
                f"{sum(s.rows_before for s in self.samples)} -> "
                f"{sum(s.rows_left for s in self.samples)}; their {len(runs)} direct flows "
                f"{verified} verified, {left} rows left")

    def summary(self) -> str:
        """The medians of the seconds and of both ratios, with min/max, over those within."""
        within = self.within
        n, k = len(self.samples), len(within)
        if not within:
            return f"none of {n} within the burst (each is printed, after it); {self.counts()}"
        seconds = [s.seconds for s in within]
        rest = [s.ratio for s in within]
        loaded = [s.loaded_ratio for s in within]
        med = statistics.median
        return (f"median of {k}: {med(seconds):.2f} s ({med(rest):.2f}x the flow at rest; "
                f"{med(loaded):.2f}x the flow under the same load; {k} of {n} within the "
                f"burst; min/max {_spread(seconds, ' s')}, {_spread(rest, 'x')} the flow at "
                f"rest, {_spread(loaded, 'x')} under the same load); medians: create's own "
                f"round trip {med(s.created for s in within):.2f} s, create returned -> Ready "
                f"seen by the watch {med(s.seconds - s.created for s in within):.2f} s, "
                f"polled every 20 ms: {med(s.polled for s in within):.2f} s; "
                f"{self.stage_medians()}; an API write under the same load: "
                f"{self.api_write()}; {self.counts()}")

    def stage_medians(self) -> str:
        """The operator's own split (its metrics), median over those within the burst."""
        stages = [s.stages for s in self.within if s.stages is not None]
        if not stages:
            return "the operator's split not read"
        erasure = statistics.median(e for e, _ in stages)
        write = statistics.median(w for _, w in stages)
        return (f"in the operator: erasure {1000 * erasure:.0f} ms, Ready write "
                f"{1000 * write:.0f} ms")


def burst_figures(label: str, burst: BurstOffboardings) -> list[Figure]:
    """Every sample (seconds, both ratios, the client's split, the plain API writes around it,
    the operator's CPU), then the medians."""
    figures = []
    n = len(burst.samples)
    for i, sample in enumerate(burst.samples, 1):
        name = f"{label}, {i} of {n}" + (" (after the burst)" if sample.after_burst else "")
        writes = ("-" if sample.writes is None else
                  f"{1000 * sample.writes[0]:.0f} ms right before, "
                  f"{1000 * sample.writes[1]:.0f} ms right after")
        figures += [
            Figure(f"{name}: PrincipalOffboarding create -> {sample.status.get('phase', '?')}",
                   sample.burst_text()),
            Figure(f"{name}: an API write under the same load", writes),
            Figure(f"{name}: CPU", sample.usage.line()),
        ]
    return [*figures,
            Figure(f"{label}: summary", burst.summary()),
            Figure(f"{label}: an API write under the same load (merge-patch of a ConfigMap's "
                   "annotation, unwatched namespace)", burst.api_write())]


# -- (r) restart -----------------------------------------------------------------------------------

EXIT_BOUND: Final = 30.0  # seconds a SIGTERM'd operator gets (Kubernetes' default grace period)
_SAMPLE: Final = re.compile(r'^(fgentic_\w+)\{queue="memoryscopes"\} (\S+)$', re.M)


def queue_metrics(port: int) -> dict[str, float]:
    """The memoryscopes work queue's samples on the operator's ``/metrics`` (empty until the
    queue's first run labels them, or while the port is not yet served)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {name: float(value) for name, value in _SAMPLE.findall(text)}


def status_writes(port: int) -> str:
    """``fgentic_scope_status_writes_total`` by result, as the operator counted its runs."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.findall(r'^fgentic_scope_status_writes_total\{result="(\w+)"\} (\S+)$', text,
                       re.M)
    return ", ".join(f"{result} {float(n):,.0f}" for result, n in found) or "none"


def reconciled_once(port: int, scopes: int, proc: Any, timeout: float) -> float | None:
    """Seconds until the queue has started a run per held scope (``scopes``) and holds nothing
    queued or running; None past ``timeout`` (or if the process dies). Polled every 0.2 s."""
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        got = queue_metrics(port)
        if (got.get("fgentic_workqueue_queue_duration_seconds_count", 0.0) >= scopes
                and got.get("fgentic_workqueue_depth") == 0.0
                and got.get("fgentic_workqueue_running") == 0.0):
            return time.perf_counter() - start
        time.sleep(0.2)
    return None


@dataclass(frozen=True)
class Restart:
    """The operator restarted while holding ``scopes`` converged scopes."""

    scopes: int
    exit_seconds: float
    exit_code: int | None
    reconciled: float | None  # start -> every scope reconciled once (None: not within bound)
    writes: Writes  # SIGTERM -> end of the at-rest window after
    causes: list[Figure]  # per scope / consent / binding, by what each write changed
    status_writes: str  # the new process's own count of its runs' status writes
    rss: tuple[float, float]  # VmRSS, VmHWM after the at-rest window
    rest: Usage

    def rows(self) -> list[tuple[str, str]]:
        n = max(1, self.scopes)
        total = sum(self.writes.api_writes.values())
        code = ("killed after the bound" if self.exit_code == -signal.SIGKILL
                else f"exit code {self.exit_code}")
        return [
            ("SIGTERM -> old process exited",
             f"{self.exit_seconds:.2f} s ({code}; bound {EXIT_BOUND:.0f} s)"),
            ("fresh process start -> every scope reconciled once",
             "not within the bound" if self.reconciled is None else
             f"{self.reconciled:.1f} s (work queue runs started >= {self.scopes:,} scopes held, "
             "depth 0, running 0, on its /metrics)"),
            ("API writes per scope, SIGTERM -> end of the at-rest window",
             f"{total / n:.2f} ({total:,.0f} in all over {self.writes.seconds:.0f} s: "
             + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(self.writes.api_writes.items(),
                                                           key=lambda kv: -kv[1])[:6])
             + "; by cause (watch): "
             + "; ".join(f"{c.name.split(':')[0]} {c.value.replace('-', 'none', c.value == '-')}"
                         for c in self.causes)
             + f"; the runs' status writes: {self.status_writes})"),
            ("writes in that window", self.writes.text()),
            ("fresh operator resident memory after it settled",
             f"VmRSS {self.rss[0]:.0f} MiB (VmHWM {self.rss[1]:.0f} MiB)"),
            ("fresh operator CPU at rest after",
             f"{self.rest.operator_cpu:.1%} of a core (machine {self.rest.machine:.0%} busy) "
             f"over {self.rest.wall:.0f} s"),
        ]

    def table(self) -> str:
        lines = [f"| restart | {self.scopes:,} scopes held |", "|---|---|"]
        return "\n".join(lines + [f"| {name} | {value} |" for name, value in self.rows()])


def held_scopes(api: k8s.CustomObjectsApi, namespaces: Sequence[str]) -> int:
    answer: Any = api.list_cluster_custom_object(GROUP, VERSION, "memoryscopes")
    return sum(1 for item in answer["items"] if item["metadata"]["namespace"] in namespaces)


def quiet(watches: Sequence[tuple[str, FirstSeen]], still: float = 2.0,
          bound: float = 30.0) -> None:
    """Wait until no watch has seen a new write for ``still`` seconds (at most ``bound``)."""
    deadline = time.monotonic() + bound
    last, since = [w.causes() for _, w in watches], time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < still:
        time.sleep(0.25)
        now = [w.causes() for _, w in watches]
        if now != last:
            last, since = now, time.monotonic()


def restart(  # noqa: PLR0917
    probe: Probe, api: k8s.CustomObjectsApi, old: OperatorProcess, fresh: OperatorProcess,
    watches: Sequence[tuple[str, FirstSeen]], namespaces: Sequence[str], settle: float,
    timeout: float,
) -> Restart:
    """Stop ``old`` (SIGTERM, bounded), run ``fresh`` (left running: the caller stops it)."""
    assert old.proc is not None
    scopes = held_scopes(api, namespaces)
    quiet(watches)  # (c)'s last writes delivered: they are not the restart's
    before = probe()
    causes_before = [watch.causes() for _, watch in watches]
    start = time.perf_counter()
    terminate(old.proc, signal.SIGTERM, EXIT_BOUND)
    exit_seconds = time.perf_counter() - start
    port = free_port()
    fresh.args += ["--metrics-port", str(port)]  # a port of its own: the old one may linger
    fresh.start()
    assert fresh.proc is not None
    reconciled = reconciled_once(port, scopes, fresh.proc, timeout)
    with Usage(fresh.proc.pid) as rest:
        time.sleep(settle)
    writes = Writes.between(before, probe())
    causes = [cause_figure(kind, b, watch.causes(), scopes)
              for (kind, watch), b in zip(watches, causes_before, strict=True)]
    return Restart(scopes, exit_seconds, old.proc.returncode, reconciled, writes, causes,
                   status_writes(port), operator_memory(fresh.proc.pid)[:2], rest)


# -- main ------------------------------------------------------------------------------------------


def ensure_namespaces(plane: LocalControlPlane, core: k8s.CoreV1Api,
                      watched: Sequence[str]) -> None:
    for namespace in [*watched, RAW_NS, OFFBOARD_NS, RETRIEVAL_NS]:
        plane.ensure_namespace(namespace)
    for namespace in [*watched, RAW_NS]:  # the bindings' proxy namespace holds the JWKS
        core.create_namespaced_config_map(namespace, {  # type: ignore[arg-type]
            "metadata": {"name": "partner-jwks"}, "data": {"jwks.json": EXAMPLE_JWKS}})
    core.create_namespaced_config_map(RAW_NS, {  # type: ignore[arg-type]
        "metadata": {"name": WRITE_PROBE}})  # (c)'s plain API write under the burst's load


def resync_env(args: argparse.Namespace) -> dict[str, str]:
    """Timer intervals for the operator; unset means the operator's defaults (30 s, 60 s)."""
    env = {}
    if args.scope_resync:
        env["FGENTIC_SCOPE_RESYNC_SECONDS"] = str(args.scope_resync)
    if args.binding_resync:
        env["FGENTIC_BINDING_RESYNC_SECONDS"] = str(args.binding_resync)
    return env


@dataclass
class Issue39:
    """The figures of issue 39's table, as one run measures them."""

    scopes: int
    scopes_run: Convergence | None = None
    memory: tuple[float, float, float, float] | None = None  # idle, converged, at rest, HWM
    rest: Usage | None = None
    rest_writes: Writes | None = None
    bindings_run: Convergence | None = None
    bindings_rest: Writes | None = None  # the settle window after (b)
    offboarding: Offboarding | None = None
    burst: BurstOffboardings | None = None  # the offboardings during (a)'s creation burst
    restart: Restart | None = None  # (r), with --restart

    def rows(self) -> list[tuple[str, str]]:
        run, rest, off, burst = self.scopes_run, self.rest, self.offboarding, self.burst
        writes = []
        if self.bindings_run is not None:
            b = self.bindings_run
            writes.append(f"while {b.count:,} RetrievalBindings converged "
                          f"({b.window[1].at - b.window[0].at:.1f} s): "
                          f"{Writes.between(*b.window).text()}")
        if self.rest_writes is not None:
            writes.append(f"at rest {self.rest_writes.seconds:.0f} s after all Enabled: "
                          f"{self.rest_writes.text()}")
        if self.bindings_rest is not None:
            writes.append(f"at rest {self.bindings_rest.seconds:.0f} s after all bindings "
                          f"Applied: {self.bindings_rest.text()}")
        return [
            (ISSUE_ROWS[0], "-" if run is None else
             f"{run.converged:.1f} s ({run.ready:,}/{run.count:,} Enabled; p50 per object "
             f"{run.p50:.1f} s; pairs created at {run.count / run.creates:,.0f}/s)"),
            (ISSUE_ROWS[1], "-" if run is None else f"{run.events:.1f}"),
            (ISSUE_ROWS[2], "-" if run is None else run.split.per(run.count)),
            (ISSUE_ROWS[3], "-" if self.memory is None else
             "VmRSS {1:.0f} MiB after all Enabled, {2:.0f} MiB at rest (VmHWM {3:.0f} MiB; "
             "idle {0:.0f} MiB)".format(*self.memory)),
            (ISSUE_ROWS[4], "-" if rest is None else
             f"{rest.operator_cpu:.1%} of a core (machine {rest.machine:.0%} busy) over "
             f"{rest.wall:.0f} s"),
            (ISSUE_ROWS[5], "-" if off is None else
             f"{off.seconds:.2f} s for {off.status.get('scopesFound')} scopes ({off.ratio:.2f}x "
             f"the flow's {off.direct:.2f} s; {off.counts()})"
             + ("" if burst is None or not burst.samples else
                f"; during the creation burst: {burst.summary()}")),
            (ISSUE_ROWS[6], "; ".join(writes) or "-"),
        ]

    def table(self) -> str:
        lines = [f"| | {self.scopes:,} scopes |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in self.rows()]
        return "\n".join(lines)


ISSUE_ROWS: Final = (
    "first create -> all `Enabled`",
    "watch events per object until converged",
    "API writes per object",
    "operator resident memory",
    "operator CPU at rest",
    "offboarding one person: PrincipalOffboarding -> `ReadyForDeactivation`",
    "writes at rest",
)


def print_figures(figures: Sequence[Figure]) -> None:
    for figure in figures:
        print(f"  {figure.name}: {figure.value}", flush=True)


def offboarding_figures(label: str, off: Offboarding) -> list[Figure]:
    return [Figure(f"{label}: PrincipalOffboarding create -> {off.status.get('phase', '?')}",
                   off.text()),
            Figure(f"{label}: split seen by the client", off.split()),
            Figure(f"{label}: CPU", off.usage.line())]


def prepare_offboardings(
    dsn: str, api: k8s.CustomObjectsApi, pool: ThreadPoolExecutor, watch: FirstSeen,
    args: argparse.Namespace, *, schedule: Sequence[tuple[str, str, str]],
) -> tuple[float, dict[str, list[str]], DirectFlow | None, list[Figure]]:
    """(c)'s principals, made before (a): BOB and the burst's operator principals with Enabled
    scopes, the direct flow at rest timed, and (when ``schedule`` holds any) the worker holding
    the burst's direct principals, the under-load baseline. (direct flow's seconds, operator
    principals' keys, worker, figures)."""
    if not args.offboard_scopes:
        return 0.0, {}, None, []
    banner(f"(c) before (a): principals holding {args.offboard_scopes} scopes each, and the "
           "direct flow")
    off_keys = {mxid: asyncio.run(enabled_principal(dsn, api, pool, watch, mxid,
                                                    args.offboard_scopes, args.entries))
                for mxid in [BOB, *(op for _, op, _ in schedule)]}
    direct, verified, direct_left = asyncio.run(direct_offboarding(
        dsn, args.offboard_scopes, args.entries))
    figures = [Figure(f"offboarding {args.offboard_scopes} scopes x {args.entries} entries: "
                      "baseline, offboarding.flow.offboard on the store directly",
                      f"{direct:.2f} s ({verified} verified, {direct_left} rows left)")]
    print_figures(figures)
    if not schedule:  # no offboarding during a burst, no under-load baseline
        return direct, off_keys, None, figures
    flow = DirectFlow(dsn)
    for mxid in dict.fromkeys(m for before, _, after in schedule for m in (before, after)):
        flow.ask("prepare", mxid, args.offboard_scopes, args.entries)
    return direct, off_keys, flow, figures


def bench(work: Path, args: argparse.Namespace, issue: Issue39) -> list[Figure]:  # noqa: PLR0915
    figures: list[Figure] = []
    watched = [f"scale-{i}" for i in range(args.namespaces)]
    with local_postgres(work / "postgres") as pg, \
            local_control_plane(work / "controlplane") as plane:
        dsn = asyncio.run(pg.create_database("bench_scale", extensions=("vector",)))
        client = api_client(plane.kubeconfig, args.threads)
        api = k8s.CustomObjectsApi(client)
        core = k8s.CoreV1Api(client)
        probe = Probe(plane, core, dsn)
        ensure_namespaces(plane, core, watched)

        def operator_process(name: str, metrics_port: int = 0) -> OperatorProcess:
            started = OperatorProcess(plane.kubeconfig, work / name,
                                      namespaces=[*watched, OFFBOARD_NS], dsn=dsn,
                                      local_homeserver=HOMESERVER, metrics_port=metrics_port,
                                      env=resync_env(args))
            if args.erasure_process:
                started.args.append("--erasure-process")
            return started

        metrics_port = free_port()  # (c) reads the operator's own split of each offboarding
        operator = operator_process("operator", metrics_port)
        scopes_seen = FirstSeen(api, "memoryscopes", enabled)
        bindings_seen = FirstSeen(api, "retrievalbindings", applied)
        consents_seen = FirstSeen(api, "consentrecords", receipted)
        for watch in (scopes_seen, bindings_seen, consents_seen):
            watch.start()
        pool = ThreadPoolExecutor(args.threads)
        flow: DirectFlow | None = None  # the direct flow under the burst's load
        try:
            with operator:
                operator.wait_for_log("content store ready")
                assert operator.proc is not None
                pid = operator.proc.pid
                time.sleep(2.0)
                idle_rss = operator_memory(pid)[0]
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

                schedule = (burst_schedule(args.burst_offboardings)
                            if args.scopes and args.offboard_scopes else [])
                direct, off_keys, flow, prepared = prepare_offboardings(
                    dsn, api, pool, scopes_seen, args, schedule=schedule)
                figures += prepared

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

                    def offboard_in_burst(over: threading.Event) -> None:
                        assert flow is not None
                        worker, serials = flow, itertools.count()

                        def through_operator(mxid: str) -> Offboarding:
                            return asyncio.run(operator_offboarding(
                                dsn, api, mxid, off_keys[mxid], direct=direct, pid=pid,
                                metrics_port=metrics_port))

                        issue.burst = BurstOffboardings(tuple(run_burst(
                            schedule, lambda mxid: worker.ask("offboard", mxid), through_operator,
                            lambda: plain_write(core, next(serials)), over)))

                    causes_before = (scopes_seen.causes(), consents_seen.causes())
                    result = converge(probe, api, pool, scopes_seen, "MemoryScopes", raw,
                                      patch_scope, objs, pid, args.timeout,
                                      offboard_in_burst if schedule else None,
                                      burst_bound(len(schedule)))
                    causes = [cause_figure(kind, before_, watch.causes(), args.scopes)
                              for kind, before_, watch in (
                                  ("MemoryScopes", causes_before[0], scopes_seen),
                                  ("ConsentRecords", causes_before[1], consents_seen))]
                    issue.scopes_run = result
                    figures += result.figures(">= 50 %", " (a pair of creates each)")
                    consent_keys = [key(g[1][1]) for g in objs]
                    figures.append(Figure(
                        "ConsentRecords: watch events per object until converged",
                        f"{consents_seen.events(consent_keys):.1f}"))
                    print_figures(figures[-13:])
                    figures += causes
                    print_figures(causes)
                    if issue.burst is not None:
                        burst = burst_figures(
                            f"offboarding {args.offboard_scopes} scopes during (a)'s creation "
                            "burst", issue.burst)
                        figures += burst
                        print_figures(burst)
                    converged_rss = operator_memory(pid)[0]
                    figures.append(memory_figure(f"after {args.scopes:,} scopes Enabled", pid,
                                                 "<= 200 MiB"))
                    before = probe()
                    with Usage(pid) as rest:
                        time.sleep(args.settle)
                    issue.rest, issue.rest_writes = rest, Writes.between(before, probe())
                    rest_rss, hwm, _ = operator_memory(pid)
                    issue.memory = (idle_rss, converged_rss, rest_rss, hwm)
                    figures.append(memory_figure(
                        f"{args.settle:.0f} s later (a resync round of every scope)", pid,
                        "<= 200 MiB"))
                    figures.append(Figure(f"at rest with {args.scopes:,} scopes", rest.line()))
                    figures.append(Figure(f"writes at rest with {args.scopes:,} scopes",
                                          issue.rest_writes.text()))
                    print_figures(figures[-4:])

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

                    result = converge(probe, api, pool, bindings_seen, "RetrievalBindings", raw,
                                      patch_binding, objs, pid, args.timeout)
                    issue.bindings_run = result
                    figures += result.figures("-", " (13 server-side applies + list/prune "
                                                   "+ status each)")
                    figures.append(Figure(
                        f"writes concerning scopes while {args.bindings:,} bindings converged",
                        Writes.between(*result.window).text()))
                    print_figures(figures[-13:])
                    figures.append(memory_figure(
                        f"after {args.scopes:,} scopes and {args.bindings:,} bindings", pid,
                        "<= 200 MiB"))
                    before = probe()
                    with Usage(pid) as rest:
                        time.sleep(args.settle)
                    issue.bindings_rest = Writes.between(before, probe())
                    figures.append(Figure(f"at rest with {args.scopes:,} scopes and "
                                          f"{args.bindings:,} bindings", rest.line()))
                    figures.append(Figure(f"writes at rest with {args.scopes:,} scopes and "
                                          f"{args.bindings:,} bindings",
                                          issue.bindings_rest.text()))
                    figures.append(memory_figure(f"{args.settle:.0f} s later", pid,
                                                 "<= 200 MiB"))
                    print_figures(figures[-4:])

                if args.offboard_scopes:
                    banner(f"(c) offboarding a principal holding {args.offboard_scopes} scopes")
                    issue.offboarding = asyncio.run(operator_offboarding(
                        dsn, api, BOB, off_keys[BOB], direct=direct, pid=pid,
                        metrics_port=metrics_port))
                    off = offboarding_figures(
                        f"offboarding {args.offboard_scopes} scopes x {args.entries} entries",
                        issue.offboarding)
                    figures += off
                    print_figures(off)
                    figures.append(memory_figure("at the end", pid, "<= 200 MiB"))
                if args.restart:
                    banner("(r) restart: SIGTERM, then a fresh operator with the same settings")
                    fresh = operator_process("operator-restart")
                    try:
                        issue.restart = restart(
                            probe, api, operator, fresh,
                            [("MemoryScopes", scopes_seen), ("ConsentRecords", consents_seen),
                             ("RetrievalBindings", bindings_seen)],
                            [*watched, OFFBOARD_NS], args.settle, args.timeout)
                    finally:
                        fresh.stop()
                    figures += [Figure(f"restart: {name}", value)
                                for name, value in issue.restart.rows()]
                    print_figures(figures[-6:])
                figures.append(Figure("load average before (a) / at the end",
                                      f"{load} / "
                                      + " ".join(f"{x:.2f}" for x in os.getloadavg())))
        finally:
            if flow is not None:
                flow.close()
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scopes", type=int, default=1000)
    parser.add_argument("--bindings", type=int, default=1000)
    parser.add_argument("--offboard-scopes", type=int, default=100)
    parser.add_argument("--erasure-process", action="store_true",
                        help="the operator runs each offboarding's flow in a process of its "
                             "own (its --erasure-process); its own pages and CPU are counted")
    parser.add_argument("--burst-offboardings", type=int, default=3,
                        help="principals offboarded through the operator during (a)'s burst, "
                             "one after another, each between two direct flows (0: none)")
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
    parser.add_argument("--restart", action="store_true",
                        help="at the end, restart the operator holding every scope (r)")
    parser.add_argument("--keep", action="store_true", help="keep logs and server state")
    args = parser.parse_args(argv)
    if not 1 <= args.entries <= 100:
        parser.error("--entries must be 1..100 (the scope's entry cap)")
    if args.burst_offboardings < 0:
        parser.error("--burst-offboardings must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"command: {command_line()}")
    print(f"machine: {machine()}; run {uuid.uuid4().hex[:8]}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    issue = Issue39(args.scopes)
    with scratch_dir("scale", keep=args.keep) as work:
        figures = bench(work, args, issue)
    banner("summary (figures only; nothing is asserted)")
    print(render(figures))
    if issue.restart is not None:
        banner(f"restart table ({issue.restart.scopes:,} scopes held, the same run)")
        print(issue.restart.table(), flush=True)
    banner(f"issue 39 table ({args.scopes:,} scopes, one run)")
    print(f"command: {command_line()}")
    print(f"machine: {machine()}; load average at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(issue.table(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
