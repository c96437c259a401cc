"""Versioned, idempotent migration of the ``fgentic_memory`` schema.

Two kinds of SQL file, both in ``sql/`` (docs/memory.md §4 explains the layout):

* version steps, ``NNNN_*.sql``: tables, types, indexes, roles, table grants, settings and data
  changes, applied once each in numeric order and recorded in
  ``fgentic_memory.schema_version`` with their SHA-256;
* one file per function, view and trigger (``functions/``, ``views/``, ``triggers/``), which
  defines its object whole (``CREATE OR REPLACE``, its grants) and is re-applied after the
  version steps whenever a step was applied; ``fgentic_memory.schema_repeatable`` records the
  SHA-256 of each.

All pending work runs in one transaction under a transaction-scoped advisory lock: a failed
file rolls back the version steps with it. Running :func:`migrate` again is a no-op. A database
that records an unknown version, an edited version step, or, at this code's version, other
object files than these is refused with STORE_SCHEMA_MISMATCH rather than silently "repaired".
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

from fgentic_governance.memory import bounds
from fgentic_governance.memory.errors import StoreRefusal, guarded
from fgentic_governance.reasons import Reason
from fgentic_governance.schema_version import MIGRATION_FILE, SCHEMA_VERSION, migration_files

SCHEMA: Final = "fgentic_memory"
RUNTIME_ROLE: Final = "fgentic_memory_runtime"
# pg_advisory_xact_lock key: b"FGMEMORY" as a positive signed 64-bit integer.
_LOCK_KEY: Final = int.from_bytes(b"FGMEMORY", "big")
# The object files' folders; a file names what it needs first in a `-- requires:` first line.
OBJECT_KINDS: Final = ("functions", "views", "triggers")
_REQUIRES: Final = re.compile(r"\A-- requires: (?P<names>[a-z0-9_/, ]+)\n")
_OBJECT_NAME: Final = re.compile(r"^[a-z0-9_]+\.sql$")
# What the version steps 0001-0024 were shipped as, before their restated functions moved
# into the object files: a database that applied them then still verifies.
_SHIPPED: Final = "shipped.sha256"

_BOOTSTRAP: Final = """
CREATE SCHEMA IF NOT EXISTS fgentic_memory;
CREATE TABLE IF NOT EXISTS fgentic_memory.schema_version (
    version integer PRIMARY KEY,
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    sha256: str
    shipped_as: frozenset[str] = frozenset()
    """Earlier checksums this step was shipped with (an install that applied them verifies)."""

    def verifies(self, recorded: str) -> bool:
        return recorded == self.sha256 or recorded in self.shipped_as


@dataclass(frozen=True, slots=True)
class ObjectFile:
    """One function, view or trigger: ``name`` is ``kind/object`` (``functions/refuse``)."""

    name: str
    sql: str
    sha256: str
    requires: tuple[str, ...]


def _sql_folder() -> Any:
    return resources.files("fgentic_governance").joinpath("memory", "sql")


@cache
def _shipped() -> dict[str, frozenset[str]]:
    """File name -> the checksums it was shipped with, from ``sql/shipped.sha256``."""
    found: dict[str, set[str]] = {}
    for line in _sql_folder().joinpath(_SHIPPED).read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        found.setdefault(name, set()).add(digest)
    return {name: frozenset(digests) for name, digests in found.items()}


@cache
def migrations() -> tuple[Migration, ...]:
    """The shipped version steps, numbered 1..N without gaps."""
    found = []
    for item in migration_files():
        match = MIGRATION_FILE.match(item.name)
        if match:
            text = item.read_text(encoding="utf-8")
            found.append(Migration(int(match["version"]), item.name, text, _sha256(text),
                                   _shipped().get(item.name, frozenset())))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError("fgentic_memory migrations must be numbered 1..N without gaps")
    return tuple(found)


@cache
def object_files() -> tuple[ObjectFile, ...]:
    """Every function, view and trigger file, each after the files it requires (ties by name,
    so the order is the same on every run)."""
    files = {}
    for kind in OBJECT_KINDS:
        for item in _sql_folder().joinpath(kind).iterdir():
            if _OBJECT_NAME.match(item.name):
                text = item.read_text(encoding="utf-8")
                match = _REQUIRES.match(text)
                requires = tuple(n.strip() for n in match["names"].split(",")) if match else ()
                name = f"{kind}/{item.name.removesuffix('.sql')}"
                files[name] = ObjectFile(name, text, _sha256(text), requires)
    return tuple(files[name] for name in _ordered(files))


def _ordered(files: dict[str, ObjectFile]) -> list[str]:
    """Kahn's topological order of ``files`` by their requirements, smallest name first."""
    waiting = {name: set(f.requires) for name, f in files.items()}
    for name, needs in waiting.items():
        if not needs <= files.keys():
            raise RuntimeError(f"fgentic_memory {name} requires an unknown file")
    ready = [name for name, needs in waiting.items() if not needs]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for other, needs in waiting.items():
            if name in needs:
                needs.discard(name)
                if not needs:
                    heapq.heappush(ready, other)
    if len(order) != len(files):
        raise RuntimeError("fgentic_memory object files require each other in a circle")
    return order


async def migrate(conn: Any) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version now in force."""
    return await guarded(_migrate(conn))


async def _migrate(conn: Any) -> int:
    async with conn.transaction():
        # Bounded, but long enough to build an index (the pool's bounds are shorter).
        for name, value in bounds.MIGRATION.items():
            await conn.execute("SELECT set_config($1, $2, true)", name, value)
        # Serializes concurrent migrators (several operator replicas at start-up).
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(_BOOTSTRAP)
        applied = await conn.fetch(
            "SELECT version, sha256 FROM fgentic_memory.schema_version ORDER BY version")
        _verify_steps(applied)
        done = {row["version"] for row in applied}
        pending = [m for m in migrations() if m.version not in done]
        for migration in pending:
            if _has_statement(migration.sql):
                await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO fgentic_memory.schema_version (version, name, sha256)"
                " VALUES ($1, $2, $3)",
                migration.version, migration.name, migration.sha256)
        if pending:
            await _apply_objects(conn)
        else:
            await _verify_objects(conn)
    return SCHEMA_VERSION


def _has_statement(sql: str) -> bool:
    """False for a step that is only comments (one whose objects moved into their files):
    the driver fails on a query string without a statement."""
    return any(line.strip() and not line.lstrip().startswith("--") for line in sql.splitlines())


def _verify_steps(applied: Iterable[Any]) -> None:
    shipped = {m.version: m for m in migrations()}
    for row in applied:
        known = shipped.get(row["version"])
        if known is None or not known.verifies(row["sha256"]):
            raise StoreRefusal(Reason.STORE_SCHEMA_MISMATCH)


async def _apply_objects(conn: Any) -> None:
    """Every object file, in order, then the record of exactly these files. All of them, not
    only the changed ones: a version step may have dropped what a file creates."""
    for item in object_files():
        await conn.execute(item.sql)
    await conn.execute("DELETE FROM fgentic_memory.schema_repeatable")
    await conn.executemany(
        "INSERT INTO fgentic_memory.schema_repeatable (name, sha256) VALUES ($1, $2)",
        [(item.name, item.sha256) for item in object_files()])


async def _verify_objects(conn: Any) -> None:
    """At this code's version the database must hold what these files define: an object file
    edited without a version step (or another build's) is refused, never re-applied."""
    rows = await conn.fetch("SELECT name, sha256 FROM fgentic_memory.schema_repeatable")
    if {row["name"]: row["sha256"] for row in rows} != {
            item.name: item.sha256 for item in object_files()}:
        raise StoreRefusal(Reason.STORE_SCHEMA_MISMATCH)


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
