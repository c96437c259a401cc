"""The local PostgreSQL is 18.x with pgvector, and every test gets its own database."""

from __future__ import annotations

import asyncpg
import pytest

from fgentic_devenv import pgvector

pytestmark = pytest.mark.integration

_seen_databases: list[str] = []


async def test_server_is_postgresql_18(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        available = await conn.fetchval(
            "SELECT array_agg(name ORDER BY name) FROM pg_available_extensions"
            " WHERE name IN ('vector', 'pg_trgm', 'btree_gist')"
        )
    finally:
        await conn.close()
    assert version.startswith("18."), version
    assert available == ["btree_gist", "pg_trgm", "vector"]


async def test_vector_cosine_ordering(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        extversion = await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
        await conn.execute("CREATE TABLE items (name text, embedding vector(3))")
        await conn.execute(
            "INSERT INTO items VALUES ('far', '[-1,0,0]'), ('near', '[1,0.1,0]'),"
            " ('orthogonal', '[0,1,0]'), ('same', '[2,0,0]')"
        )
        rows = await conn.fetch(
            "SELECT name FROM items ORDER BY embedding <=> '[1,0,0]'::vector"
        )
    finally:
        await conn.close()
    # The pinned portable build's release, not the wheel's 0.8.2 (HNSW vacuum defects).
    assert extversion == pgvector.VERSION == "0.8.6"
    assert [r["name"] for r in rows] == ["same", "near", "orthogonal", "far"]


@pytest.mark.parametrize("run", [1, 2])
async def test_each_test_gets_its_own_database(pg_dsn: str, run: int) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        name = await conn.fetchval("SELECT current_database()")
        # Nothing a previous test created is visible here.
        leftover = await conn.fetchval("SELECT to_regclass('public.marker')")
        await conn.execute("CREATE TABLE marker (run int)")
    finally:
        await conn.close()
    assert leftover is None
    assert name not in _seen_databases
    _seen_databases.append(name)
