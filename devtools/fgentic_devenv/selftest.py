"""The embedded PostgreSQL's self-test: the pinned pgvector, one vector insert, an HNSW build and
a ``<=>`` query.

hack/bootstrap.sh runs it on every machine, because a pgvector built for other CPUs passes
every test on the machine it was built on and crashes elsewhere; when the server dies, the
error says in one sentence what happened and where to look. ``fgentic-dev pgvector
[--self-test]`` (:func:`run`) installs the portable build, then runs it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from fgentic_devenv import StartupError, pgvector
from fgentic_devenv.postgres import LocalPostgres, wheel_install

DIMENSIONS: Final = 768
ROWS: Final = 500
_STEPS: Final = (
    ("create the extension", "CREATE EXTENSION vector"),
    ("create a vector table", "CREATE TABLE probe (id int PRIMARY KEY, v vector(768))"),
    ("insert vectors", "INSERT INTO probe SELECT i, (SELECT array_agg(sin(i * d))::vector"
                       " FROM generate_series(1, 768) d) FROM generate_series(1, 500) i"),
    ("build an HNSW index", "CREATE INDEX ON probe USING hnsw (v vector_cosine_ops)"),
    ("plan through the index", "SET enable_seqscan = off"),
)
_VERSION: Final = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
_QUERY: Final = ("SELECT count(*) FROM (SELECT id FROM probe ORDER BY v <=> "
                 "(SELECT v FROM probe WHERE id = 7) LIMIT 5) nearest")


async def _probe(dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    done = 0
    try:
        for _, statement in _STEPS:
            await conn.execute(statement)
            done += 1
        version = await conn.fetchval(_VERSION)
        found = await conn.fetchval(_QUERY)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
        step = _STEPS[done][0] if done < len(_STEPS) else "answer a <=> query"
        raise _Failed(step, type(error).__name__) from None
    finally:
        if not conn.is_closed():
            await conn.close()
    # The wheel's control file would make its own 0.8.2 with the new library.
    if version != pgvector.VERSION:
        raise _Failed(f"create pgvector {pgvector.VERSION}", f"it made {version}")
    if found != 5:
        raise _Failed("answer a <=> query", f"{found} rows instead of 5")


class _Failed(Exception):
    def __init__(self, step: str, what: str) -> None:
        super().__init__(step, what)
        self.step, self.what = step, what


def self_test(timeout: float = 120.0) -> str:
    """A one-line success report; :class:`StartupError` with one sentence otherwise."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fgentic-pg-selftest-") as work, \
            LocalPostgres(Path(work)) as server:
        try:
            asyncio.run(asyncio.wait_for(_probe(server.dsn()), timeout))
        except _Failed as failed:
            raise StartupError(
                f"the embedded PostgreSQL failed to {failed.step} ({failed.what}); "
                f"{server.crash_report() or 'it did not crash: see ' + str(server.log)}") from None
        except TimeoutError:
            raise StartupError(f"the embedded PostgreSQL self-test took over {timeout:.0f}s; "
                               f"see {server.log}") from None
    return (f"PostgreSQL self-test passed: {ROWS} vectors of {DIMENSIONS} dimensions, an HNSW "
            f"index and a <=> query on pgvector {pgvector.VERSION} in "
            f"{time.monotonic() - started:.1f}s")


def run(*, test: bool) -> int:
    """``fgentic-dev pgvector [--self-test]`` (hack/bootstrap.sh): the portable pgvector installed
    into the wheel's PostgreSQL, then, with ``test``, :func:`self_test`."""
    try:
        library = pgvector.install(wheel_install())
        print(f"pgvector {pgvector.VERSION} (portable build) at {library}")
        if test:
            print(self_test())
    except StartupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
