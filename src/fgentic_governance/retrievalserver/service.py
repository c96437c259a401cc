"""One tool call: the projection still usable, the arguments checked, then the embedding (the
only cost), then the prefilter's one statement. No step runs before the one above it passed,
and there is no other path to the corpus.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import asyncpg

from fgentic_governance.contract import ContractError, VerifiedIdentity
from fgentic_governance.retrieval.search import prefilter
from fgentic_governance.retrieval.search.corpus import EMBEDDING_DIMENSIONS
from fgentic_governance.retrievalserver import tool
from fgentic_governance.retrievalserver.codes import (
    Code,
    RetrievalServerError,
    RetrievalServerReason,
)

Clock = Callable[[], int]


class Embeds(Protocol):
    def embed(self, text: str) -> Awaitable[list[float]]: ...


class RetrievalService:
    """The search of one binding's tool over ``pool`` (the corpus database)."""

    def __init__(self, pool: asyncpg.Pool, embedder: Embeds, *,
                 clock: Clock = lambda: int(time.time()),
                 acquire_seconds: float = 2.0,
                 dimensions: int = EMBEDDING_DIMENSIONS) -> None:
        self._pool = pool
        self._dimensions = dimensions
        self._embedder = embedder
        self._clock = clock
        self._acquire = acquire_seconds

    async def call(self, identity: VerifiedIdentity,
                   arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """The structured result, or RetrievalServerError / the projection's ContractError code."""
        _usable(identity, self._clock())  # expired or unusable: nothing is spent
        query = tool.parse_arguments(arguments)
        vector = await self._embedder.embed(query.text)
        failure: Code | None = None
        try:
            async with self._pool.acquire(timeout=self._acquire) as conn:
                hits = await prefilter.search(conn, identity, vector, query.k,
                                              now=self._clock(), dimensions=self._dimensions)
        except ContractError as exc:  # expired between the embedding and the statement
            failure = exc.code
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            failure = RetrievalServerReason.STORE_UNAVAILABLE
        if failure is not None:  # raised here: a database error's text may quote a value
            raise RetrievalServerError(failure)
        return tool.result(hits)


def _usable(identity: VerifiedIdentity, now: int) -> None:
    code: Code | None = None
    try:
        prefilter.predicate(identity, now=now)
    except ContractError as exc:
        code = exc.code
    if code is not None:
        raise RetrievalServerError(code)
