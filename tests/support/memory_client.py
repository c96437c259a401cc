"""A typed client of an adapted runtime, for tests: save, search, list, forget on ``enter_scope``.

The memory API (kagent's runtime) reaches the store through ``memory.delegated`` under a live
lease; this models the other writer ADR 0023 admits, an adapted runtime that carries the full
claim (scope, principal, Agent, room, generation) itself, so the tests of the SQL fence, of
cost admission and of the content-free sinks can drive it. It holds no check of its own: the
fact check and every limit are the data path's (``delegated.check_content``, ``bounds``).

A client is bound to one :class:`Access`, so every call carries that generation; after a
withdrawal and re-grant the old client's calls fail with STALE_GENERATION. The order of every
content-bearing call is fixed: write policy and size (free) -> cost admission (durable) ->
embedding (paid) -> fenced store call. Embedding-provider failures are reduced to a reason
code, because provider error bodies may quote the text (ADR 0023 §26).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta

from fgentic_governance.memory.bounds import MAX_QUERY_BYTES
from fgentic_governance.memory.cost import CostGate
from fgentic_governance.memory.delegated import check_content, utf8_size
from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.memory.model import (
    DEFAULT_ENVELOPE,
    Access,
    Entry,
    Envelope,
    ErasureReceipt,
    Operation,
    vector_literal,
)
from fgentic_governance.memory.store import MemoryStore
from fgentic_governance.memory.write_policy import MetadataValue
from fgentic_governance.reasons import Reason

Embedder = Callable[[str], Awaitable[Sequence[float]]]
"""Text -> embedding (768 floats), e.g. the governed BGE-M3 route through agentgateway."""


class MemoryClient:
    def __init__(
        self, store: MemoryStore, gate: CostGate, access: Access, *,
        embedder: Embedder | None = None,
    ) -> None:
        self._store = store
        self._gate = gate
        self._access = access
        self._embedder = embedder

    @property
    def access(self) -> Access:
        return self._access

    @property
    def generation(self) -> int:
        return self._access.generation

    async def save(
        self,
        content: str,
        *,
        envelope: Envelope = DEFAULT_ENVELOPE,
        metadata: Mapping[str, MetadataValue] | None = None,
        ttl: timedelta | None = None,
        explicit: bool = True,
    ) -> str:
        """Store one fact; returns its opaque id."""
        check_content(content, metadata)  # refuse before spending any budget or embedding
        items = {Operation.SAVE: 1}
        if self._embedder is not None:
            items[Operation.EMBEDDING] = 1
        await self._gate.admit(self._access, items, explicit=explicit)
        vector = None if self._embedder is None else await self._embed(content)
        return await self._store.save(self._access, content, embedding=vector,
                                      metadata=metadata, envelope=envelope, ttl=ttl)

    async def search(self, query: str, *, limit: int = 8, prefetch: bool = False) -> list[Entry]:
        """Semantic recall; ``prefetch`` marks an automatic session-start subquery."""
        if self._embedder is None:
            raise StoreRefusal(Reason.INVALID_SPEC)
        if utf8_size(query) > MAX_QUERY_BYTES:
            raise StoreRefusal(Reason.FACT_TOO_LARGE)
        operation = Operation.PREFETCH if prefetch else Operation.LOAD
        await self._gate.admit(self._access, {operation: 1, Operation.EMBEDDING: 1},
                               explicit=not prefetch)
        vector = await self._embed(query)
        return await self._store.search(self._access, vector, limit=limit)

    async def list(self, *, limit: int = 20, offset: int = 0) -> list[Entry]:
        """A bounded page for ``!memory inspect`` (an explicit load)."""
        await self._gate.admit(self._access, {Operation.LOAD: 1}, explicit=True)
        return await self._store.list_entries(self._access, limit=limit, offset=offset)

    async def forget(self, entry_id: str) -> ErasureReceipt:
        """Delete exactly one entry and verify. Never rate limited: erasure must not wait."""
        return await self._store.forget_entry(self._access, entry_id)

    async def _embed(self, text: str) -> Sequence[float]:
        assert self._embedder is not None
        failed = False
        try:
            vector = await self._embedder(text)
        except Exception:  # the provider's error text may quote the input; keep only a code
            failed = True
        if failed:
            raise StoreRefusal(Reason.STORE_UNAVAILABLE)
        # A missing or malformed vector is refused before the insert, not stored as a row
        # that search can never find (vector_literal checks shape and every component).
        if vector is None:
            raise StoreRefusal(Reason.INVALID_SPEC)
        vector_literal(vector)
        return vector
