"""The highly available store in tests (tests/ha; its fixtures are in tests/ha/conftest.py): one
etcd + three Patroni members per module (fgentic_devenv/ha.py), reused across kills, healed
before each test, and the store of ours built on it exactly as our processes build theirs:
from a DSN file naming every member without a target session attribute (cli/memory.py's
``store_from_file``, which applies the read-write rule of memory/dsn.py)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import asyncpg

from fgentic_devenv.ha import Failover, HaPostgres, Member
from fgentic_governance.cli.memory import store_from_file
from fgentic_governance.memory import MemoryStore, StoreRefusal, bounds, dsn
from tests.support.polling import until_async

T = TypeVar("T")
DATABASE = "fgentic_ha"
# Bounds: a failover here takes ttl (10 s) + a loop or two; a rejoin rewinds and streams.
NEW_LEADER_SECONDS = 90.0
FIRST_SUCCESS_SECONDS = 90.0


@dataclass
class HaStore:
    """The module's cluster and the DSN file our processes would be given."""

    cluster: HaPostgres
    dsn_file: Path

    def kill_primary(self) -> Failover:
        """SIGKILL the leader's Patroni and its postmaster."""
        return self.cluster.kill_primary()

    async def wait_new_leader(self, failover: Failover) -> None:
        await asyncio.to_thread(self.cluster.wait_new_leader, failover, NEW_LEADER_SECONDS)

    @asynccontextmanager
    async def store(self) -> AsyncIterator[MemoryStore]:
        """Our fenced store from the DSN file, built as the ``memory`` CLI builds it."""
        async with store_from_file(self.dsn_file) as store:
            yield store

    @asynccontextmanager
    async def pool(self) -> AsyncIterator[asyncpg.Pool]:
        """An owner pool built as the operator's and the control API's are: the read-write
        rule on the DSN file, the operator's bounds."""
        pool = await asyncpg.create_pool(dsn.from_file(self.dsn_file),
                                         **bounds.pool_kwargs(min_size=1, max_size=2))
        try:
            yield pool
        finally:
            await pool.close()

    async def on_primary(self, query: str, *args: object) -> list[asyncpg.Record]:
        """Rows read on the member Patroni names leader, over a direct connection to it (no
        multi-host choice involved), after checking it is not in recovery."""
        leader = self.cluster.leader()
        assert leader is not None, "no leader"
        conn = await asyncpg.connect(self.cluster.member_dsn(leader, DATABASE), timeout=5)
        try:
            assert await conn.fetchval("SELECT pg_is_in_recovery()") is False
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()


async def first_success(call: Callable[[], Awaitable[T]], failover: Failover, who: str,
                        timeout: float = FIRST_SUCCESS_SECONDS) -> T:
    """Call until the store answers (bounded), printing the time from the kill to that first
    success: the measure issue 40 asks for, per client. Every refusal meanwhile must be
    STORE_UNAVAILABLE-class (a closed, content-free code), never a hang past its bounds."""
    failures = 0

    async def attempt() -> T:
        nonlocal failures
        try:
            return await call()
        except StoreRefusal:
            failures += 1
            raise

    result = await until_async(attempt, f"{who}'s first successful store call", timeout,
                               holds=lambda _: True, tolerate=(StoreRefusal,))
    print(f"\n[ha] {who}: first successful store call {time.monotonic() - failover.at:.1f}"
          f" s after the kill of {failover.killed.name} ({failures} refused meanwhile)")
    return result


def psql(cluster: HaPostgres, member: Member, query: str, dbname: str = "postgres") -> str:
    """One query on ``member`` (any role) by psql, a blocking call for a polled check: its
    output, empty if the member does not answer. A fresh session each time, so a statistics
    view (pg_stat_activity) is read anew."""
    found = subprocess.run(
        [str(cluster.bin_dir / "psql"), "-XAtq", "-d", cluster.member_dsn(member, dbname),
         "-c", query], capture_output=True, text=True, check=False, timeout=10)
    return found.stdout.strip()


def has_database(cluster: HaPostgres, member: Member) -> bool:
    """Whether ``member`` (any role) lists the test database yet."""
    return psql(cluster, member,
                f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'") == "1"
