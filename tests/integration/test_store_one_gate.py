"""sql/0020 on a real PostgreSQL: a governed save passes the write gate once, in save_fact().

Its insert is exempt from the trigger only while two things hold at once: the current user is
save_fact()'s owner (true only inside the SECURITY DEFINER function, or for the owner itself)
and the transaction-local setting ``fgentic_memory.gate`` is 'on' (which save_fact() sets just
before its insert and clears just after). Neither alone exempts anything, the exemption ends
with save_fact()'s insert, and save_fact() refuses what the gate refuses.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from fgentic_governance.memory import Access, MemoryStore
from fgentic_governance.memory.errors import guarded
from fgentic_governance.reasons import Reason
from tests.support.store import GATED_INSERT, enabled, refused, store_agent

pytestmark = pytest.mark.integration

GATE_ON = "SELECT set_config('fgentic_memory.gate', 'on', true)"
SAVE_FACT = """
SELECT fgentic_memory.save_fact($1, $2, $3, $4, $5, $6, $7, NULL, '{}'::jsonb, $8,
                                'fact', 'unknown', 'unspecified', 'unknown', 'normal')
"""
OWNER_INSERT = GATED_INSERT.replace("INSERT INTO memory", "INSERT INTO fgentic_memory.memory")


async def _raw_insert(conn: Any, access: Access, sql: str = GATED_INSERT) -> Any:
    return await conn.fetchval(sql, store_agent(access), access.subject_mxid, "a fact",
                               access.scope_key, access.generation)


async def _save_fact(conn: Any, access: Access, *, ttl: timedelta | None = None,
                     params: tuple[Any, ...] | None = None) -> Any:
    return await conn.fetchval(SAVE_FACT, *(params or access.params()), "Alice likes tea.", ttl)


async def test_the_setting_alone_exempts_no_runtime_insert(
        store: MemoryStore, runtime_pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    async with runtime_pool.acquire() as conn, conn.transaction():
        await conn.execute(GATE_ON)
        assert await refused(guarded(_raw_insert(conn, access))) is Reason.SCOPE_MISSING
    assert await store.entry_count(access.scope_key) == 0


async def test_the_owner_alone_is_gated(store: MemoryStore, pool: asyncpg.Pool) -> None:
    """The owner's own session, without the setting, meets the trigger (no claim: refused)."""
    access = await enabled(store)
    async with pool.acquire() as conn:
        assert await refused(guarded(_raw_insert(conn, access, OWNER_INSERT))) \
            is Reason.SCOPE_MISSING
    assert await store.entry_count(access.scope_key) == 0


@pytest.mark.parametrize("as_owner", [False, True], ids=["runtime", "owner"])
async def test_the_exemption_ends_with_save_facts_insert(
        store: MemoryStore, pool: asyncpg.Pool, runtime_pool: asyncpg.Pool,
        as_owner: bool) -> None:
    access = await enabled(store)
    conns = pool if as_owner else runtime_pool
    async with conns.acquire() as conn, conn.transaction():
        assert await _save_fact(conn, access)
        assert await conn.fetchval("SELECT current_setting('fgentic_memory.gate', true)") == ""
        insert = _raw_insert(conn, access, OWNER_INSERT if as_owner else GATED_INSERT)
        assert await refused(guarded(insert)) is Reason.SCOPE_MISSING
    assert await store.entry_count(access.scope_key) == 0  # the refusal rolled both back
    async with conns.acquire() as conn:
        assert await _save_fact(conn, access)
    assert await store.entry_count(access.scope_key) == 1


async def test_save_fact_refuses_what_the_gate_refuses(
        store: MemoryStore, runtime_pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    wrong_room = (*access.params()[:5], "!elsewhere:example.org")
    wrong_subject = (access.params()[0], access.params()[1], "@bob:example.org",
                     *access.params()[3:])
    stale = (access.params()[0], access.generation + 1, *access.params()[2:])
    async with runtime_pool.acquire() as conn:
        for params, reason in ((wrong_room, Reason.SCOPE_MISSING),
                               (wrong_subject, Reason.CONSENT_SUBJECT_MISMATCH),
                               (stale, Reason.STALE_GENERATION)):
            assert await refused(guarded(_save_fact(conn, access, params=params))) is reason
        for ttl in (timedelta(0), timedelta(seconds=-1)):
            assert await refused(guarded(_save_fact(conn, access, ttl=ttl))) \
                is Reason.INVALID_SPEC
        # Through a transaction at another isolation level, as enter_scope refuses it.
        async with conn.transaction(isolation="repeatable_read"):
            assert await refused(guarded(_save_fact(conn, access))) is Reason.ISOLATION_REFUSED
    assert await store.entry_count(access.scope_key) == 0


async def test_a_ttl_shortens_and_never_lengthens_the_retention(
        store: MemoryStore, runtime_pool: asyncpg.Pool, pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    async with runtime_pool.acquire() as conn:
        short = await _save_fact(conn, access, ttl=timedelta(hours=1))
        long = await _save_fact(conn, access, ttl=timedelta(days=10_000))
    expiry = ("SELECT round(extract(epoch FROM expires_at - created_at))"
              " FROM fgentic_memory.memory WHERE id = $1")
    retention = await pool.fetchval(
        "SELECT max_retention_days FROM fgentic_memory.scope WHERE scope_key = $1",
        access.scope_key)
    assert await pool.fetchval(expiry, short) == 3600
    assert await pool.fetchval(expiry, long) == retention * 86400


async def test_the_delegate_and_public_cannot_bypass_the_function_grant(
        pool: asyncpg.Pool) -> None:
    """save_fact() is the runtime role's (the delegate holds it); PUBLIC's EXECUTE is revoked."""
    granted = await pool.fetch(
        "SELECT r.rolname FROM pg_catalog.pg_roles r"
        " WHERE has_function_privilege(r.oid, 'fgentic_memory.save_fact(text, bigint, text,"
        " text, text, text, text, vector, jsonb, interval, text, text, text, text, text)',"
        " 'EXECUTE') AND NOT r.rolsuper AND r.rolname LIKE 'fgentic_memory%'")
    assert {row["rolname"] for row in granted} == {
        "fgentic_memory_runtime", "fgentic_memory_delegate"}
