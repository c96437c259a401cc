"""The governed content store in tests: a migrated pool, the restricted runtime role's
settings, and the scope builders the store tests share."""

from __future__ import annotations

import asyncio
import hashlib
import tarfile
import time
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import asyncpg
import pytest

from fgentic_governance.memory import (
    Access,
    Lease,
    MemoryStore,
    ScopeRecord,
    StoreRefusal,
    bounds,
    migrate,
)
from fgentic_governance.memory.delegated import DelegatedStore
from fgentic_governance.memory.model import Sighting
from fgentic_governance.memoryapi.server import DELEGATE_ROLE
from fgentic_governance.reasons import Reason

# What kagent would connect with: the restricted role, our schema first.
RUNTIME_SETTINGS = {"role": "fgentic_memory_runtime", "search_path": "fgentic_memory, public"}
# What the memory API connects with: the runtime's privileges plus delegation (sql/0010).
DELEGATE_SETTINGS = {**RUNTIME_SETTINGS, "role": DELEGATE_ROLE}
ALICE = "@alice:example.org"
# A real, short lifetime: long enough that a loaded host still reads the row before it
# expires (one second was not), short enough to wait out.
SHORT_TTL = timedelta(seconds=3)
ROOM = "!alice-control:example.org"
# The A2A context of the room a test's turn runs in: every lease names one (sql/0021).
CONTEXT = "ctx-1"


async def migrated_pool(dsn: str, *, max_size: int, **pool_kwargs: Any) -> asyncpg.Pool:
    """An owner (operator) pool on ``dsn`` whose schema is migrated; the caller closes it.

    ``pool_kwargs`` go to ``asyncpg.create_pool`` (``memory.bounds.pool_kwargs()`` for the
    operator's own bounds)."""
    pool = await asyncpg.create_pool(dsn, **{"min_size": 1, **pool_kwargs, "max_size": max_size})
    async with pool.acquire() as conn:
        await migrate(conn)
    return pool


def scope_record(key: str = "team-a/alice-helper", **overrides: Any) -> ScopeRecord:
    """Alice's scope with the helper Agent in team-a, with ``overrides`` to its fields."""
    fields: dict[str, Any] = {
        "scope_key": key, "subject_mxid": ALICE, "origin_kind": "native-local",
        "agent_namespace": "team-a", "agent_name": "helper", "control_room": ROOM,
    }
    fields.update(overrides)
    return ScopeRecord(**fields)


async def enabled(store: MemoryStore, record: ScopeRecord | None = None) -> Access:
    """Ensure and grant ``record`` (default: ``scope_record()``); its Access at that grant."""
    record = record or scope_record()
    await store.ensure_scope(record)
    generation = await store.grant(record.scope_key)
    return Access.for_scope(record, generation)


# -- a stuck runtime: what blocks an erasure fence ---------------------------------------------

GATED_INSERT = """
INSERT INTO memory (agent_name, user_id, content, metadata, expires_at, scope_key,
                    consent_generation)
VALUES ($1, $2, $3, '{}'::jsonb, now() + interval '1 day', $4, $5) RETURNING id
"""
"""A runtime's plain-SQL save (the write gate of sql/0002 runs on it)."""


def store_agent(access: Access) -> str:
    """The ``agent_name`` spelling rows of the scope carry."""
    return f"{access.agent_namespace}/{access.agent_name}"


async def enter(conn: Any, access: Access, mode: str = "capture") -> None:
    """``enter_scope`` for ``access`` in the connection's current transaction."""
    await conn.fetchrow("SELECT * FROM enter_scope($1, $2, $3, $4, $5, $6, $7)",
                        *access.params(), mode)


async def open_insert(conn: Any, access: Access) -> Any:
    """BEGIN, a gated insert left uncommitted (the scope row stays locked): a stuck runtime.
    Returns the open transaction."""
    tx = conn.transaction()
    await tx.start()
    await enter(conn, access)
    await conn.fetchval(GATED_INSERT, store_agent(access), access.subject_mxid, "a fact",
                        access.scope_key, access.generation)
    return tx


async def defeat_bounds(conn: Any) -> None:
    """What a hostile runtime can do after the gate: lift its transaction's bounds."""
    for name in bounds.RUNTIME:
        await conn.execute(f"SET LOCAL {name} = 0")


async def past_turns(store: MemoryStore, access: Access, turns: int) -> None:
    """``turns`` delegations of ``access``'s scope that opened and closed (each a user turn
    the bridge leased): the cadence of automatic saves counts them (sql/0011)."""
    for _ in range(turns):
        lease = await store.open_lease(access, 60, context_id=CONTEXT)
        await store.close_lease(access.scope_key, lease.id)


async def leased_turn(store: MemoryStore, pool: asyncpg.Pool, access: Access, seconds: int,
                      context: str = CONTEXT) -> Lease:
    """A lease of ``access`` naming ``context``, and that context in progress for the lease's
    (Agent, user) as the memory API notes the turn's first session call: the pair's memory
    calls through the memory API are bound to it (sql/0021)."""
    lease = await store.open_lease(access, seconds, context_id=context)
    await DelegatedStore(pool).note_context(access.agent_namespace, access.agent_name,
                                            access.subject_mxid, Sighting(context))
    return lease


async def refused(work: Awaitable[Any]) -> Reason:
    """The reason ``work`` is refused with (it must be)."""
    with pytest.raises(StoreRefusal) as info:
        await work
    return info.value.reason


async def outlive(saved: float, ttl: timedelta = SHORT_TTL) -> None:
    """Wait until a row whose save returned at ``time.monotonic()`` ``saved`` has expired
    (its expiry is its transaction's start plus ``ttl``, never later than that)."""
    await asyncio.sleep(max(0.0, saved + ttl.total_seconds() + 0.1 - time.monotonic()))


# -- the schema as shipped before the object files (sql/0025) ------------------------------------

SHIPPED_V24: Final = Path(__file__).resolve().parents[1] / "golden" / "store-sql-v24.tar.gz"
"""sql/0001-0024 byte for byte as they were shipped (each restating whole function bodies),
before their functions, views and triggers moved into one file each."""


def shipped_v24() -> dict[str, str]:
    """File name -> text of the 24 version steps as shipped, in order."""
    with tarfile.open(SHIPPED_V24, "r:gz") as archive:
        return {member.name: _member_text(archive, member)
                for member in sorted(archive.getmembers(), key=lambda m: m.name)}


def _member_text(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    data = archive.extractfile(member)
    assert data is not None, member.name
    return data.read().decode("utf-8")


async def migrate_as_shipped_v24(conn: Any) -> None:
    """What the migrator of schema version 24 did: every step in one transaction, each
    recorded with the SHA-256 of the file it ran."""
    async with conn.transaction():
        await conn.execute(
            "CREATE SCHEMA IF NOT EXISTS fgentic_memory;"
            " CREATE TABLE IF NOT EXISTS fgentic_memory.schema_version (version integer"
            " PRIMARY KEY, name text NOT NULL, sha256 text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())")
        for name, text in shipped_v24().items():
            await conn.execute(text)
            await conn.execute(
                "INSERT INTO fgentic_memory.schema_version (version, name, sha256)"
                " VALUES ($1, $2, $3)",
                int(name[:4]), name, hashlib.sha256(text.encode()).hexdigest())


# Everything a migration defines in the schema, read from the catalogs: each function's whole
# definition and attributes, views, triggers, relations, columns, constraints, indexes, types,
# and every effective privilege (a NULL ACL read as its default), owners by name. No OIDs.
_CATALOG: Final = {
    "functions": """
        SELECT p.oid::regprocedure::text AS object, pg_get_functiondef(p.oid) AS def,
               pg_get_userbyid(p.proowner) AS owner, p.prosecdef, p.proconfig, p.prorows,
               p.procost, p.provolatile::text, p.proparallel::text, p.proleakproof,
               p.proisstrict,
               ARRAY(SELECT row(pg_get_userbyid(x.grantee), pg_get_userbyid(x.grantor),
                                x.privilege_type, x.is_grantable)::text
                     FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) x
                     ORDER BY 1) AS acl
        FROM pg_proc p WHERE p.pronamespace = 'fgentic_memory'::regnamespace""",
    "relations": """
        SELECT c.relname AS object, c.relkind::text, pg_get_userbyid(c.relowner) AS owner,
               c.reloptions, c.relrowsecurity, c.relforcerowsecurity,
               CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid, true) END AS def,
               ARRAY(SELECT row(pg_get_userbyid(x.grantee), pg_get_userbyid(x.grantor),
                                x.privilege_type, x.is_grantable)::text
                     FROM aclexplode(coalesce(c.relacl, acldefault(
                         CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) x
                     ORDER BY 1) AS acl
        FROM pg_class c WHERE c.relnamespace = 'fgentic_memory'::regnamespace""",
    "columns": """
        SELECT c.relname || '.' || a.attname AS object, a.attnum,
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid) AS def, a.attacl::text[]
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = 'fgentic_memory'::regnamespace AND a.attnum > 0
          AND NOT a.attisdropped""",
    "triggers": """
        SELECT t.tgname || ' ON ' || t.tgrelid::regclass::text AS object,
               pg_get_triggerdef(t.oid, true) AS def, t.tgenabled::text
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'fgentic_memory'::regnamespace AND NOT t.tgisinternal""",
    "constraints": """
        SELECT conname || ' ON ' || conrelid::regclass::text AS object,
               pg_get_constraintdef(oid, true) AS def
        FROM pg_constraint WHERE connamespace = 'fgentic_memory'::regnamespace""",
    "indexes": """
        SELECT indexrelid::regclass::text AS object, pg_get_indexdef(indexrelid) AS def
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relnamespace = 'fgentic_memory'::regnamespace""",
    "types": """
        SELECT t.typname AS object, t.typtype::text, pg_get_userbyid(t.typowner) AS owner,
               ARRAY(SELECT row(pg_get_userbyid(x.grantee), x.privilege_type)::text
                     FROM aclexplode(coalesce(t.typacl, acldefault('T', t.typowner))) x
                     ORDER BY 1) AS acl
        FROM pg_type t WHERE t.typnamespace = 'fgentic_memory'::regnamespace""",
}


async def catalog(conn: Any) -> dict[str, dict[str, tuple[Any, ...]]]:
    """The schema ``fgentic_memory`` as the catalogs hold it: kind -> object -> its facts."""
    dump: dict[str, dict[str, tuple[Any, ...]]] = {}
    for kind, query in _CATALOG.items():
        rows = await conn.fetch(query)
        dump[kind] = {row["object"]: tuple(row.values())[1:] for row in rows}
    return dump
