"""Governed memory: erasure, write admission and grant-to-enabled, each against its baseline.

    .venv/bin/python -m benchmarks.bench_memory [--erase-rounds 20] [--inserts 1000]
        [--scopes 10] [--patches 50] [--skip-operator] [--keep]
    .venv/bin/python -m benchmarks.bench_memory --fence-reference REV [--inserts 1000]

Starts its own PostgreSQL 18 + pgvector and, for the last figures, its own etcd +
kube-apiserver and the real operator process. Prints figures; never asserts timings.

1. Erasure: ``MemoryStore.withdraw`` (disable + advance the generation, delete, verify by
   reading back through the table and the fenced view) of a scope holding 100 entries with
   768-dimensional embeddings; median over the rounds. Baseline: ``DELETE`` + ``count(*)`` of
   the same 100 rows in an identical unfenced table. Target <= 50 ms.
2. Write admission: one fenced insert versus one plain ``INSERT`` into an identical unfenced
   table (same columns, CHECKs and indexes incl. ``vector(768)``; no triggers, no foreign
   key), per insert, interleaved in batches. Fenced is measured twice: ``MemoryStore.save``
   (write policy, ``enter_scope`` and the gated insert in one transaction) and an adapted
   kagent's single ``INSERT`` (the trigger gate only); each with and without an embedding.
   Target <= 1.3x. ``CostGate.admit`` (one item) is reported against the same baseline, and a
   components table shows where the fenced insert's extra time goes.
3. Grant-to-enabled through the operator: create a MemoryScope + ConsentRecord and time until
   a watch shows ``status.phase == Enabled``; and a ConsentRecord for a scope already waiting
   in ``Disabled`` (CONSENT_MISSING). Baseline: the raw status-patch round trip of the same
   API server, and the two creates alone in a namespace the operator does not watch.

``--fence-reference REV`` runs only this: the fenced save (``MemoryStore.save``), search
(``MemoryStore.search``, 5 of a scope's 20 facts), an adapted kagent's INSERT, the periodic
cleanup (``MemoryStore.cleanup_expired``, nothing due) and a delegated call's lease lookups
(``open_lease``, ``leased_scope``, ``enter_delegation``, rolled back) with the
function, view and trigger files of this checkout against those of git revision ``REV``, in
one database: the files that differ are re-applied (``CREATE OR REPLACE``) before each batch,
the two sides alternating batch by batch in a rotating order, warmed up after each swap. For
a fence change measured against the fence it replaces (docs/store-fence.md's source, issue 41).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import asyncpg
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from benchmarks.common import (
    OperatorProcess,
    StreamWatch,
    Table,
    banner,
    command_line,
    local_control_plane,
    local_postgres,
    machine,
    scratch_dir,
    time_async,
    time_sync,
)
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.memory import (
    Access,
    CostGate,
    MemoryStore,
    Operation,
    ScopeRecord,
    migrate,
    schema,
    write_policy,
)
from fgentic_governance.memory.model import vector_literal

GROUP: Final = "governance.fgentic.dev"
VERSION: Final = "v1alpha1"
HOMESERVER: Final = "fgentic.local"
SUBJECT: Final = f"@alice:{HOMESERVER}"
DIM: Final = 768
RUNTIME_ROLE: Final = "fgentic_memory_runtime"

# An identical table without the fence: same columns, defaults, CHECKs and indexes (LIKE ...
# INCLUDING ALL copies no triggers and no foreign key).
_PLAIN_TABLE: Final = """
CREATE SCHEMA IF NOT EXISTS bench_plain;
CREATE TABLE IF NOT EXISTS bench_plain.memory
    (LIKE fgentic_memory.memory INCLUDING ALL);
GRANT USAGE ON SCHEMA bench_plain TO fgentic_memory_runtime;
GRANT INSERT, SELECT, DELETE ON bench_plain.memory TO fgentic_memory_runtime;
"""
# kagent v0.9.11's memory insert plus the two columns an adapted kagent adds; the baseline runs
# the very same statement against the unfenced table.
_KAGENT_INSERT: Final = """
INSERT INTO {table}
    (agent_name, user_id, content, embedding, metadata, created_at, expires_at, access_count,
     scope_key, consent_generation)
VALUES ($1, $2, $3, $4::text::vector, $5::jsonb, NOW(), NOW() + interval '6 days', 0, $6, $7)
RETURNING id
"""
_ENTER: Final = "SELECT * FROM fgentic_memory.enter_scope($1, $2, $3, $4, $5, $6, $7)"
_OPEN_LEASE: Final = "SELECT * FROM fgentic_memory.open_lease($1, $2, $3, $4, $5, $6, $7, $8, $9)"
_LEASED_SCOPE: Final = "SELECT (fgentic_memory.leased_scope($1, $2, $3)).scope_key"
_ENTER_DELEGATION: Final = "SELECT * FROM fgentic_memory.enter_delegation($1, $2, $3, $4)"
_FENCED: Final = "fgentic_memory.memory"
_PLAIN: Final = "bench_plain.memory"


def _record(name: str, room: str) -> ScopeRecord:
    return ScopeRecord(scope_key=f"bench/{name}", subject_mxid=SUBJECT,
                       origin_kind="native-local", agent_namespace="bench", agent_name="helper",
                       control_room=f"!{room}:{HOMESERVER}")


def _vectors(count: int, seed: int = 7) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.uniform(-1.0, 1.0) for _ in range(DIM)] for _ in range(count)]


def _plain_literal(values: Sequence[float]) -> str:
    """What any writer pays to send a vector as text (no dimension or finiteness checks)."""
    return "[" + ",".join(map(repr, values)) + "]"


async def _enabled(store: MemoryStore, name: str) -> Access:
    record = _record(name, name)
    await store.ensure_scope(record)
    return Access.for_scope(record, await store.grant(record.scope_key))


# -- 1. erasure ----------------------------------------------------------------------------------


async def bench_erasure(owner: Any, store: MemoryStore, rounds: int, entries: int) -> Table:
    vectors = [_plain_literal(v) for v in _vectors(entries, seed=11)]
    access = await _enabled(store, "erase")
    fenced_insert = _KAGENT_INSERT.format(table=_FENCED)
    plain_insert = _KAGENT_INSERT.format(table=_PLAIN)

    async def fill(table_insert: str, generation: int) -> None:
        async with owner.acquire() as conn, conn.transaction():
            # Every write into the fenced table names its scope first (sql/0007's claim).
            await conn.fetchrow(_ENTER, *replace(access, generation=generation).params(),
                                "capture")
            await conn.executemany(table_insert, [
                ("bench/helper", SUBJECT, f"Alice prefers tea blend number {i}.", vec, "{}",
                 access.scope_key, generation) for i, vec in enumerate(vectors)])

    withdraw: list[float] = []
    erase_scope: list[float] = []
    baseline: list[float] = []
    generation = access.generation
    for i in range(rounds + 1):  # the first round warms up and is not counted
        # Withdrawal: disable + advance, delete, verify; then re-grant for the next round.
        await fill(fenced_insert, generation)
        start = time.perf_counter()
        receipt = await store.withdraw(access.scope_key)
        elapsed = time.perf_counter() - start
        if not receipt.verified or receipt.deleted != entries:
            raise SystemExit(f"withdrawal did not verify: {receipt}")
        generation = await store.grant(access.scope_key)
        # Forget all (consent kept): advance, delete, verify.
        await fill(fenced_insert, generation)
        start = time.perf_counter()
        receipt = await store.erase_scope(access.scope_key)
        elapsed_scope = time.perf_counter() - start
        if not receipt.verified or receipt.deleted != entries:
            raise SystemExit(f"scope erasure did not verify: {receipt}")
        generation = receipt.generation
        # Baseline: the same rows in the unfenced table, deleted and counted.
        await fill(plain_insert, generation)
        async with owner.acquire() as conn:
            start = time.perf_counter()
            await conn.execute(f"DELETE FROM {_PLAIN} WHERE scope_key = $1", access.scope_key)
            left = await conn.fetchval(
                f"SELECT count(*) FROM {_PLAIN} WHERE scope_key = $1", access.scope_key)
            elapsed_base = time.perf_counter() - start
        if left:
            raise SystemExit("baseline delete left rows")
        if i:
            withdraw.append(elapsed)
            erase_scope.append(elapsed_scope)
            baseline.append(elapsed_base)

    table = Table(f"erasure of {entries} entries with {DIM}-dim embeddings")
    table.add(f"baseline: unfenced DELETE + count, {entries} rows", baseline)
    table.add(f"withdraw(): disable, delete, verify {entries}", withdraw, baseline=baseline,
              target="<= 50 ms")
    table.add(f"erase_scope(): fence, delete, verify {entries}", erase_scope, baseline=baseline)
    return table


# -- 2. write admission --------------------------------------------------------------------------


async def bench_inserts(
    owner: Any, runtime: Any, store: MemoryStore, total: int, batch: int = 50
) -> Table:
    """Per-insert latency, variants interleaved batch by batch in a rotating order."""
    vectors = _vectors(200, seed=13)
    runtime_store = MemoryStore(runtime)
    gate = CostGate(runtime)
    scopes = {name: await _enabled(store, name)
              for name in ("save-vec", "save-novec", "sql-vec", "sql-novec", "cost")}
    fenced_insert = _KAGENT_INSERT.format(table=_FENCED)
    plain_insert = _KAGENT_INSERT.format(table=_PLAIN)
    counter = 0

    def fact() -> str:
        nonlocal counter
        counter += 1
        return f"Alice prefers green tea in the morning, note {counter}."

    def vec() -> list[float]:
        return vectors[counter % len(vectors)]

    async def plain(embed: bool) -> None:
        literal = _plain_literal(vec()) if embed else None
        async with runtime.acquire() as conn:
            await conn.fetchval(plain_insert, "bench/helper", SUBJECT, fact(), literal, "{}",
                                "bench/plain", 0)

    async def adapted_sql(embed: bool) -> None:
        access = scopes["sql-vec" if embed else "sql-novec"]
        literal = _plain_literal(vec()) if embed else None
        async with runtime.acquire() as conn, conn.transaction():
            await conn.fetchrow(_ENTER, *access.params(), "capture")
            await conn.fetchval(fenced_insert, "bench/helper", SUBJECT, fact(), literal, "{}",
                                access.scope_key, access.generation)

    async def save(embed: bool) -> None:
        access = scopes["save-vec" if embed else "save-novec"]
        await runtime_store.save(access, fact(), embedding=vec() if embed else None)

    async def admit(_: bool) -> None:
        await gate.admit(scopes["cost"], {Operation.SAVE: 1})

    variants = {
        "plain INSERT, embedding": (plain, True),
        "plain INSERT, no embedding": (plain, False),
        "adapted kagent INSERT (trigger gate), embedding": (adapted_sql, True),
        "adapted kagent INSERT (trigger gate), no embedding": (adapted_sql, False),
        "MemoryStore.save, embedding": (save, True),
        "MemoryStore.save, no embedding": (save, False),
        "CostGate.admit, one item": (admit, False),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    by_round: dict[str, list[list[float]]] = {name: [] for name in variants}
    order = list(variants)
    rounds = max(1, total // batch)
    for round_ in range(rounds + 1):  # round 0 warms up every path
        for name in order[round_ % len(order):] + order[:round_ % len(order)]:
            func, embed = variants[name]
            batch_samples: list[float] = []
            for _ in range(batch):
                start = time.perf_counter()
                await func(embed)
                batch_samples.append(time.perf_counter() - start)
            if round_:
                samples[name] += batch_samples
                by_round[name].append(batch_samples)
        # Untimed: stay under the entry cap and the hourly ceiling; keep both tables small.
        async with owner.acquire() as conn:
            await conn.execute(f"DELETE FROM {_PLAIN}")
            await conn.execute("DELETE FROM fgentic_memory.memory")
            await conn.execute("DELETE FROM fgentic_memory.op_ledger")
            await conn.execute(f"VACUUM {_PLAIN}")
            await conn.execute("VACUUM fgentic_memory.memory")

    _print_paired(by_round["MemoryStore.save, embedding"], by_round["plain INSERT, embedding"])
    return _insert_table(samples, rounds * batch, batch)


def _print_paired(fenced: list[list[float]], plain: list[list[float]], *,
                  label: str = "fenced save with embedding / plain INSERT",
                  target: float = 1.3) -> None:
    """The same ratio per round (each batch against the plain batch of its own round): how
    much of the run-to-run spread is the machine's load drifting between batches."""
    ratios = sorted(statistics.median(f) / statistics.median(p)
                    for f, p in zip(fenced, plain, strict=True))
    spread = ratios * 2 if len(ratios) == 1 else ratios  # quantiles need two points
    quartiles = statistics.quantiles(spread, n=4)
    print(f"{label}, per round ({len(ratios)} rounds): "
          f"median {statistics.median(ratios):.2f}x, quartiles {quartiles[0]:.2f}x-"
          f"{quartiles[2]:.2f}x, {sum(r <= target for r in ratios)} rounds <= {target}x",
          flush=True)


def _insert_table(samples: dict[str, list[float]], per_variant: int, batch: int) -> Table:
    table = Table(f"write admission, per insert ({per_variant} inserts per variant, "
                  f"interleaved in batches of {batch})")
    vec_base = samples["plain INSERT, embedding"]
    novec_base = samples["plain INSERT, no embedding"]
    table.add("baseline: plain INSERT, unfenced table, embedding", vec_base)
    table.add("baseline: plain INSERT, unfenced table, no embedding", novec_base)
    table.add("fenced: MemoryStore.save, embedding", samples["MemoryStore.save, embedding"],
              baseline=vec_base, target="<= 1.3x")
    table.add("fenced: MemoryStore.save, no embedding",
              samples["MemoryStore.save, no embedding"], baseline=novec_base, target="<= 1.3x")
    table.add("fenced: adapted kagent INSERT, embedding",
              samples["adapted kagent INSERT (trigger gate), embedding"], baseline=vec_base)
    table.add("fenced: adapted kagent INSERT, no embedding",
              samples["adapted kagent INSERT (trigger gate), no embedding"],
              baseline=novec_base)
    table.add("cost admission: CostGate.admit, one item",
              samples["CostGate.admit, one item"], baseline=novec_base)
    return table


async def bench_components(owner: Any, store: MemoryStore, rounds: int = 500) -> Table:
    """Where a fenced insert's extra time goes, piece by piece, against a bare round trip."""
    access = await _enabled(store, "parts")
    fact = "Alice prefers green tea in the morning, note 12345."
    vector = _vectors(1, seed=17)[0]
    table = Table(f"components of a fenced insert (median of {rounds} calls each)")
    table.add("Python write policy: write_policy.enforce(fact)",
              time_sync(lambda: write_policy.enforce(fact), rounds))
    plain_text = time_sync(lambda: _plain_literal(vector), rounds)
    table.add(f"vector to text, {DIM} floats (plain join)", plain_text)
    table.add(f"vector to text, {DIM} floats (vector_literal, checked)",
              time_sync(lambda: vector_literal(vector), rounds), baseline=plain_text)
    async with owner.acquire() as conn:
        select1 = await time_async(lambda: conn.fetchval("SELECT 1"), rounds)
        table.add("baseline: SELECT 1 round trip", select1)
        table.add("DB write policy: policy_reason(fact) round trip", await time_async(
            lambda: conn.fetchval("SELECT fgentic_memory.policy_reason($1)", fact), rounds),
            baseline=select1)
        table.add("DB write policy: policy_reason('{}') round trip (metadata)", await time_async(
            lambda: conn.fetchval("SELECT fgentic_memory.policy_reason($1)", "{}"), rounds),
            baseline=select1)

        async def tx_select1() -> None:
            async with conn.transaction():
                await conn.fetchval("SELECT 1")

        async def tx_enter() -> None:
            async with conn.transaction():
                await conn.fetchrow(
                    "SELECT * FROM fgentic_memory.enter_scope($1, $2, $3, $4, $5, $6, $7)",
                    *access.params(), "capture")

        async def tx_lock() -> None:
            async with conn.transaction():
                await conn.fetchval("SELECT fgentic_memory.lock_scope($1)", access.scope_key)

        in_tx = await time_async(tx_select1, rounds)
        table.add("baseline: BEGIN; SELECT 1; COMMIT", in_tx, baseline=select1)
        table.add("BEGIN; enter_scope('capture'); COMMIT", await time_async(tx_enter, rounds),
                  baseline=in_tx)
        table.add("BEGIN; lock_scope (scope row UPDATE); COMMIT",
                  await time_async(tx_lock, rounds), baseline=in_tx)
    return table


async def store_benchmarks(pg: LocalPostgres, args: argparse.Namespace) -> list[Table]:
    dsn = await pg.create_database("bench_memory", extensions=("vector",))
    owner = await asyncpg.create_pool(dsn, min_size=2, max_size=4)
    async with owner.acquire() as conn:
        await migrate(conn)  # creates the runtime role too
        await conn.execute(_PLAIN_TABLE)
    # Inserts run as the restricted role an adapted kagent would use.
    runtime = await asyncpg.create_pool(dsn, min_size=2, max_size=4,
                                        server_settings={"role": RUNTIME_ROLE})
    try:
        store = MemoryStore(owner)
        banner("erasure")
        erasure = await bench_erasure(owner, store, args.erase_rounds, args.entries)
        erasure.print()
        banner("write admission")
        inserts = await bench_inserts(owner, runtime, store, args.inserts)
        inserts.print()
        components = await bench_components(owner, store)
        components.print()
        return [erasure, inserts, components]
    finally:
        await runtime.close()
        await owner.close()


# -- the fence against a reference revision (--fence-reference) --------------------------------

_ROOT: Final = Path(__file__).resolve().parents[1]
_OBJECT_DIR: Final = "src/fgentic_governance/memory/sql"


def _at_revision(rev: str, name: str) -> str | None:
    """Object file ``name`` (``functions/refuse``) as it is at git revision ``rev``."""
    done = subprocess.run(["git", "show", f"{rev}:{_OBJECT_DIR}/{name}.sql"], cwd=_ROOT,
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 else None


def _fence_sides(rev: str) -> dict[str, str]:
    """The SQL that puts each side's definitions in place: the object files ``rev`` has and
    defines otherwise, in the migrator's order (a file new here stays; nothing at ``rev``
    calls it)."""
    sides: dict[str, list[str]] = {"this checkout": [], rev: []}
    for item in schema.object_files():
        old = _at_revision(rev, item.name)
        if old is not None and old != item.sql:
            sides["this checkout"].append(item.sql)
            sides[rev].append(old)
    if not sides[rev]:
        raise SystemExit(f"no function, view or trigger file differs from {rev}")
    return {side: "\n".join(texts) for side, texts in sides.items()}


async def _lease_and_cleanup_paths(owner: Any, store: MemoryStore, runtime_store: MemoryStore,
                                   ) -> dict[str, Callable[[], Awaitable[None]]]:
    """--fence-reference's paths through the periodic cleanup and a delegated call's lease
    lookups (a live lease of its own scope)."""
    leased = await _enabled(store, "ref-lease")
    await store.open_lease(leased, 540, context_id="ctx-bench")
    delegate = (leased.subject_mxid, leased.agent_namespace, leased.agent_name)

    async def cleanup() -> None:  # nothing due: the four statements' own cost
        await runtime_store.cleanup_expired()

    async def delegation() -> None:  # as the memory API's calls do, rolled back
        async with owner.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.fetchrow(_OPEN_LEASE, *leased.params(), 60, None, "ctx-bench")
                await conn.fetchval(_LEASED_SCOPE, *delegate[1:], delegate[0])
                await conn.fetchrow(_ENTER_DELEGATION, *delegate, "recall")
            finally:
                await tx.rollback()

    return {"MemoryStore.cleanup_expired (cleanup + 3 prunes)": cleanup,
            "open_lease + leased_scope + enter_delegation (a live lease)": delegation}


async def bench_fence_reference(owner: Any, store: MemoryStore, dsn: str, rev: str, *,
                                total: int, batch: int = 10) -> Table:
    """The fenced save, search, adapted INSERT, cleanup and lease lookups under each side's
    definitions."""
    sides = _fence_sides(rev)
    vectors = _vectors(20, seed=19)
    scopes = {name: await _enabled(store, name) for name in ("ref-save", "ref-find", "ref-sql")}
    # One runtime connection: after each swap two calls per path recompile its functions.
    runtime = await asyncpg.create_pool(dsn, min_size=1, max_size=1,
                                        server_settings={"role": RUNTIME_ROLE})
    runtime_store = MemoryStore(runtime)
    for i, vector in enumerate(vectors):
        await runtime_store.save(scopes["ref-find"], f"Alice's note {i}.", embedding=vector)
    fenced_insert = _KAGENT_INSERT.format(table=_FENCED)

    async def save() -> None:
        await runtime_store.save(scopes["ref-save"], "Alice prefers green tea.",
                                 embedding=vectors[0])

    async def search() -> None:
        await runtime_store.search(scopes["ref-find"], vectors[1], limit=5)

    async def adapted_sql() -> None:
        access = scopes["ref-sql"]
        async with runtime.acquire() as conn, conn.transaction():
            await conn.fetchrow(_ENTER, *access.params(), "capture")
            await conn.fetchval(fenced_insert, "bench/helper", SUBJECT, "Alice likes tea.",
                                _plain_literal(vectors[2]), "{}", access.scope_key,
                                access.generation)

    paths = {"MemoryStore.save (save_fact)": save,
             "MemoryStore.search, 5 of 20 (enter_scope recall)": search,
             "adapted kagent INSERT (enter_scope capture + trigger)": adapted_sql,
             **await _lease_and_cleanup_paths(owner, store, runtime_store)}
    by_round: dict[tuple[str, str], list[list[float]]] = {(s, p): [] for s in sides
                                                           for p in paths}
    order = list(sides)
    try:
        for round_ in range(max(1, total // batch) + 1):  # round 0 warms up every path
            for side in order[round_ % 2:] + order[:round_ % 2]:
                async with owner.acquire() as conn:
                    await conn.execute(sides[side])
                for path, func in paths.items():
                    took = await time_async(func, batch, warmup=2)
                    if round_:
                        by_round[(side, path)].append(took)
                    async with owner.acquire() as conn:  # untimed: under the entry cap
                        await conn.execute("DELETE FROM fgentic_memory.memory"
                                           " WHERE scope_key <> $1", scopes["ref-find"].scope_key)
    finally:
        await runtime.close()
    table = Table(f"the fence of this checkout vs {rev} (per call, {batch}-call batches"
                  " alternating)")
    for path in paths:
        mine, theirs = by_round[("this checkout", path)], by_round[(rev, path)]
        base = table.add(f"{path}, {rev}", [t for batch_ in theirs for t in batch_])
        table.add(f"{path}, this checkout", [t for batch_ in mine for t in batch_],
                  baseline=base, target="<= 1.05x")
        _print_paired(mine, theirs, label=f"{path}: this checkout / {rev}", target=1.05)
    return table


async def fence_reference(pg: LocalPostgres, args: argparse.Namespace) -> list[Table]:
    dsn = await pg.create_database("bench_fence", extensions=("vector",))
    owner = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        async with owner.acquire() as conn:
            await migrate(conn)
        banner(f"the fence against {args.fence_reference}")
        table = await bench_fence_reference(owner, MemoryStore(owner), dsn,
                                            args.fence_reference, total=args.inserts)
        table.print()
        return [table]
    finally:
        await owner.close()


# -- 3. grant-to-enabled through the operator ----------------------------------------------------


class PhaseWatch(StreamWatch):
    """A watch on MemoryScopes of one namespace: when each first reached each phase."""

    def __init__(self, api: k8s.CustomObjectsApi, namespace: str) -> None:
        super().__init__(api.list_namespaced_custom_object, GROUP, VERSION, namespace,
                         "memoryscopes")
        self._seen: dict[tuple[str, str], float] = {}

    def on_event(self, obj: dict[str, Any], now: float) -> None:
        phase = str(obj.get("status", {}).get("phase", ""))
        key = (str(obj["metadata"]["name"]), phase)
        with self.changed:
            self._seen.setdefault(key, now)
            self.changed.notify_all()

    def wait(self, name: str, phase: str, timeout: float = 120.0) -> float:
        """perf_counter() when ``name`` was first seen in ``phase``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while (name, phase) not in self._seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"memoryscope {name} never reached {phase}")
                self.changed.wait(left)
            return self._seen[(name, phase)]


def _scope(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MemoryScope",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"subject": {"mxid": SUBJECT, "originKind": "native-local"},
                 "agent": {"namespace": namespace, "name": "docs-agent"},
                 "controlRoom": f"!{name}:{HOMESERVER}", "purpose": "personal-preferences",
                 "policyVersion": "2026-11", "profile": "demo", "posture": "enabled"},
    }


def _consent(namespace: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ConsentRecord",
        "metadata": {"name": f"{scope}-grant", "namespace": namespace},
        "spec": {"scopeRef": {"name": scope},
                 "subject": {"mxid": SUBJECT, "originKind": "native-local"},
                 "purpose": "personal-preferences", "policyVersion": "2026-11",
                 "decision": "granted"},
    }


def operator_benchmarks(pg: LocalPostgres, work: Path, args: argparse.Namespace) -> Table:
    watched, unwatched = "bench-memory", "bench-baseline"
    with local_control_plane(work / "controlplane") as plane:
        for namespace in (watched, unwatched):
            plane.ensure_namespace(namespace)
        dsn = asyncio.run(pg.create_database("bench_operator", extensions=("vector",)))
        api_client = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(plane.kubeconfig))
        api = k8s.CustomObjectsApi(api_client)
        operator = OperatorProcess(plane.kubeconfig, work / "operator", namespaces=[watched],
                                   dsn=dsn, env={"FGENTIC_SCOPE_RESYNC_SECONDS": "30"})
        watch = PhaseWatch(api, watched).start()
        try:
            with operator:
                operator.wait_for_log("content store ready")
                return _measure_operator(api, watch, watched, unwatched, args)
        finally:
            watch.stop()
            api_client.close()


def _measure_operator(api: k8s.CustomObjectsApi, watch: PhaseWatch, watched: str,
                      unwatched: str, args: argparse.Namespace) -> Table:
    def create(namespace: str, plural: str, obj: dict[str, Any]) -> None:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, obj)

    # Warm-up (not counted): the first scope pays for the operator's first watch events.
    create(watched, "memoryscopes", _scope(watched, "warmup"))
    create(watched, "consentrecords", _consent(watched, "warmup"))
    watch.wait("warmup", "Enabled")

    # Baselines in a namespace the operator does not watch.
    create(unwatched, "memoryscopes", _scope(unwatched, "patched"))
    counter = iter(range(1_000_000))

    def patch_status() -> None:
        api.patch_namespaced_custom_object_status(
            GROUP, VERSION, unwatched, "memoryscopes", "patched",
            {"status": {"entryCount": next(counter)}})

    patches = time_sync(patch_status, args.patches, warmup=3)
    creates: list[float] = []
    for i in range(args.scopes):
        name = f"baseline-{i}"
        start = time.perf_counter()
        create(unwatched, "memoryscopes", _scope(unwatched, name))
        create(unwatched, "consentrecords", _consent(unwatched, name))
        creates.append(time.perf_counter() - start)

    # Create MemoryScope + ConsentRecord -> Enabled.
    both: list[float] = []
    for i in range(args.scopes):
        name = f"created-{i}"
        start = time.perf_counter()
        create(watched, "memoryscopes", _scope(watched, name))
        create(watched, "consentrecords", _consent(watched, name))
        both.append(watch.wait(name, "Enabled") - start)

    # A scope already waiting (Disabled, CONSENT_MISSING) is granted -> Enabled.
    granted: list[float] = []
    for i in range(args.scopes):
        name = f"waiting-{i}"
        create(watched, "memoryscopes", _scope(watched, name))
        watch.wait(name, "Disabled")
        start = time.perf_counter()
        create(watched, "consentrecords", _consent(watched, name))
        granted.append(watch.wait(name, "Enabled") - start)

    table = Table("grant-to-enabled through the operator (real kube-apiserver, PostgreSQL, "
                  "operator process)")
    table.add("baseline: status-patch round trip (MemoryScope)", patches)
    table.add("baseline: create MemoryScope + ConsentRecord (unwatched)", creates,
              baseline=patches)
    table.add("create MemoryScope + ConsentRecord -> Enabled", both, baseline=patches)
    table.add("ConsentRecord on a waiting scope -> Enabled", granted, baseline=patches)
    return table


# -- main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--erase-rounds", type=int, default=20)
    parser.add_argument("--entries", type=int, default=100,
                        help="entries erased per round (the scope cap is 100)")
    parser.add_argument("--inserts", type=int, default=1000, help="timed inserts per variant")
    parser.add_argument("--scopes", type=int, default=10, help="scopes per operator figure")
    parser.add_argument("--patches", type=int, default=50, help="status patches (baseline)")
    parser.add_argument("--skip-operator", action="store_true",
                        help="skip the control plane and the operator figures")
    parser.add_argument("--fence-reference", metavar="REV",
                        help="only: the fence's object files against those of git REV")
    parser.add_argument("--keep", action="store_true", help="keep logs and server state")
    args = parser.parse_args(argv)
    if not 1 <= args.entries <= 100:
        parser.error("--entries must be 1..100 (the scope's entry cap)")

    print(f"command: {command_line()}")
    print(f"machine: {machine()}; run {uuid.uuid4().hex[:8]}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    tables: list[Table] = []
    with scratch_dir("memory", keep=args.keep) as work, local_postgres(work / "postgres") as pg:
        if args.fence_reference:
            tables += asyncio.run(fence_reference(pg, args))
        else:
            tables += asyncio.run(store_benchmarks(pg, args))
        if not args.skip_operator and not args.fence_reference:
            banner("grant-to-enabled")
            operator_table = operator_benchmarks(pg, work, args)
            operator_table.print()
            tables.append(operator_table)
    banner("summary (figures only; nothing is asserted)")
    for table in tables:
        table.print()
        print()
    print(f"command: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
