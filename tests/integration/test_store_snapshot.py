"""Review N2 on a real PostgreSQL: no snapshot of the runtime outlives a verified erasure
(sql/0010_delegate.sql).

A runtime may lift its own timeouts (``SET LOCAL ... = 0``), so they bound nothing. Two ways a
snapshot taken before the fence could still return the erased rows after the receipt said
Verified: a transaction at REPEATABLE READ (or SERIALIZABLE), whose every statement reads the
first snapshot, and, at READ COMMITTED, a cursor or a statement still running. The first
cannot enter a scope any more (ISOLATION_REFUSED); for the second the erasure waits, bounded,
until every transaction that entered the scope before it has ended, and otherwise reports
FAILED with STORE_LOCK_TIMEOUT, never Verified.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from fgentic_governance.memory import Access, ErasureReceipt, MemoryStore, bounds
from fgentic_governance.reasons import Reason
from tests.support.store import defeat_bounds, enabled, enter, migrated_pool

pytestmark = pytest.mark.integration

FACTS = ("Alice likes jazz.", "Alice prefers tea.")
READ = "SELECT content FROM readable_memory ORDER BY content"
ROWS = "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1"
Erase = Callable[[MemoryStore, Access, list[str]], Awaitable[ErasureReceipt]]


async def saved(store: MemoryStore) -> tuple[Access, list[str]]:
    access = await enabled(store)
    return access, [await store.save(access, fact) for fact in FACTS]


async def _forget_all(store: MemoryStore, access: Access, ids: list[str]) -> ErasureReceipt:
    return await store.erase_scope(access.scope_key)


async def _withdraw(store: MemoryStore, access: Access, ids: list[str]) -> ErasureReceipt:
    return await store.withdraw(access.scope_key)


async def _forget_entry(store: MemoryStore, access: Access, ids: list[str]) -> ErasureReceipt:
    return await store.forget_entry(access, ids[0])  # "Alice likes jazz.", the first row read


ERASURES = pytest.mark.parametrize("erase", [_forget_all, _withdraw, _forget_entry],
                                   ids=["forget-all", "off", "forget-entry"])


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable"])
async def test_a_snapshot_transaction_cannot_enter_a_scope(
        store: MemoryStore, runtime_pool: Any, pool: Any, isolation: str) -> None:
    access, _ = await saved(store)
    async with runtime_pool.acquire() as conn:
        tx = conn.transaction(isolation=isolation)
        await tx.start()
        try:
            await defeat_bounds(conn)
            assert await conn.fetch(READ) == []  # the snapshot is taken here, before the fence
            with pytest.raises(asyncpg.PostgresError) as info:
                await enter(conn, access, "recall")
            assert (info.value.sqlstate, str(info.value)) == ("FG019", "ISOLATION_REFUSED")
        finally:
            await tx.rollback()
    receipt = await store.erase_scope(access.scope_key)
    assert receipt.verified and await pool.fetchval(ROWS, access.scope_key) == 0


@pytest.fixture
async def patient_store(pg_dsn: str) -> AsyncIterator[MemoryStore]:
    """The operator's store with its own pool bounds (bounds.POOL: an 8 s lock wait)."""
    owner = await migrated_pool(pg_dsn, **bounds.pool_kwargs(min_size=1, max_size=4))
    try:
        yield MemoryStore(owner)
    finally:
        await owner.close()


@ERASURES
async def test_an_erasure_is_verified_only_after_earlier_entrants_ended(
        store: MemoryStore, patient_store: MemoryStore, runtime_pool: Any, pool: Any,
        erase: Erase) -> None:
    access, ids = await saved(store)
    async with runtime_pool.acquire() as conn:
        tx = conn.transaction()  # READ COMMITTED, the only isolation that may enter
        await tx.start()
        await defeat_bounds(conn)
        await enter(conn, access, "recall")
        cursor = await conn.cursor(READ)  # its snapshot predates the erasure
        assert (await cursor.fetchrow())["content"] == FACTS[0]
        erasure = asyncio.create_task(erase(patient_store, access, ids))
        await asyncio.sleep(1.0)  # well below its pool's 8 s lock_timeout, even on a slow host
        # Not Verified while the cursor can still return an erased row.
        assert not erasure.done()
        assert (await cursor.fetchrow())["content"] == FACTS[1]
        await tx.rollback()
    receipt = await asyncio.wait_for(erasure, 10)
    assert receipt.verified, receipt.reason
    left = await pool.fetch("SELECT id FROM fgentic_memory.memory WHERE scope_key = $1",
                            access.scope_key)
    assert [row["id"] for row in left] == (ids[1:] if erase is _forget_entry else [])


@pytest.fixture
async def bounded_store(pg_dsn: str, pool: Any) -> AsyncIterator[MemoryStore]:
    """The operator's store with its own pool bounds (bounds.POOL), lock wait shortened."""
    kwargs = bounds.pool_kwargs(min_size=1, max_size=4)
    kwargs["server_settings"] = {**kwargs["server_settings"], "lock_timeout": "1s"}
    owner = await migrated_pool(pg_dsn, **kwargs)
    try:
        yield MemoryStore(owner)
    finally:
        await owner.close()


async def test_an_entrant_that_outstays_the_bound_fails_the_erasure(
        store: MemoryStore, bounded_store: MemoryStore, runtime_pool: Any, pool: Any) -> None:
    access, _ = await saved(store)
    async with runtime_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await defeat_bounds(conn)
        await enter(conn, access, "recall")
        cursor = await conn.cursor(READ)
        receipt = await bounded_store.erase_scope(access.scope_key)
        # The cursor still reads what the fence erased, so the receipt must not say Verified.
        assert (await cursor.fetchrow())["content"] == FACTS[0]
        await tx.rollback()
    assert (receipt.verified, receipt.reason) == (False, Reason.STORE_LOCK_TIMEOUT)
    assert await pool.fetchval(ROWS, access.scope_key) == 0
    state = await store.scope_state(access.scope_key)
    assert not state.enabled  # a FAILED erasure leaves the scope disabled (fail closed)


async def test_a_runtime_cannot_copy_a_scope_into_a_temporary_table(
        store: MemoryStore, runtime_pool: Any) -> None:
    """A temporary table filled while the scope was entered would outlive its erasure."""
    access, _ = await saved(store)
    async with runtime_pool.acquire() as conn, conn.transaction():
        await enter(conn, access)
        assert await conn.fetchval("SELECT count(*) FROM fgentic_memory.readable_memory") > 0
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CREATE TEMP TABLE copied AS "
                               "SELECT * FROM fgentic_memory.readable_memory")
