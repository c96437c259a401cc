"""A scope's reads do not read other people's scopes (issue 40 §2, sql/0024).

The read view joins the transaction's claim with the scope table and the scope's rows. The
claim is one row, but PostgreSQL planned its function with the default estimate of 1,000 rows
and so read every scope (a hash join over a sequential scan of ``fgentic_memory.scope``): a
governed search cost more the more people used memory (benchmarks/bench_memory_size.py). Each
statement a read path really runs (recorded while it runs) is planned again here beside 200
other scopes, both as PostgreSQL plans it for the values and as it caches it for a statement
prepared five times (asyncpg prepares every statement): the scope is read by its key and its
rows by (scope_key, consent_generation), and no table is scanned whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from fgentic_governance.memory import Access, MemoryStore
from fgentic_governance.memory.delegated import Caller, DelegatedStore, Fact
from fgentic_governance.memory.model import DEFAULT_ENVELOPE
from tests.support.store import ALICE, enabled, leased_turn
from tests.support.store_size import Recorder, explain, load_others
from tests.support.vectors import unit_vector

pytestmark = pytest.mark.integration

OTHERS = 200
PER_SCOPE = 5
ALICE_HELPER = Caller(ALICE, "team-a", "helper")
QUERY = unit_vector("what does Alice drink")
# The search statements as they were before each distance was computed once: the reference
# the equivalence test compares with.
OLD_API_SEARCH = """
WITH q AS MATERIALIZED (SELECT $1::text::vector AS v)
SELECT id, 1 - (embedding <=> (SELECT v FROM q)) AS score
  FROM fgentic_memory.readable_memory
 WHERE embedding IS NOT NULL AND 1 - (embedding <=> (SELECT v FROM q)) >= $3
 ORDER BY embedding <=> (SELECT v FROM q), id LIMIT $2
"""
OLD_RUNTIME_SEARCH = """
WITH q AS MATERIALIZED (SELECT $1::text::vector AS v)
SELECT id, 1 - (embedding <=> (SELECT v FROM q)) AS score
  FROM fgentic_memory.readable_memory WHERE embedding IS NOT NULL
 ORDER BY embedding <=> (SELECT v FROM q), id LIMIT $2
"""
ReadPath = Callable[[Any, Any, Access], Awaitable[list[Any]]]
"""A read path on (delegate-role pool, runtime-role pool, Alice's access)."""


async def _memory_api_search(delegate: Any, _: Any, __: Access) -> list[Any]:
    """The memory API's search (DelegatedStore, under the lease)."""
    return await DelegatedStore(delegate).search(ALICE_HELPER, QUERY, limit=5, min_score=-1.0)


async def _runtime_search(_: Any, runtime: Any, access: Access) -> list[Any]:
    """An adapted runtime's search (MemoryStore.search, enter_scope)."""
    return await MemoryStore(runtime).search(access, QUERY, limit=5)


async def _inspect(_: Any, runtime: Any, access: Access) -> list[Any]:
    """``!memory inspect`` (MemoryStore.list_entries, the control API's page)."""
    return await MemoryStore(runtime).list_entries(access, limit=20)


@pytest.fixture
async def alice_among_others(store: MemoryStore, pool: asyncpg.Pool,
                             delegate_pool: asyncpg.Pool) -> Access:
    """Alice's scope, leased and holding three facts, beside OTHERS scopes of PER_SCOPE rows
    (analyzed, as autovacuum would)."""
    async with pool.acquire() as conn:
        await load_others(conn, OTHERS, PER_SCOPE)
    access = await enabled(store)
    await leased_turn(store, pool, access, 60)
    await DelegatedStore(delegate_pool).save(
        ALICE_HELPER, [Fact(f"Alice's note {i}.", unit_vector(f"note {i}")) for i in range(3)],
        DEFAULT_ENVELOPE)
    return access


@pytest.mark.parametrize("read", [_memory_api_search, _runtime_search, _inspect],
                         ids=["memory-api-search", "runtime-search", "inspect"])
async def test_a_read_of_one_scope_reads_that_scope_by_key_among_many(
        alice_among_others: Access, delegate_pool: asyncpg.Pool, runtime_pool: asyncpg.Pool,
        read: ReadPath) -> None:
    # The read path runs for real (three rows come back) while its statements are recorded.
    recorders = Recorder(delegate_pool), Recorder(runtime_pool)
    assert len(await read(recorders[0], recorders[1], alice_among_others)) == 3
    [recorder] = [r for r in recorders if r.log]
    role_pool = delegate_pool if recorder is recorders[0] else runtime_pool
    for generic in (False, True):
        plans = await explain(role_pool, recorder.log, generic=generic)
        [view_plan] = [plan for (statement, _), plan in zip(recorder.log, plans, strict=True)
                       if "readable_memory" in statement]
        text = "\n".join(view_plan)
        assert "Seq Scan" not in text, text
        assert "Index Scan using scope_pkey on scope" in text, text
        assert "memory_scope_generation_idx on memory" in text, text
    # A search computes each row's distance once: every ``<=>`` detoasts the row's vector
    # again, and written out for the filter, the score and the order it was computed thrice.
    verbose = await explain(role_pool, recorder.log,
                            options="ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF")
    for (statement, _), plan in zip(recorder.log, verbose, strict=True):
        if "<=>" in statement:
            assert sum(line.count("<=>") for line in plan) == 1, "\n".join(plan)


async def _replayed(pool: Any, log: list[Any], reference: str) -> list[tuple[str, float]]:
    """The recorded calls again on ``pool`` in one read-only transaction, the search replaced
    by ``reference`` with the same arguments: (id, score) of what the reference finds."""
    async with pool.acquire(timeout=60) as conn, conn.transaction(readonly=True):
        found: list[tuple[str, float]] = []
        for statement, args in log:
            if "<=>" not in statement:
                await conn.fetch(statement, *args)
                continue
            rows = await conn.fetch(reference, *args)
            found = [(str(r["id"]), float(r["score"])) for r in rows]
    return found


async def test_a_search_finds_what_it_found_when_it_computed_each_distance_thrice(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool,
        runtime_pool: asyncpg.Pool) -> None:
    # Thirty facts over ten vectors (ties: the id orders them), searched through both paths
    # with several limits and floors, against the former statements on the same claim.
    access = await enabled(store)
    await leased_turn(store, pool, access, 60)
    await DelegatedStore(delegate_pool).save(
        ALICE_HELPER, [Fact(f"Alice's note {i}.", unit_vector(f"note {i % 10}"))
                       for i in range(30)], DEFAULT_ENVELOPE)
    for n, (limit, floor) in enumerate([(5, -1.0), (50, -1.0), (12, 0.0), (7, 0.02)]):
        query = unit_vector(f"note {n}") if n % 2 else QUERY
        api, runtime = Recorder(delegate_pool), Recorder(runtime_pool)
        found = await DelegatedStore(api).search(ALICE_HELPER, query, limit=limit,
                                                 min_score=floor)
        assert [(f.id, f.score) for f in found] == \
            await _replayed(delegate_pool, api.log, OLD_API_SEARCH)
        entries = await MemoryStore(runtime).search(access, query, limit=limit)
        assert [(e.id, e.score) for e in entries] == \
            await _replayed(runtime_pool, runtime.log, OLD_RUNTIME_SEARCH)
        assert found and entries
