"""Each store statement enters its scope once (memory/store.py, memory/delegated.py), and a
row passes the write gate once.

The statements call ``enter_scope`` and ``enter_delegation`` as scalars in a subquery kept
apart by ``OFFSET 0`` (a function in FROM cost a tuplestore per statement). Pulled up into
the outer target list, each ``(ctx).field`` would call the function again: every call
re-checks the fence and re-signs the claim, and a delegated save would charge nothing more
but take the entry lock once per field. The function counts of PostgreSQL's own statistics
(``track_functions``) say how often each ran.
"""

from __future__ import annotations

import asyncpg
import pytest

from fgentic_governance.memory import MemoryStore
from fgentic_governance.memory.delegated import Caller, DelegatedStore, Fact
from fgentic_governance.memory.model import DEFAULT_ENVELOPE, Operation
from tests.support.polling import until_async
from tests.support.store import ALICE, CONTEXT, enabled

pytestmark = pytest.mark.integration

UNIT = [1.0] + [0.0] * 767
CALLS = ("SELECT funcname, calls FROM pg_stat_user_functions"
         " WHERE schemaname = 'fgentic_memory'"
         " AND funcname IN ('enter_scope', 'enter_delegation', 'memory_before_insert',"
         " 'save_fact')")


async def _calls(pg_dsn: str) -> dict[str, int]:
    """Function calls counted so far, once the closed backends' statistics have arrived."""

    async def counted() -> dict[str, int]:
        conn = await asyncpg.connect(pg_dsn)
        try:
            return {r["funcname"]: int(r["calls"]) for r in await conn.fetch(CALLS)}
        finally:
            await conn.close()

    return await until_async(counted, "the statistics of all four functions", 10.0,
                             holds=lambda found: len(found) == 4)


async def test_every_statement_enters_its_scope_once(
        pg_dsn: str, pool: asyncpg.Pool) -> None:
    setup = MemoryStore(pool)
    access = await enabled(setup)
    await setup.open_lease(access, 120, context_id=CONTEXT)
    database = await pool.fetchval("SELECT current_database()")
    await pool.execute(f'ALTER DATABASE "{database}" SET track_functions = \'all\'')
    counted = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        store, api = MemoryStore(counted), DelegatedStore(counted)
        await store.save(access, "Alice prefers tea.", embedding=UNIT)
        await store.save(access, "Alice prefers green tea.")
        assert len(await store.search(access, UNIT, limit=5)) == 1
        caller = Caller(ALICE, access.agent_namespace, access.agent_name)
        await api.admit(caller, {Operation.SAVE: 3, Operation.EMBEDDING: 3}, explicit=True)
        ids = await api.save(caller, [Fact(f"Alice likes jazz, note {n}.", UNIT)
                                      for n in range(3)], DEFAULT_ENVELOPE)
        assert len(ids) == 3
        await api.admit(caller, {Operation.LOAD: 1, Operation.EMBEDDING: 1})
        assert len(await api.search(caller, UNIT, limit=5, min_score=-1.0)) == 4  # with embeddings
    finally:
        await counted.close()
    # By scope: two saves, each the whole gate in save_fact() (sql/0020) and so exempt from the
    # trigger, and a search. By delegation: two admissions, a save of three and a search,
    # each entering the leased scope through enter_scope once; the trigger gates each row.
    assert await _calls(pg_dsn) == {
        "enter_scope": 1 + 4, "enter_delegation": 4, "memory_before_insert": 3, "save_fact": 2}
