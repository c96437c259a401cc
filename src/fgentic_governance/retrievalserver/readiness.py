"""Readiness: the corpus database answers with the current search functions, and the
embeddings endpoint accepts connections. Probed in the background, so ``/readyz`` never waits;
one log line (a bounded code) per change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final
from urllib.parse import urlsplit

import asyncpg

from fgentic_governance.retrieval.search import corpus
from fgentic_governance.retrievalserver.codes import RetrievalServerReason

log = logging.getLogger("fgentic_governance.retrievalserver")

PROBE_SECONDS: Final = 5.0
PROBE_TIMEOUT: Final = 2.0
_CURRENT: Final = ("SELECT bool_and(to_regprocedure(f) IS NOT NULL) FROM unnest($1::text[]) AS f")


def _signatures() -> list[str]:
    return [f"{corpus.search_function(rule)}(real[], integer, text[], text[])"
            for rule in corpus.Rule]


class Readiness:
    def __init__(self, pool: asyncpg.Pool, embeddings_url: str, *,
                 dimensions: int = corpus.EMBEDDING_DIMENSIONS) -> None:
        self._pool = pool
        self._dimensions = dimensions
        parts = urlsplit(embeddings_url)
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self.problem: RetrievalServerReason | None = RetrievalServerReason.STORE_UNAVAILABLE

    def ready(self) -> bool:
        return self.problem is None

    async def probe(self) -> RetrievalServerReason | None:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                async with self._pool.acquire() as conn:
                    current = await conn.fetchval(_CURRENT, _signatures())
                    dimensions = await corpus.table_dimensions(conn)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return RetrievalServerReason.STORE_UNAVAILABLE
        # No corpus, functions of another release, or a corpus of another dimension than the
        # embeddings this server asks for: every search would fail.
        if not current or dimensions != self._dimensions:
            return RetrievalServerReason.STORE_UNAVAILABLE
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                _, writer = await asyncio.open_connection(self._host, self._port)
            writer.close()
        except (OSError, TimeoutError):
            return RetrievalServerReason.EMBEDDINGS_UNAVAILABLE
        return None

    async def watch(self) -> None:
        first = True  # the first result is logged too: a store down at start-up says so
        while True:
            try:
                problem = await self.probe()
            except Exception:  # a probe that fails another way: not ready, and keep watching
                problem = RetrievalServerReason.STORE_UNAVAILABLE
            if first or problem != self.problem:
                log.info("readiness %s", "ready" if problem is None else problem.value)
                self.problem, first = problem, False
            await asyncio.sleep(PROBE_SECONDS)
