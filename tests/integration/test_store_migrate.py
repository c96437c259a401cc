"""The versioned, idempotent migration of the fgentic_memory schema: version steps applied once,
one file per function, view and trigger re-applied at every step."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from fgentic_devenv import fence
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.memory import SCHEMA_VERSION, StoreRefusal, migrate, schema, schema_version
from fgentic_governance.memory.schema import ObjectFile, migrations, object_files, require_current
from fgentic_governance.reasons import Reason
from tests.support.store import catalog, migrate_as_shipped_v24

pytestmark = pytest.mark.integration


async def test_migrate_is_versioned_and_idempotent(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await schema_version(conn) == 0
        with pytest.raises(StoreRefusal) as info:
            await require_current(conn)
        assert info.value.reason is Reason.STORE_SCHEMA_MISMATCH

        assert await migrate(conn) == SCHEMA_VERSION == len(migrations()) == 27
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


@pytest.fixture
async def fresh(postgres: LocalPostgres) -> AsyncIterator[asyncpg.Connection]:
    """A second fresh database of the session's server, migrated to head."""
    name = f"t_fresh_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(await postgres.create_database(name, extensions=("vector",)))
    try:
        await migrate(conn)
        yield conn
    finally:
        await conn.close()
        await postgres.drop_database(name)


Catalog = dict[str, dict[str, tuple[object, ...]]]


def _without_the_record(dump: Catalog) -> Catalog:
    """``dump`` less sql/0025's table (the record of the object files) and what it implies."""
    return {kind: {name: facts for name, facts in objects.items()
                   if "schema_repeatable" not in name}
            for kind, objects in dump.items()}


# The functions version steps after 0025 redefined (0026: the scope checks written once; 0027:
# the claim MAC, the entry cap and the live-lease join written once); 0025 changed no object.
CHANGED_AFTER_0025 = frozenset({"check_binding", "check_scope", "enter_scope", "save_fact",
                                "claim_sign", "claim_mac", "check_entry_cap",
                                "memory_before_insert", "live_leases", "open_lease",
                                "leased_scope", "enter_delegation", "bind_context"})


def _differing(a: Catalog, b: Catalog) -> set[str]:
    """The bare names (``enter_scope``) of the objects ``a`` and ``b`` hold differently."""
    return {name.removeprefix("fgentic_memory.").split("(")[0]
            for kind in a.keys() | b.keys()
            for name in a.get(kind, {}).keys() | b.get(kind, {}).keys()
            if a.get(kind, {}).get(name) != b.get(kind, {}).get(name)}


async def test_a_version_24_install_upgrades_to_exactly_a_fresh_install(
        pg_dsn: str, fresh: asyncpg.Connection) -> None:
    """A database the migrator of schema version 24 brought to 24, file by file from the
    files as they were shipped, verifies, upgrades, and then holds exactly what a fresh install
    holds: every function's definition, owner, SECURITY DEFINER, SET search_path, cost and rows,
    every view, trigger, table, column, constraint, index and type, every privilege; and
    nothing but the record of the object files and the functions later steps redefined
    differs from what it held at 24."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await migrate_as_shipped_v24(conn)
        at_24 = await catalog(conn)
        assert await migrate(conn) == SCHEMA_VERSION
        upgraded = await catalog(conn)
        expected = await catalog(fresh)
        assert upgraded == expected
        assert _differing(at_24, _without_the_record(expected)) == CHANGED_AFTER_0025
        assert await fence.render(conn) == await fence.render(fresh)
        rows = await conn.fetch("SELECT name FROM fgentic_memory.schema_repeatable ORDER BY name")
        assert [r["name"] for r in rows] == sorted(f.name for f in object_files())
        assert await migrate(conn) == SCHEMA_VERSION  # and verifies from then on
    finally:
        await conn.close()


@pytest.mark.parametrize("edit", [
    "UPDATE fgentic_memory.schema_repeatable SET sha256 = 'edited'"
    " WHERE name = 'functions/enter_scope'",
    "DELETE FROM fgentic_memory.schema_repeatable WHERE name = 'views/readable_memory'",
    "INSERT INTO fgentic_memory.schema_repeatable (name, sha256)"
    " VALUES ('functions/from_another_build', 'x')",
], ids=["edited", "missing", "unknown"])
async def test_object_files_edited_at_the_same_version_are_refused(pg_dsn: str, edit: str) -> None:
    """At this code's version the record must name exactly these files with these checksums:
    a file edited without a version step (or another build's) is refused, not re-applied."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await migrate(conn)
        await conn.execute(edit)
        with pytest.raises(StoreRefusal) as info:
            await migrate(conn)
        assert info.value.reason is Reason.STORE_SCHEMA_MISMATCH
    finally:
        await conn.close()


async def test_a_failing_object_file_rolls_back_its_version_steps(
        pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The object files apply in the transaction of the version steps: one that fails leaves
    the database as it was, at 24 with nothing of 0025."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await migrate_as_shipped_v24(conn)
        before = await catalog(conn)
        broken = ObjectFile("views/broken", "CREATE VIEW fgentic_memory.broken AS SELECT nope;",
                            "0" * 64, ())
        monkeypatch.setattr(schema, "object_files", lambda: (*object_files(), broken))
        with pytest.raises(StoreRefusal):
            await migrate(conn)
        assert await schema_version(conn) == 24
        assert await catalog(conn) == before
    finally:
        await conn.close()
