"""Governed memory at size: one person's operations beside 10,000 scopes of other people's rows.

    .venv/bin/python -m benchmarks.bench_memory_size [--large 1000000] [--small 10000]
        [--rounds 40] [--batch 10] [--erasures 2] [--explain] [--keep]

Starts its own PostgreSQL 18 + pgvector with two migrated stores side by side: a small one of
``--small`` rows and a large one of ``--large`` rows, both over scopes of 100 entries each
(10,000 rows = 100 scopes, 1,000,000 rows = 10,000 scopes). Prints figures; never asserts
timings. Issue 40 §2's target: every operation's p50 and p99 on the large store <= 1.2x the
small one's (an operation's cost must not grow with other people's data).

Loading (untimed): ``tests.support.bulk_store.load_others``, as the stores' owner, server-side
``generate_series`` straight into the tables: the scopes (one subject each, enabled at
generation 1), their rows interleaved (row i belongs to scope i mod scopes, as if everybody
wrote over time) with the columns ``save_fact`` writes, each with a 768-dimensional random
embedding (from a pool of 4,096 random vectors), and five ledger entries per scope in the last
hour; past the write trigger's one exemption for the owner (a restore, not a save).

Measured, through the functions the memory API and the control API call (on a delegate-role
pool and an owner pool, as they connect), both stores interleaved round by round in a
rotating order:

1. Fenced save: ``DelegatedStore.admit`` (save + embedding, explicit, bound to the lease's
   context) then ``save_checked`` of one fact (the memory API's ``save_memory``), into a
   leased scope that holds 50 rows.
2. Governed search: ``admit`` (load + embedding, bound) then ``DelegatedStore.search``
   (limit 5) of a leased scope of the bulk load, holding 100 rows.
3. Erase + verify: ``MemoryStore.erase_scope`` (hold, fence, delete, read back) of a scope of
   the bulk load holding 100 rows (``!memory forget all``); each round erases other scopes,
   and refills them afterwards (untimed), so both stores keep their size.

Between rounds (untimed) the owner clears what the bounds count for the measured scopes only
(the hourly ledger, the sender buckets, the leases' recall counts) and deletes the facts the
round saved.

Then, on each store, each operation runs once more through pools that record its statements,
and every statement is replayed under EXPLAIN (ANALYZE, BUFFERS) in a transaction that is
rolled back: the shared buffers each touched (the statements inside the functions it calls
included) on both stores, and the scans of the large store's plans (``--explain``: the whole
plans). A count, not a time: a buffer count that grows with the store shows what grows.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import asyncpg

from benchmarks.common import (
    Stats,
    banner,
    command_line,
    fmt_ms,
    fmt_ratio,
    local_postgres,
    machine,
    scratch_dir,
)
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.memory import Access, MemoryStore, Operation, ScopeRecord, bounds, migrate
from fgentic_governance.memory.delegated import Caller, DelegatedStore, Fact, check_fact
from fgentic_governance.memory.model import EMBEDDING_DIMENSIONS, Sighting
from fgentic_governance.memoryapi.server import DELEGATE_ROLE, POOL_SIZE
from fgentic_governance.memoryapi.service import TOOL_SAVE
from tests.support.store_size import (
    HOMESERVER,
    Recorder,
    explain,
    load_others,
    other_scope,
    refill,
)

NS: Final = "bench-size"
AGENT: Final = "helper"
STORE_AGENT: Final = f"{NS}/{AGENT}"
PER_SCOPE: Final = 100
"""Rows per scope of the bulk load: the entry cap (sql/0001), so a scope is full."""
SAVE_FILL: Final = 50
"""Rows a saved-into scope holds before each save (its cap count counts them)."""
LEASE_SECONDS: Final = 540
RENEW_AFTER: Final = 420.0
CONTEXT: Final = "6f1d2c3b-4a5e-4f60-8a71-92b3c4d5e6f7"
TARGET: Final = 1.2
OPERATIONS: Final = ("fenced save", "governed search", "erase + verify")
DELEGATE_SETTINGS: Final = {"role": DELEGATE_ROLE, "search_path": "fgentic_memory, public"}

async def load(owner: Any, rows: int, label: str) -> float:
    """Load ``rows`` rows over ``rows / PER_SCOPE`` scopes; returns the seconds it took."""
    start = time.perf_counter()
    async with owner.acquire(timeout=60) as conn:
        await load_others(conn, rows // PER_SCOPE, PER_SCOPE, progress=label)
        stale = await conn.fetchval(
            "SELECT count(*) FROM fgentic_memory.memory m JOIN fgentic_memory.scope s"
            " USING (scope_key) WHERE m.consent_generation <> s.consent_generation")
    if stale:
        raise SystemExit(f"{label}: {stale} loaded rows are not at their scope's generation")
    return time.perf_counter() - start


# -- the measured scopes -------------------------------------------------------------------------


def _save_record(i: int) -> ScopeRecord:
    return ScopeRecord(scope_key=f"bench/save-{i}", subject_mxid=f"@writer-{i}:{HOMESERVER}",
                       origin_kind="native-local", agent_namespace=NS, agent_name=AGENT,
                       store_agent_name=STORE_AGENT, control_room=f"!w-{i}:{HOMESERVER}")


def _caller(record: ScopeRecord) -> Caller:
    return Caller(record.subject_mxid, record.agent_namespace, record.agent_name)


def _unit(rng: random.Random) -> list[float]:
    raw = [rng.uniform(-1.0, 1.0) for _ in range(EMBEDDING_DIMENSIONS)]
    norm = math.sqrt(sum(v * v for v in raw))
    return [v / norm for v in raw]


@dataclass
class Store:
    """One migrated store: its pools as the memory API and the control API connect, the
    scopes measured in it, and the samples."""

    label: str
    rows: int
    owner: Any
    delegate: Any
    savers: list[ScopeRecord]
    searched: list[ScopeRecord]
    erasable: list[ScopeRecord]
    samples: dict[str, list[float]] = field(default_factory=dict)
    saved: list[str] = field(default_factory=list)
    leased_at: float = 0.0
    next_erasure: int = 0

    @property
    def control(self) -> MemoryStore:
        return MemoryStore(self.owner)

    @property
    def api(self) -> DelegatedStore:
        return DelegatedStore(self.delegate)

    @property
    def measured(self) -> list[str]:
        return [r.scope_key for r in (*self.savers, *self.searched)]


async def open_store(pg: LocalPostgres, name: str, rows: int, batch: int) -> Store:
    dsn = await pg.create_database(name, extensions=("vector",))
    owner = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    async with owner.acquire() as conn:
        await migrate(conn)  # creates the runtime and delegate roles too
    kwargs = bounds.pool_kwargs(min_size=1, max_size=POOL_SIZE)
    kwargs["server_settings"] = {**kwargs["server_settings"], **DELEGATE_SETTINGS}
    delegate = await asyncpg.create_pool(dsn, **kwargs)
    scopes = rows // PER_SCOPE
    if scopes < 2 * batch + 1:
        raise SystemExit(f"{rows} rows make {scopes} scopes: too few for --batch {batch}")
    # Searched: the first `batch` bulk scopes; erased: the rest, in turn.
    return Store(name, rows, owner, delegate, [_save_record(i) for i in range(batch)],
                 [other_scope(i) for i in range(batch)],
                 [other_scope(i) for i in range(batch, scopes)],
                 {op: [] for op in OPERATIONS})


async def prepare(store: Store, rng: random.Random) -> None:
    """The save scopes (ensured, granted, filled to SAVE_FILL through the gate) and every
    measured scope's lease naming a context in progress, as the control API opens it."""
    for record in store.savers:
        await store.control.ensure_scope(record)
        await store.control.grant(record.scope_key)
    await renew_leases(store, force=True)
    for record in store.savers:
        facts = [check_fact(Fact(f"A note {k} of mine.", _unit(rng))) for k in range(SAVE_FILL)]
        await store.api.save_checked(_caller(record), facts, TOOL_SAVE)
    async with store.owner.acquire() as conn:
        await conn.execute("VACUUM (ANALYZE) fgentic_memory.memory")


async def renew_leases(store: Store, *, force: bool = False) -> None:
    """A lease lasts at most 540 s: open fresh ones in time (two live leases of one scope
    are fine)."""
    if not force and time.monotonic() - store.leased_at < RENEW_AFTER:
        return
    for record in (*store.savers, *store.searched):
        state = await store.control.scope_state(record.scope_key)
        access = Access.for_scope(record, state.consent_generation)
        await store.control.open_lease(access, LEASE_SECONDS, context_id=CONTEXT)
        await store.api.note_context(record.agent_namespace, record.agent_name,
                                     record.subject_mxid, Sighting(CONTEXT))
    store.leased_at = time.monotonic()


async def reset(store: Store) -> None:
    """Untimed, as the owner: what the bounds counted for the measured scopes only, and the
    facts the round saved (the save scopes stay at SAVE_FILL rows)."""
    subjects = [r.subject_mxid for r in (*store.savers, *store.searched)]
    async with store.owner.acquire() as conn:
        await conn.execute("DELETE FROM fgentic_memory.op_ledger WHERE scope_key = ANY($1)",
                           store.measured)
        await conn.execute("DELETE FROM fgentic_memory.rate_bucket"
                           " WHERE subject_mxid = ANY($1)", subjects)
        await conn.execute("UPDATE fgentic_memory.delegation_lease SET recalls = 0"
                           " WHERE scope_key = ANY($1) AND recalls > 0", store.measured)
        await conn.execute("DELETE FROM fgentic_memory.memory WHERE id = ANY($1)", store.saved)
    store.saved.clear()
    await renew_leases(store)


# -- the three operations ------------------------------------------------------------------------


async def save_one(store: Store, record: ScopeRecord, fact: Fact) -> None:
    """The memory API's ``save_memory`` (service.MemoryApi.save) without HTTP."""
    caller = _caller(record)
    checked = check_fact(fact)
    await store.api.admit(caller, {Operation.SAVE: 1, Operation.EMBEDDING: 1}, explicit=True,
                          bound=True)
    store.saved += await store.api.save_checked(caller, [checked], TOOL_SAVE)


async def search_one(store: Store, record: ScopeRecord, query: Sequence[float]) -> None:
    """The memory API's search (service.MemoryApi.search) without HTTP. min_score -1: every
    row qualifies, so five come back whatever the random vectors score."""
    caller = _caller(record)
    await store.api.admit(caller, {Operation.LOAD: 1, Operation.EMBEDDING: 1}, bound=True)
    found = await store.api.search(caller, query, limit=5, min_score=-1.0)
    if len(found) != 5:
        raise SystemExit(f"{store.label}: a search found {len(found)} rows, expected 5")


async def erase_one(store: Store) -> tuple[float, ScopeRecord]:
    record = store.erasable[store.next_erasure % len(store.erasable)]
    store.next_erasure += 1
    start = time.perf_counter()
    receipt = await store.control.erase_scope(record.scope_key)
    elapsed = time.perf_counter() - start
    if not receipt.verified or receipt.deleted != PER_SCOPE:
        raise SystemExit(f"{store.label}: erasure of a {PER_SCOPE}-row scope: {receipt}")
    return elapsed, record


async def _timed(work: Awaitable[object]) -> float:
    """Seconds to await ``work`` (a coroutine not started yet)."""
    start = time.perf_counter()
    await work
    return time.perf_counter() - start


async def one_round(store: Store, rng: random.Random, erasures: int, order: Sequence[str],
                    counted: bool) -> None:
    """One batch of each operation on ``store``, in ``order``; untimed refills after."""
    erased: list[ScopeRecord] = []
    for op in order:
        if op == "fenced save":
            for i, record in enumerate(store.savers):
                fact = Fact(f"A new note {i} of mine, round {rng.random():.6f}.", _unit(rng))
                took = await _timed(save_one(store, record, fact))
                if counted:
                    store.samples[op].append(took)
        elif op == "governed search":
            for record in store.searched:
                query = _unit(rng)
                took = await _timed(search_one(store, record, query))
                if counted:
                    store.samples[op].append(took)
        else:
            for _ in range(erasures):
                took, record = await erase_one(store)
                erased.append(record)
                if counted:
                    store.samples[op].append(took)
    async with store.owner.acquire() as conn:
        for record in erased:
            await refill(conn, record.scope_key, PER_SCOPE)
    await reset(store)


async def measure(stores: Sequence[Store], rounds: int, erasures: int, seed: int) -> None:
    rng = random.Random(seed)
    for round_ in range(rounds + 1):  # round 0 warms every path up and is not counted
        turn = round_ % len(OPERATIONS)
        order = OPERATIONS[turn:] + OPERATIONS[:turn]
        pair = stores if round_ % 2 == 0 else list(reversed(stores))
        for store in pair:
            await one_round(store, rng, erasures, order, counted=round_ > 0)


# -- EXPLAIN: the statements the real code ran, replayed -------------------------------------------


_BUFFERS: Final = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")


@dataclass(frozen=True)
class Plan:
    """One replayed statement: its text's first words, the shared buffers its top node
    touched (nested statements of the functions it calls included), its scan nodes."""

    statement: str
    buffers: int
    scans: tuple[str, ...]
    text: tuple[str, ...]


def _plan(statement: str, lines: Sequence[str]) -> Plan:
    text = tuple(lines)
    found = next((m for line in text if (m := _BUFFERS.search(line))), None)
    buffers = sum(int(g or 0) for g in found.groups()) if found else 0
    scans = tuple(sorted({line.strip().split(" on ")[0].lstrip("-> ").strip()
                          + " on " + line.split(" on ")[1].split()[0]
                          for line in text if " Scan" in line and " on " in line}))
    return Plan(" ".join(statement.split())[:72], buffers, scans, text)


async def plans_of(store: Store, rng: random.Random) -> dict[str, list[Plan]]:
    """Each operation once through recording pools (then reset and refilled, untimed), and
    its statements replayed under EXPLAIN on the pool that ran them."""
    found: dict[str, list[Plan]] = {}
    for op in OPERATIONS:
        pool = store.owner if op == "erase + verify" else store.delegate
        recorder = Recorder(pool)
        probe = replace(store, owner=recorder) if pool is store.owner else replace(
            store, delegate=recorder)
        if op == "fenced save":
            await save_one(probe, store.savers[0], Fact("A probe note of mine.", _unit(rng)))
        elif op == "governed search":
            await search_one(probe, store.searched[0], _unit(rng))
        else:
            _, erased = await erase_one(probe)
            # Rows as they were before that erasure, for the replay to delete and count.
            async with store.owner.acquire() as conn:
                await refill(conn, erased.scope_key, PER_SCOPE, generations_back=1)
        await reset(store)  # probe shares the saved list
        found[op] = [_plan(statement, plan) for (statement, _), plan in zip(
            recorder.log, await explain(pool, recorder.log), strict=True)]
        if op == "erase + verify":
            async with store.owner.acquire() as conn:
                await conn.execute("DELETE FROM fgentic_memory.memory WHERE scope_key = $1",
                                   erased.scope_key)
                await refill(conn, erased.scope_key, PER_SCOPE)
    return found


def render_plans(small: Store, large: Store, plans: Sequence[dict[str, list[Plan]]],
                 verbose: bool) -> str:
    """Buffers each statement touched on both stores, and the scans of the large one's."""
    out = [f"shared buffers per statement, {small.rows:,} vs {large.rows:,} rows (EXPLAIN "
           "ANALYZE of the statements each operation ran; nested statements included)"]
    for op in OPERATIONS:
        out.append(f"{op}:")
        for a, b in zip(plans[0][op], plans[1][op], strict=True):
            grew = "  <- grows" if b.buffers > max(a.buffers * TARGET, a.buffers + 20) else ""
            out.append(f"  {a.buffers:>6} {b.buffers:>6}  {b.statement}{grew}")
            out += [f"{'':17}{scan}" for scan in b.scans]
            if verbose:
                out += [f"{'':17}| {line}" for line in b.text]
    return "\n".join(out)


# -- report ----------------------------------------------------------------------------------------


def render(small: Store, large: Store) -> str:
    header = ("operation", "n", f"p50 {small.rows:,}", f"p50 {large.rows:,}", "ratio",
              f"p99 {small.rows:,}", f"p99 {large.rows:,}", "ratio", "target")
    lines = [header]
    for op in OPERATIONS:
        a, b = Stats.of(small.samples[op]), Stats.of(large.samples[op])
        lines.append((op, str(b.n), fmt_ms(a.median), fmt_ms(b.median),
                      fmt_ratio(b.median, a.median), fmt_ms(a.p99), fmt_ms(b.p99),
                      fmt_ratio(b.p99, a.p99), f"<= {TARGET}x"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rows = ["  ".join([line[0].ljust(widths[0]),
                       *(c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True))])
            for line in lines]
    rows.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([f"the same operations on a {small.rows:,}-row and a {large.rows:,}-row "
                      "store, one run (ms)", *rows])


async def run(pg: LocalPostgres, args: argparse.Namespace) -> str:
    stores = [await open_store(pg, "size_small", args.small, args.batch),
              await open_store(pg, "size_large", args.large, args.batch)]
    try:
        banner("loading (untimed figures)")
        for store in stores:
            took = await load(store.owner, store.rows, store.label)
            print(f"{store.label}: {store.rows:,} rows over {store.rows // PER_SCOPE:,} scopes "
                  f"loaded in {took:.1f} s", flush=True)
        rng = random.Random(args.seed)
        for store in stores:
            await prepare(store, rng)
        banner("measuring")
        await measure(stores, args.rounds, args.erasures, args.seed)
        plans = [await plans_of(store, rng) for store in stores]
        table = render(stores[0], stores[1])
        async with stores[1].owner.acquire() as conn:
            sizes = await conn.fetchrow(
                "SELECT count(*) AS n, pg_total_relation_size('fgentic_memory.memory') AS b"
                " FROM fgentic_memory.memory")
        table += (f"\nlarge store at the end: {sizes['n']:,} rows, memory table "
                  f"{sizes['b'] / 2**30:.2f} GiB with its indexes and TOAST")
        table += "\n\n" + render_plans(stores[0], stores[1], plans, args.explain)
        return table
    finally:
        for store in stores:
            await store.delegate.close()
            await store.owner.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--large", type=int, default=1_000_000, help="rows of the large store")
    parser.add_argument("--small", type=int, default=10_000, help="rows of the small store")
    parser.add_argument("--rounds", type=int, default=40,
                        help="timed rounds (plus one warm-up), both stores each round")
    parser.add_argument("--batch", type=int, default=10,
                        help="saves and searches per store per round (scopes each)")
    parser.add_argument("--erasures", type=int, default=2, help="erasures per store per round")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--explain", action="store_true",
                        help="print the large store's plan of every statement, not only its "
                             "buffers and scans")
    parser.add_argument("--keep", action="store_true", help="keep logs and server state")
    args = parser.parse_args(argv)
    if not 1 <= args.batch <= 100 or not 1 <= args.erasures <= 10 or args.rounds < 1:
        parser.error("--batch 1..100, --erasures 1..10, --rounds >= 1")
    for name in ("small", "large"):
        if getattr(args, name) % PER_SCOPE or not 0 < getattr(args, name) <= 10_000_000:
            parser.error(f"--{name} must be a multiple of {PER_SCOPE} up to 10,000,000")

    print(f"command: {command_line()}")
    print(f"machine: {machine()}; run {uuid.uuid4().hex[:8]}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    with scratch_dir("memory-size", keep=args.keep) as work, \
            local_postgres(work / "postgres") as pg:
        table = asyncio.run(run(pg, args))
    banner("summary (figures only; nothing is asserted)")
    print(table)
    print(f"\ncommand: {command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
