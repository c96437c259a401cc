"""Fixtures of the HA store tier: one Patroni cluster per module, healed before each test
(helpers: tests/support/ha.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from fgentic_devenv.ha import HaPostgres
from tests.support.ha import DATABASE, HaStore, has_database
from tests.support.polling import until_async
from tests.support.store import migrated_pool


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaPostgres]:
    """One cluster per module: it starts in about 20 s; a kill takes about 21 s, a heal 12-15 s."""
    with HaPostgres(tmp_path_factory.mktemp("ha")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def ha_database(ha_cluster: HaPostgres, tmp_path_factory: pytest.TempPathFactory
                      ) -> Path:
    """The memory database, migrated, and a DSN file naming every member (no attribute)."""
    admin = await asyncpg.connect(ha_cluster.dsn(), timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()
    # asyncpg tries the hosts in order and stops at a member that has not replayed the
    # database yet ("does not exist"): wait until every member has it.
    await until_async(lambda: all(has_database(ha_cluster, m) for m in ha_cluster.members),
                      "the database on every member", 30)
    conn = await asyncpg.connect(ha_cluster.dsn(DATABASE), timeout=10)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        await conn.close()
    pool = await migrated_pool(ha_cluster.dsn(DATABASE), max_size=1)
    await pool.close()
    dsn_file = tmp_path_factory.mktemp("ha-dsn") / "dsn"
    dsn_file.write_text(ha_cluster.hosts_dsn(DATABASE) + "\n")
    return dsn_file


@pytest.fixture
async def ha(ha_cluster: HaPostgres, ha_database: Path) -> HaStore:
    """The module's cluster, healed (three members, a sync standby streaming) for this test."""
    await asyncio.to_thread(ha_cluster.heal)
    return HaStore(ha_cluster, ha_database)
