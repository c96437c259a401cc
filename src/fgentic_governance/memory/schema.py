"""Versioned, idempotent migration of the ``fgentic_memory`` schema.

The SQL files in ``sql/`` are applied in numeric order, each recorded in
``fgentic_memory.schema_version`` with its SHA-256, all pending ones in one transaction under
a transaction-scoped advisory lock. Running :func:`migrate` again is a no-op; a database that
records an unknown version or an edited file is refused with STORE_SCHEMA_MISMATCH rather than
silently "repaired".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from fgentic_governance.memory import bounds
from fgentic_governance.memory.errors import StoreRefusal, guarded
from fgentic_governance.reasons import Reason
from fgentic_governance.schema_version import MIGRATION_FILE, SCHEMA_VERSION, migration_files

SCHEMA: Final = "fgentic_memory"
RUNTIME_ROLE: Final = "fgentic_memory_runtime"
# pg_advisory_xact_lock key: b"FGMEMORY" as a positive signed 64-bit integer.
_LOCK_KEY: Final = int.from_bytes(b"FGMEMORY", "big")

_BOOTSTRAP: Final = """
CREATE SCHEMA IF NOT EXISTS fgentic_memory;
CREATE TABLE IF NOT EXISTS fgentic_memory.schema_version (
    version integer PRIMARY KEY,
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    sha256: str


@cache
def migrations() -> tuple[Migration, ...]:
    """The shipped migrations, numbered 1..N without gaps."""
    found = []
    for item in migration_files():
        match = MIGRATION_FILE.match(item.name)
        if match:
            text = item.read_text(encoding="utf-8")
            digest = hashlib.sha256(text.encode()).hexdigest()
            found.append(Migration(int(match["version"]), item.name, text, digest))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError("fgentic_memory migrations must be numbered 1..N without gaps")
    return tuple(found)


async def migrate(conn: Any) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version now in force."""
    return await guarded(_migrate(conn))


async def _migrate(conn: Any) -> int:
    shipped = {m.version: m for m in migrations()}
    async with conn.transaction():
        # Bounded, but long enough to build an index (the pool's bounds are shorter).
        for name, value in bounds.MIGRATION.items():
            await conn.execute("SELECT set_config($1, $2, true)", name, value)
        # Serializes concurrent migrators (several operator replicas at start-up).
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(_BOOTSTRAP)
        applied = await conn.fetch(
            "SELECT version, sha256 FROM fgentic_memory.schema_version ORDER BY version")
        for row in applied:
            known = shipped.get(row["version"])
            if known is None or known.sha256 != row["sha256"]:
                raise StoreRefusal(Reason.STORE_SCHEMA_MISMATCH)
        done = {row["version"] for row in applied}
        for migration in migrations():
            if migration.version in done:
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO fgentic_memory.schema_version (version, name, sha256)"
                " VALUES ($1, $2, $3)",
                migration.version, migration.name, migration.sha256)
    return SCHEMA_VERSION


async def schema_version(conn: Any) -> int:
    """The version recorded in the database (0 when the schema has never been migrated)."""
    return await guarded(_schema_version(conn))


async def _schema_version(conn: Any) -> int:
    present = await conn.fetchval("SELECT to_regclass('fgentic_memory.schema_version') IS NOT NULL")
    if not present:
        return 0
    value = await conn.fetchval(
        "SELECT coalesce(max(version), 0) FROM fgentic_memory.schema_version")
    return int(value)


async def require_current(conn: Any) -> None:
    """Refuse with STORE_SCHEMA_MISMATCH unless the database is at :data:`SCHEMA_VERSION`."""
    if await schema_version(conn) != SCHEMA_VERSION:
        raise StoreRefusal(Reason.STORE_SCHEMA_MISMATCH)
