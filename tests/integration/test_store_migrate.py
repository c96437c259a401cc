"""The versioned, idempotent migration of the fgentic_memory schema."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from fgentic_governance.memory import SCHEMA_VERSION, StoreRefusal, migrate, schema_version
from fgentic_governance.memory.schema import migrations, require_current
from fgentic_governance.reasons import Reason

pytestmark = pytest.mark.integration


async def test_migrate_is_versioned_and_idempotent(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await schema_version(conn) == 0
        with pytest.raises(StoreRefusal) as info:
            await require_current(conn)
        assert info.value.reason is Reason.STORE_SCHEMA_MISMATCH

        assert await migrate(conn) == SCHEMA_VERSION == len(migrations()) == 24
        objects = await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'fgentic_memory'")
        assert await migrate(conn) == SCHEMA_VERSION  # a no-op the second time
        assert await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'fgentic_memory'") == objects
        rows = await conn.fetch(
            "SELECT version, name FROM fgentic_memory.schema_version ORDER BY version")
        assert [r["version"] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
        assert [r["name"] for r in rows] == [m.name for m in migrations()]
        await require_current(conn)
    finally:
        await conn.close()


async def test_concurrent_migrators_serialize(pg_dsn: str) -> None:
    conns = [await asyncpg.connect(pg_dsn) for _ in range(4)]
    try:
        versions = await asyncio.gather(*(migrate(c) for c in conns))
        assert versions == [SCHEMA_VERSION] * 4
        assert await conns[0].fetchval(
            "SELECT count(*) FROM fgentic_memory.schema_version") == SCHEMA_VERSION
    finally:
        for conn in conns:
            await conn.close()


async def test_edited_or_unknown_versions_are_refused(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await migrate(conn)
        await conn.execute(
            "UPDATE fgentic_memory.schema_version SET sha256 = 'edited' WHERE version = 2")
        with pytest.raises(StoreRefusal) as info:
            await migrate(conn)
        assert info.value.reason is Reason.STORE_SCHEMA_MISMATCH
        await conn.execute(
            "UPDATE fgentic_memory.schema_version SET sha256 = $1 WHERE version = 2",
            migrations()[1].sha256)
        await conn.execute("INSERT INTO fgentic_memory.schema_version (version, name, sha256)"
                           " VALUES ($1, 'from-the-future.sql', 'x')", SCHEMA_VERSION + 1)
        with pytest.raises(StoreRefusal) as info:
            await migrate(conn)
        assert info.value.reason is Reason.STORE_SCHEMA_MISMATCH
        with pytest.raises(StoreRefusal):
            await require_current(conn)
    finally:
        await conn.close()


async def test_definer_functions_are_not_public(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await migrate(conn)
        rows = await conn.fetch(
            "SELECT p.proname, p.prosecdef, p.proconfig,"
            " has_function_privilege('public', p.oid, 'EXECUTE') AS public_exec"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'fgentic_memory'")
        assert rows
        for row in rows:
            assert not row["public_exec"], row["proname"]
            if row["prosecdef"]:
                # Every SECURITY DEFINER function pins its search_path.
                assert any(c.startswith("search_path=") for c in row["proconfig"] or []), (
                    row["proname"])
        assert not await conn.fetchval(
            "SELECT has_schema_privilege('public', 'fgentic_memory', 'USAGE')")
    finally:
        await conn.close()
