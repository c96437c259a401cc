"""The embedded PostgreSQL runs on every x86-64 CPU and keeps what it acknowledged (issue 23 §1).

The wheel's own pgvector was built with -march=native on an AVX-512 machine: it passes every
test there and kills its backend (SIGILL) anywhere else. These tests read the code rather
than run it, so they fail on every machine while that build is installed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from fgentic_devenv import StartupError, isa, pgvector
from fgentic_devenv import postgres as local
from fgentic_devenv.postgres import LocalPostgres
from fgentic_devenv.selftest import self_test
from fgentic_governance.memory.readiness import StoreReadiness
from fgentic_governance.reasons import Reason
from tests.support.polling import until, until_async

pytestmark = pytest.mark.integration

INSTALL = local.wheel_install()
LIBRARY = pgvector.extension_dir(INSTALL) / "vector.so"


def test_the_installed_pgvector_needs_no_cpu_feature_outside_its_cpu_checks() -> None:
    assert pgvector.installed_portably(INSTALL)
    assert isa.check(LIBRARY) == []


def test_no_binary_or_library_of_the_install_needs_avx_outside_a_cpu_check() -> None:
    files = [INSTALL / "bin" / "postgres", *sorted(pgvector.extension_dir(INSTALL).glob("*.so")),
             *sorted(INSTALL.parent.parent.glob("pgserver*.libs/*.so*"))]
    assert len(files) > 10
    assert {str(path): isa.describe(found) for path in files if (found := isa.check(path))} == {}


def test_the_wheels_own_pgvector_is_refused_by_the_same_check() -> None:
    """On any machine: the check sees the AVX-512 that crashes CPUs without it."""
    original = pgvector.extension_dir(INSTALL) / pgvector.ORIGINAL
    findings = {(f.function, f.encoding) for f in isa.check(original)}
    assert {("cosine_distance", "evex"), ("vector_norm", "evex")} <= findings


def test_a_server_does_not_start_on_a_pgvector_that_is_not_the_portable_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "pginstall"
    pgvector.extension_dir(fake).mkdir(parents=True)
    (pgvector.extension_dir(fake) / "vector.so").write_bytes(
        (pgvector.extension_dir(INSTALL) / pgvector.ORIGINAL).read_bytes())
    monkeypatch.setattr(local, "wheel_install", lambda: fake)
    with pytest.raises(StartupError, match="not the portable pgvector build of "):
        LocalPostgres(tmp_path / "work")


def test_a_server_does_not_start_on_the_portable_build_of_an_older_release(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 §5: the wheel's control file, with which CREATE EXTENSION still makes 0.8.2
    (HNSW vacuum defects), or a library stamped by the 0.8.2 build, is not the pinned build."""
    fake = tmp_path / "pginstall"
    pgvector.extension_dir(fake).mkdir(parents=True)
    pgvector.share_dir(fake).mkdir(parents=True)
    library = pgvector.extension_dir(fake) / "vector.so"
    library.write_bytes(LIBRARY.read_bytes())
    stamp = pgvector.extension_dir(fake) / pgvector.STAMP
    control = pgvector.share_dir(fake) / pgvector.CONTROL
    pinned = (pgvector.share_dir(INSTALL) / pgvector.CONTROL).read_text()
    stamp.write_text(f"{pgvector.VERSION} {pgvector.sha256_of(library)}\n")
    control.write_text(pinned)
    assert pgvector.installed_portably(fake)  # the fake is faithful: each change below counts
    control.write_text(pinned.replace(pgvector.VERSION, "0.8.2"))
    monkeypatch.setattr(local, "wheel_install", lambda: fake)
    with pytest.raises(StartupError, match=r"not the portable pgvector build of 0\.8\.6"):
        LocalPostgres(tmp_path / "work")
    control.write_text(pinned)
    stamp.write_text(f"{pgvector.sha256_of(library)}\n")  # what the 0.8.2 build wrote
    assert not pgvector.installed_portably(fake)


def test_the_self_test_inserts_builds_an_index_and_answers_a_query() -> None:
    assert self_test().startswith("PostgreSQL self-test passed: 500 vectors")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalPostgres]:
    with LocalPostgres(tmp_path) as started:
        yield started


def _kill_a_backend(dsn: str) -> None:
    async def kill() -> None:
        victim = await asyncpg.connect(dsn)
        os.kill(await victim.fetchval("SELECT pg_backend_pid()"), signal.SIGKILL)
        victim.terminate()
    asyncio.run(kill())


async def _when_accepting(dsn: str, seconds: float = 30.0) -> asyncpg.Connection:
    # While the postmaster reinitialises it may refuse (57P03), reset the socket, or accept
    # and then close the connection before authentication ends.
    return await until_async(lambda: asyncpg.connect(dsn, timeout=5),
                             "the server accepting connections", seconds, interval=0.05,
                             tolerate=(asyncpg.CannotConnectNowError,
                                       asyncpg.PostgresConnectionError, OSError))


async def _recovered(dsn: str) -> None:
    await (await _when_accepting(dsn)).close()


def test_an_acknowledged_commit_survives_a_crashed_backend(server: LocalPostgres) -> None:
    """With synchronous_commit=off the last commits live in shared WAL buffers, which the
    postmaster throws away when a backend crashes: acknowledged, then gone."""
    dsn = server.dsn()

    async def write() -> None:
        conn = await asyncpg.connect(dsn)
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
        assert await conn.fetchval("SHOW fsync") == "on"
        await conn.execute("CREATE TABLE acknowledged (n int)")
        for n in range(50):
            await conn.execute("INSERT INTO acknowledged VALUES ($1)", n)
        # At once, before the WAL writer's next round (old settings: 0-29 of 50 seen kept).
        os.kill(await conn.fetchval("SELECT pg_backend_pid()"), signal.SIGKILL)
        conn.terminate()

    async def once() -> int:
        conn = await _when_accepting(dsn)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM acknowledged"))
        finally:
            await conn.close()

    async def count() -> int:
        # A connection made before the postmaster noticed the crash is closed by its reset:
        # connect again, within the same bound.
        return await until_async(once, "the acknowledged rows counted", 30.0, interval=0.05,
                                 holds=lambda _: True,
                                 tolerate=(asyncpg.ConnectionDoesNotExistError,
                                           asyncpg.CrashShutdownError))

    asyncio.run(write())
    assert asyncio.run(count()) == 50


def test_a_crashed_backend_is_reported_in_one_sentence(server: LocalPostgres) -> None:
    assert server.crash_report() == ""
    _kill_a_backend(server.dsn())
    until(server.crash_report, "the crash report", 10, interval=0.05)
    assert server.crash_report().startswith(
        "a PostgreSQL backend was killed by signal 9 (Killed) and the server restarted")
    asyncio.run(_recovered(server.dsn()))  # a quick teardown


def test_an_illegal_instruction_names_the_cpu_and_where_to_look(tmp_path: Path) -> None:
    server = LocalPostgres(tmp_path)
    server.log.write_text("LOG:  server process (PID 42) was terminated by signal 4: "
                          "Illegal instruction\n")
    said = server.crash_report()
    assert "signal 4 (Illegal instruction)" in said
    assert "CPU instructions this machine lacks" in said and "invalid opcode" in said


def test_readiness_says_restarting_while_the_server_recovers(
        server: LocalPostgres, caplog: pytest.LogCaptureFixture) -> None:
    """What the memory API's and the control API's /readyz answer, and log once per change."""
    caplog.set_level(logging.INFO, logger="test.readiness")

    async def watch() -> list[Reason]:
        pool = await asyncpg.create_pool(server.dsn(), min_size=0, max_size=2)
        ready = StoreReadiness(pool, logging.getLogger("test.readiness"))
        seen = [await ready()]
        since: list[Reason] = []  # the probes since the last kill

        async def probe() -> list[Reason]:
            since.append(await ready())
            seen.append(since[-1])
            return since

        # A recovery quicker than one probe can fall between two polls: kill again (at most
        # three times) until a probe met it.
        for _ in range(3):
            victim = await asyncpg.connect(server.dsn(), timeout=30)
            os.kill(await victim.fetchval("SELECT pg_backend_pid()"), signal.SIGKILL)
            victim.terminate()
            since.clear()
            # Back to OK after a refusal, or OK for 50 probes on end: the recovery passed.
            await until_async(probe, "the recovery passed", 30, interval=0.02,
                              holds=lambda found: found[-1] is Reason.OK
                              and (set(found) != {Reason.OK} or len(found) >= 50))
            if Reason.STORE_RESTARTING in seen:
                break
        await pool.close()
        return seen

    seen = asyncio.run(watch())
    assert seen[0] is Reason.OK and seen[-1] is Reason.OK
    assert Reason.STORE_RESTARTING in seen
    said = [r.getMessage() for r in caplog.records if r.name == "test.readiness"]
    # The first change leaves OK; a probe that met a closed socket first may precede it.
    assert said[0].split(" ")[2] == "was=OK", said
    assert any(line.startswith("store-ready reason=STORE_RESTARTING was=") and "cause=" in line
               for line in said[:2]), said
    assert said[-1].startswith("store-ready reason=OK was=")
    assert len(said) == len([1 for a, b in itertools.pairwise(seen) if a is not b])
